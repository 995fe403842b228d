"""A flood of tiny WebSocket messages next to a normal live stream: how much slower the normal one gets.

    python benchmarks/ws_flood.py [--model DIR] [--messages 80000] [--repeats 3] [--json flood.json]

Starts ``oasr serve --model M`` (default: the tiny causal WeNet fixture) on a free loopback
port. The normal stream sends ``jfk.wav`` (11 s) in 200-ms messages as fast as the server
takes them, then ``"done"``, and is timed from its first message to its ``done`` event:
alone, then while a second connection sends ``--messages`` messages of 2 bytes (one PCM16
sample each) and ``"done"``. Reports the median of each over ``--repeats`` runs and their
ratio, checks that the normal stream's events are the same both ways, and, steadier than wall
time on a loaded machine, the server's CPU time per flood message (the flood alone, from
``/proc/<pid>/stat``).

The issue that asked for it (80,000 two-byte messages made a concurrent stream 12.6 x slower)
measured the server before tiny messages were joined ahead of the engine
(``oasr.server.streaming.MIN_PUSH_S``); run it with ``PYTHONPATH`` pointing at an older
checkout to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLIP = REPO / "data" / "audio" / "jfk.wav"  # the repository's own data (data/README.md)
MODEL = REPO / "data" / "fixtures" / "wenet-u2pp-tiny-causal"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _normal(url: str, pieces: list[bytes]) -> tuple[float, list[dict]]:
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None, ping_interval=None) as ws:
        start = time.perf_counter()
        await ws.send(json.dumps({"sample_rate": 16000}))
        for piece in pieces:
            await ws.send(piece)
        await ws.send("done")
        events = [json.loads(m) async for m in ws]
        return time.perf_counter() - start, events


async def _flood(url: str, n: int) -> None:
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None, ping_interval=None) as ws:
        await ws.send(json.dumps({"sample_rate": 16000}))
        sample = b"\x01\x00"
        for _ in range(n):
            await ws.send(sample)
        await ws.send("done")
        async for _ in ws:
            pass


async def _with_flood(url: str, pieces: list[bytes], n: int) -> tuple[float, list[dict]]:
    flood = asyncio.ensure_future(_flood(url, n))
    await asyncio.sleep(0.2)  # the flood is under way when the normal stream starts
    out = await _normal(url, pieces)
    await flood
    return out


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def main() -> int:
    import httpx
    import numpy as np

    from oasr.audio import load_audio

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(MODEL))
    p.add_argument("--messages", type=int, default=80_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args()

    x = load_audio(CLIP, 16000)
    q = (np.clip(x, -1, 1) * 32767).astype("<i2")
    pieces = [q[i : i + 3200].tobytes() for i in range(0, len(q), 3200)]
    port = _free_port()
    cmd = [sys.executable, "-m", "oasr.cli.main", "serve", "--model", args.model, "--port", str(port)]
    server = subprocess.Popen([*cmd, "--log-level", "warning"], cwd=REPO)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        url = f"ws://127.0.0.1:{port}/v1/audio/stream"
        asyncio.run(_normal(url, pieces))  # warm-up
        alone, flooded = [], []
        for _ in range(args.repeats):
            t, events_alone = asyncio.run(_normal(url, pieces))
            alone.append(t)
            t, events_flooded = asyncio.run(_with_flood(url, pieces, args.messages))
            flooded.append(t)
            if events_flooded != events_alone:
                print("the normal stream's events differ with the flood next to it", file=sys.stderr)
                return 1
        cpu0 = _cpu_s(server.pid)
        asyncio.run(_flood(url, args.messages))
        flood_cpu = _cpu_s(server.pid) - cpu0
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    figures = {
        "messages": args.messages,
        "alone_s": round(statistics.median(alone), 3),
        "with_flood_s": round(statistics.median(flooded), 3),
        "slowdown": round(statistics.median(flooded) / statistics.median(alone), 2),
        "server_cpu_us_per_flood_message": round(flood_cpu / args.messages * 1e6, 1),
        "runs_alone_s": [round(t, 3) for t in alone],
        "runs_with_flood_s": [round(t, 3) for t in flooded],
        "cpus": os.cpu_count(),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
