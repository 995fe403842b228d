"""A burst of clients against one ``oasr serve``: what admission does with more work than fits.

    python benchmarks/burst_bench.py [--model whisper-base] [--clients 64] [--json burst.json]
        [--server-arg=--request-timeout=30 ...]

Starts ``python -m oasr.cli.main serve --model M`` (the ``oasr`` on ``PYTHONPATH``, so the same
script measures any checkout), then:

1. burst: ``--clients`` clients post at once, each one clip of the shared audio of
   ``--min-s`` to ``--max-s`` seconds (cycled), and wait for the answer. Reported: the
   count of each status (200 / 429 / 504 / other), the time from the start of the burst to
   the first 429 and to the last answer, the ``Retry-After`` values given;
2. retries: every client answered 429 waits its ``Retry-After`` and posts again, as often as
   it is told to (up to ``--max-attempts``). Reported: whether every client ended with a 200,
   the attempts it took, the time until the last one was answered;
3. solo: each distinct clip once more, alone (the server idle), as the reference: every
   200's text of phases 1-2 is compared with its clip's solo text;
4. ``/metrics`` after all that (refused admissions, deadline misses, engine outcomes).

The load average of the machine is printed before and after (a shared machine's neighbours
slow the server down, which honest admission must absorb).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _serve_process import ServeProcess, free_port

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("OASR_SHARED_DIR", REPO.parent / "shared"))
AUDIO = SHARED / "data" / "audio"


def _clips(min_s: float, max_s: float) -> list[dict]:
    rows = [json.loads(line) for line in open(AUDIO / "manifest.jsonl", encoding="utf-8") if line.strip()]
    picked = sorted((r for r in rows if min_s <= r["duration_s"] <= max_s), key=lambda r: r["audio"])
    for r in picked:
        r["data"] = (AUDIO / r["audio"]).read_bytes()
    return picked


def start_server(model: str, extra: list[str], log: Path) -> ServeProcess:
    """``oasr serve --model model`` (the oasr on ``PYTHONPATH``) with ``extra`` arguments."""
    port = free_port()
    cmd = [sys.executable, "-m", "oasr.cli.main", "serve", "--model", model, "--port", str(port)]
    return ServeProcess([*cmd, "--log-level", "warning", *extra], port, log)


async def _post(client, url: str, model: str, clip: dict):
    return await client.post(
        url + "/v1/audio/transcriptions", files={"file": (clip["audio"], clip["data"])}, data={"model": model}
    )


def _retry_after(response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


async def _run(
    url: str, model: str, clips: list[dict], n_clients: int, max_attempts: int, verbose: bool = False
) -> dict:
    import httpx

    limits = httpx.Limits(max_connections=n_clients + 4, max_keepalive_connections=n_clients + 4)
    first: list[dict] = []
    final: list[dict] = []
    async with httpx.AsyncClient(timeout=3600, limits=limits) as client:
        t0 = time.perf_counter()

        async def one(i: int) -> None:
            clip = clips[i % len(clips)]
            attempts = 0
            while True:
                attempts += 1
                r = await _post(client, url, model, clip)
                at = time.perf_counter() - t0
                record = {"client": i, "clip": clip["audio"], "status": r.status_code, "at_s": at}
                record["retry_after"] = _retry_after(r)
                if r.status_code == 200:
                    record["text"] = r.json()["text"]
                else:
                    record["error"] = r.text[:300]
                if verbose:
                    print(
                        f"{at:7.1f} s  client {i:2d}  {r.status_code}  retry-after {record['retry_after']}",
                        file=sys.stderr,
                        flush=True,
                    )
                if attempts == 1:
                    first.append(record)
                if r.status_code != 429 or attempts >= max_attempts:
                    final.append({**record, "attempts": attempts})
                    return
                await asyncio.sleep(record["retry_after"] or 1.0)

        await asyncio.gather(*(one(i) for i in range(n_clients)))
        total = time.perf_counter() - t0
        solo = {}
        for clip in clips[: min(len(clips), n_clients)]:
            r = await _post(client, url, model, clip)
            solo[clip["audio"]] = r.json()["text"] if r.status_code == 200 else f"<{r.status_code}>"
        metrics = (await client.get(url + "/metrics")).text
    burst_statuses = Counter(r["status"] for r in first)
    refused = [r for r in first if r["status"] == 429]
    wave_end = max(r["at_s"] for r in first)
    final_statuses = Counter(r["status"] for r in final)
    ok = [r for r in first + final if r["status"] == 200]
    mismatched = sorted({(r["clip"], r["text"], solo[r["clip"]]) for r in ok if r["text"] != solo[r["clip"]]})
    return {
        "clients": n_clients,
        "burst_statuses": dict(sorted(burst_statuses.items())),
        "first_429_s": min((r["at_s"] for r in refused), default=None),
        "last_429_s": max((r["at_s"] for r in refused), default=None),
        "burst_last_answer_s": wave_end,
        "retry_after_s": sorted(r["retry_after"] for r in refused if r["retry_after"] is not None),
        "final_statuses": dict(sorted(final_statuses.items())),
        "all_succeeded": final_statuses.get(200, 0) == n_clients,
        "attempts": dict(sorted(Counter(r["attempts"] for r in final).items())),
        "total_s": total,
        "texts_equal_solo": not mismatched,
        "mismatched": [{"clip": c, "text": t, "solo": s} for c, t, s in mismatched],
        "errors": [r["error"] for r in first if r["status"] not in (200, 429)][:3],
        "metrics": [
            line
            for line in metrics.splitlines()
            if line.startswith(("oasr_requests_total", "oasr_admission", "oasr_deadline", "oasr_engine_requests"))
        ],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="whisper-base")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--min-s", type=float, default=5.0)
    ap.add_argument("--max-s", type=float, default=15.0)
    ap.add_argument("--max-attempts", type=int, default=20, help="posts per client before giving up")
    ap.add_argument("--server-arg", action="append", default=[], help="one more `oasr serve` argument")
    ap.add_argument("--log", type=Path, default=Path("/tmp/oasr-burst-server.log"))
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--verbose", action="store_true", help="print every answer as it comes (stderr)")
    args = ap.parse_args()

    if not (AUDIO / "manifest.jsonl").exists():
        sys.exit(
            f"burst_bench: no corpus at {AUDIO} (set OASR_SHARED_DIR to a directory with data/audio/manifest.jsonl)"
        )
    clips = _clips(args.min_s, args.max_s)
    if not clips:
        raise SystemExit(f"no clip of {args.min_s}-{args.max_s} s in {AUDIO}")
    load_before = os.getloadavg()
    server = start_server(args.model, args.server_arg, args.log)
    try:
        result = asyncio.run(_run(server.url, args.model, clips, args.clients, args.max_attempts, args.verbose))
    finally:
        server.stop()
    result.update(
        model=args.model,
        clips=len(clips),
        audio_s=sum(clips[i % len(clips)]["duration_s"] for i in range(args.clients)),
        server_args=args.server_arg,
        oasr=subprocess.run(  # the oasr the server ran (as it imports it)
            [sys.executable, "-c", "import oasr; print(oasr.__file__)"],
            cwd=tempfile.gettempdir(),
            capture_output=True,
            text=True,
        ).stdout.strip(),
        cpus=os.cpu_count(),
        load_before=load_before,
        load_after=os.getloadavg(),
    )
    print(json.dumps({k: v for k, v in result.items() if k != "retry_after_s"}, indent=1))
    print("Retry-After:", result["retry_after_s"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
