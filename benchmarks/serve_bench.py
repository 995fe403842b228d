"""Serving throughput: ``oasr serve`` against faster-whisper behind an equivalent HTTP server.

    python benchmarks/serve_bench.py [--model whisper-base] [--concurrency 1 8 32] [--json serve_bench.json]

Both systems run as separate server processes, one after the other in the same run,
on the same weights (faster-whisper reads the CTranslate2 ``model.bin`` the bundled
model ships, joined once by ``peer_faster_whisper.ct2_dir``) and the same clips
(short English clips of the shared audio, 1-12 s, cycled). Each is driven over HTTP
on loopback by the same client: ``C`` concurrent connections, each sending its next
multipart ``POST /v1/audio/transcriptions`` as soon as the previous one is answered.

* oasr: ``oasr serve --model M`` (continuous batching across requests; greedy with
  the temperature fallback, the server's defaults).
* faster-whisper: ``python benchmarks/serve_bench.py --peer-server``, a minimal
  FastAPI/uvicorn server (this file) whose route runs ``BatchedInferencePipeline.transcribe``
  (batch_size 8, its defaults: VAD, no timestamps) in uvicorn's thread pool on one
  ``WhisperModel`` (float32, ``--peer-workers`` CTranslate2 workers; concurrent requests
  beyond that wait for a worker). The pipeline batches the VAD chunks of one file,
  not different requests.

Decoding is the same on both sides: beam 1, temperature fallback (0.0 ... 1.0,
best_of 5), ``language=en`` (no detection). Reported per concurrency level: requests /
second, audio seconds / second, latency p50 / p95, the server process's peak RSS so far, and the WER of the transcripts
against the clips' reference texts (a sanity check that both did the same work).
A table is printed and everything is written as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from _serve_process import ServeProcess, free_port

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("OASR_SHARED_DIR", REPO.parent / "shared"))
AUDIO = SHARED / "data" / "audio"


# ---------------------------------------------------------------------------
# The faster-whisper peer server


def peer_server(args: argparse.Namespace) -> int:
    import io

    import uvicorn
    from faster_whisper import BatchedInferencePipeline, WhisperModel
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from peer_faster_whisper import ct2_dir

    model = WhisperModel(
        ct2_dir(args.model),
        device="cpu",
        compute_type="float32",
        cpu_threads=args.threads or os.cpu_count() or 0,
        num_workers=args.peer_workers,
    )
    pipeline = BatchedInferencePipeline(model)

    def transcribe(data: bytes, language: str | None) -> dict:
        segments, info = pipeline.transcribe(io.BytesIO(data), language=language, beam_size=1, batch_size=8)
        return {"text": "".join(s.text for s in segments).strip(), "duration": info.duration}

    async def health(request):
        return JSONResponse({"status": "ok"})

    async def create(request):
        async with request.form() as form:
            data = await form["file"].read()
            language = form.get("language") or None
        return JSONResponse(await run_in_threadpool(transcribe, data, language))

    app = Starlette(routes=[Route("/health", health), Route("/v1/audio/transcriptions", create, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    return 0


# ---------------------------------------------------------------------------
# Driving a server


async def _drive(port: int, model: str, clips: list[dict], n_requests: int, concurrency: int, language: str) -> dict:
    import httpx

    url = f"http://127.0.0.1:{port}/v1/audio/transcriptions"
    jobs = asyncio.Queue()
    for i in range(n_requests):
        jobs.put_nowait(clips[i % len(clips)])
    results: list[tuple[dict, str, float]] = []
    errors: list[str] = []

    async def worker(client: httpx.AsyncClient) -> None:
        while True:
            try:
                clip = jobs.get_nowait()
            except asyncio.QueueEmpty:
                return
            t0 = time.perf_counter()
            r = await client.post(
                url,
                files={"file": (clip["audio"], clip["data"])},
                data={"model": model, "language": language},
            )
            latency = time.perf_counter() - t0
            if r.status_code != 200:
                errors.append(f"{r.status_code}: {r.text[:200]}")
                continue
            results.append((clip, r.json()["text"], latency))

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=3600, limits=limits) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    latencies = sorted(r[2] for r in results)
    audio_s = sum(r[0]["duration_s"] for r in results)
    from oasr.metrics import error_rates

    wer = error_rates((c["text"], text, "en") for c, text, _ in results).get("en")
    return {
        "concurrency": concurrency,
        "requests": len(results),
        "errors": len(errors),
        "error_samples": errors[:3],
        "wall_s": wall,
        "requests_per_s": len(results) / wall,
        "audio_s_per_s": audio_s / wall,
        "audio_s": audio_s,
        "latency_p50_s": statistics.median(latencies) if latencies else None,
        "latency_p95_s": latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))] if latencies else None,
        "wer": wer.rate if wer else None,
    }


def _clips(n: int) -> list[dict]:
    rows = [json.loads(line) for line in open(AUDIO / "manifest.jsonl", encoding="utf-8") if line.strip()]
    rows = sorted(
        (r for r in rows if r["language"] == "en" and 1.0 <= r["duration_s"] <= 12.0),
        key=lambda r: (r["duration_s"], r["audio"]),
    )
    picked = [rows[round(i * (len(rows) - 1) / (n - 1))] for i in range(n)]
    for r in picked:
        r["data"] = (AUDIO / r["audio"]).read_bytes()
    return picked


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="whisper-base")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--requests", type=int, nargs="+", default=None, help="requests per level (default 2C, >= 16)")
    ap.add_argument("--clips", type=int, default=16)
    ap.add_argument("--language", default="en")
    ap.add_argument("--max-batch-size", type=int, default=8, help="oasr serve --max-batch-size")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads for both (0: all / library default)")
    ap.add_argument(
        "--request-timeout", type=float, default=None, help="oasr serve --request-timeout (a busy machine: a long one)"
    )
    ap.add_argument("--peer-workers", type=int, default=1, help="CTranslate2 workers of the faster-whisper server")
    ap.add_argument("--systems", nargs="+", default=["oasr", "faster-whisper"], choices=["oasr", "faster-whisper"])
    ap.add_argument("--json", default="serve_bench.json", help="where to write the results")
    ap.add_argument("--peer-server", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer_server:
        return peer_server(args)

    clips = _clips(args.clips)
    levels = args.concurrency
    per_level = args.requests or [max(16, 2 * c) for c in levels]
    if len(per_level) == 1:
        per_level = per_level * len(levels)
    logs = Path(os.environ.get("TMPDIR", "/tmp"))
    results: dict = {
        "model": args.model,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "clips": [{"audio": c["audio"], "duration_s": c["duration_s"]} for c in clips],
        "settings": {
            "language": args.language,
            "beam_size": 1,
            "oasr_max_batch_size": args.max_batch_size,
            "peer": f"BatchedInferencePipeline(batch_size=8) in a FastAPI server, {args.peer_workers} CT2 worker(s)",
        },
        "systems": {},
    }
    for system in args.systems:
        port = free_port()
        if system == "oasr":
            cmd = [sys.executable, "-m", "oasr.cli.main", "serve", "--model", args.model, "--port", str(port)]
            cmd += ["--max-queue", "1024", "--max-batch-size", str(args.max_batch_size), "--log-level", "warning"]
            cmd += ["--device", "cpu", "--threads", str(args.threads)]
            if args.request_timeout is not None:
                cmd += ["--request-timeout", str(args.request_timeout)]
            served = args.model
        else:
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--peer-server",
                "--port",
                str(port),
                "--model",
                args.model,
            ]
            cmd += ["--threads", str(args.threads), "--peer-workers", str(args.peer_workers)]
            served = args.model
        print(f"== {system}: starting ({' '.join(cmd[1:])})", file=sys.stderr)
        server = ServeProcess(cmd, port, logs / f"serve_bench_{system}.log", start_timeout_s=300)
        try:
            asyncio.run(_drive(port, served, clips, 4, 2, args.language))  # warm-up
            rows = []
            for c, n in zip(levels, per_level):
                row = asyncio.run(_drive(port, served, clips, n, c, args.language))
                row["server_peak_rss_mb"] = server.peak_rss_mb()  # since start: load, warm-up, levels so far
                rows.append(row)
                print(
                    f"   C={c:<3d} {row['requests']} requests in {row['wall_s']:.1f} s: "
                    f"{row['requests_per_s']:.2f} req/s, {row['audio_s_per_s']:.1f} audio-s/s",
                    file=sys.stderr,
                )
            results["systems"][system] = rows
        finally:
            server.stop()

    header = (
        f"{'system':<16}{'C':>4}{'req':>6}{'wall s':>9}{'req/s':>8}{'audio-s/s':>11}{'p50 s':>8}{'p95 s':>8}"
        f"{'WER':>7}{'peak MiB':>10}"
    )
    print(header)
    print("-" * len(header))

    def num(x, spec: str, scale: float = 1.0) -> str:
        return "-" if x is None else format(x * scale, spec)

    for system, rows in results["systems"].items():
        for r in rows:
            print(
                f"{system:<16}{r['concurrency']:>4}{r['requests']:>6}{r['wall_s']:>9.1f}{r['requests_per_s']:>8.2f}"
                f"{r['audio_s_per_s']:>11.1f}{num(r['latency_p50_s'], '.2f'):>8}{num(r['latency_p95_s'], '.2f'):>8}"
                f"{num(r['wer'], '.1f', 100):>6}%{num(r.get('server_peak_rss_mb'), '.0f'):>10}"
            )
            if r["errors"]:
                print(f"    {r['errors']} failed requests, e.g. {r['error_samples'][0]}")
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    print(f"\nwritten: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
