"""Scale-out on one machine: the single-process CLI against oasr on Ray, same clips, same run.

    python benchmarks/ray_bench.py [--model whisper-base] [--clips 24] [--concurrency 8] \
        [--json benchmarks/results/ray_cpu2.json]

The clips are short English clips of the shared audio (1-12 s, spread evenly by length, as
``serve_bench.py`` picks them). Every side decodes the same way: greedy (beam 1) with the
temperature fallback, ``language=en``, at most 8 rows a batch. Sides, one after the other:

* ``cli 1xT``: ``oasr transcribe FILES -o DIR -f json --threads T`` in a subprocess (T = 2,
  the whole machine, and 1); its wall time includes the model load, so the same command on
  one 1-s clip is timed too and the difference is reported as the CLI's decode time.
* ``serve 1x2``: Ray Serve, 1 replica with 2 torch threads (``num_cpus=2``);
* ``serve 2x1``: Ray Serve, 2 replicas with 1 torch thread each (``num_cpus=1`` each);
  both driven over HTTP by ``--concurrency`` clients, each posting its next clip as soon as
  the previous one is answered; timed from the first request to the last answer, after a
  warm-up request per replica.
* ``data 2x1``: ``oasr transcribe --ray`` (Ray Data), 2 actors with 1 thread each; its wall
  time includes the actors' model loads (as the CLI's does).

Reported per side: wall seconds, RTFx (audio seconds / wall seconds), requests per second,
and how many transcripts equal the first CLI run's. One local Ray (2 CPUs) serves the Ray sides.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_bench import AUDIO, _clips  # noqa: E402  (the same clip choice as the serving benchmark)

REPO = Path(__file__).resolve().parents[1]
DECODE = ["--beam-size", "1", "-l", "en", "--batch-size", "8"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _oasr(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "oasr.cli.main", *args], check=True, cwd=REPO, capture_output=True)
    return time.perf_counter() - started


def bench_cli(model: str, files: list[Path], short: Path, threads: int) -> tuple[dict, dict[str, str]]:
    with tempfile.TemporaryDirectory() as out:
        common = ["--model", model, "--threads", str(threads), "-f", "json", "--no-progress", *DECODE]
        load_s = _oasr("transcribe", str(short), "-o", out + "/one", *common)
        wall = _oasr("transcribe", *map(str, files), "-o", out + "/all", *common)
        texts = {f.name: json.loads((Path(out) / "all" / f"{f.stem}.json").read_text())["text"] for f in files}
    return {"wall_s": wall, "one_clip_s": load_s, "decode_s": wall - load_s}, texts


def bench_serve(model: str, clips: list[dict], replicas: int, threads: int, concurrency: int) -> tuple[dict, dict]:
    import httpx
    from ray import serve

    from oasr.serving.ray import build_app

    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    app = build_app(
        model, num_replicas=replicas, num_cpus=2 / replicas, num_threads=threads, max_batch_size=8, **_greedy()
    )
    serve.run(app, name="bench", route_prefix="/")
    base = f"http://127.0.0.1:{port}/v1/audio/transcriptions"

    def post(clip: dict) -> tuple[str, str]:
        r = httpx.post(
            base, files={"file": (clip["audio"], clip["data"])}, data={"model": model, "language": "en"}, timeout=600
        )
        r.raise_for_status()
        return r.json()["text"], r.headers["x-oasr-replica"]

    try:
        with ThreadPoolExecutor(2 * replicas) as pool:  # warm-up: each replica answers once
            list(pool.map(post, clips[: 2 * replicas]))
        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            answers = list(pool.map(post, clips))
        wall = time.perf_counter() - started
    finally:
        serve.delete("bench")
        serve.shutdown()
    per_replica: dict[str, int] = {}
    for _, replica in answers:
        per_replica[replica] = per_replica.get(replica, 0) + 1
    texts = {clip["audio"]: text for clip, (text, _) in zip(clips, answers)}
    return {"wall_s": wall, "requests_per_replica": sorted(per_replica.values())}, texts


def _greedy() -> dict:
    """Beam 1 for every request, in whichever form this checkout's ServerSettings takes it."""
    import dataclasses

    from oasr.server.settings import ServerSettings

    names = {f.name for f in dataclasses.fields(ServerSettings)}
    return {"request_options": {"beam_size": 1}} if "request_options" in names else {"beam_size": 1}


def bench_data(model: str, files: list[Path]) -> tuple[dict, dict]:
    from oasr.serving.ray_batch import transcribe_dataset

    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        summary = transcribe_dataset(
            files,
            out,
            model=model,
            formats=("json",),
            engine_options={"num_threads": 1, "max_batch_size": 8},
            decode_options={"beam_size": 1, "language": "en"},
            num_actors=2,
            num_cpus=1.0,
            batch_size=8,
            progress=False,
        )
        wall = time.perf_counter() - started
        texts = {f.name: json.loads((Path(out) / f"{f.stem}.json").read_text())["text"] for f in files}
    assert not summary.failed, summary.failed
    return {"wall_s": wall}, texts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="whisper-base")
    ap.add_argument("--clips", type=int, default=24, help="clips to transcribe (default 24)")
    ap.add_argument("--concurrency", type=int, default=8, help="HTTP clients for the Serve sides (default 8)")
    ap.add_argument(
        "--cli-threads", type=int, nargs="+", default=[2, 1], help="torch threads of the CLI runs (default 2 1)"
    )
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = ap.parse_args()

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    clips = _clips(args.clips)
    files = [AUDIO / c["audio"] for c in clips]
    audio_s = sum(c["duration_s"] for c in clips)
    short = min(files, key=lambda f: next(c["duration_s"] for c in clips if c["audio"] == f.name))
    load_before = os.getloadavg()

    results: dict[str, dict] = {}
    reference: dict[str, str] = {}
    for threads in args.cli_threads:
        cli, texts = bench_cli(args.model, files, short, threads)
        reference = reference or texts
        cli["same_text_as_cli"] = sum(texts[k] == reference[k] for k in reference)
        results[f"cli 1x{threads}"] = cli

    import ray

    temp = tempfile.mkdtemp(prefix="rb", dir="/tmp")
    ray.init(address="local", num_cpus=2, include_dashboard=False, _temp_dir=temp, log_to_driver=False)
    try:
        for name, (replicas, threads) in {"serve 1x2": (1, 2), "serve 2x1": (2, 1)}.items():
            figures, texts = bench_serve(args.model, clips, replicas, threads, args.concurrency)
            figures["same_text_as_cli"] = sum(texts[k] == reference[k] for k in reference)
            results[name] = figures
        figures, texts = bench_data(args.model, files)
        figures["same_text_as_cli"] = sum(texts[k] == reference[k] for k in reference)
        results["data 2x1"] = figures
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)

    for figures in results.values():
        figures["rtfx"] = audio_s / figures["wall_s"]
        figures["requests_per_s"] = len(clips) / figures["wall_s"]
    print(f"{len(clips)} clips, {audio_s:.1f} s of audio, model {args.model}, load average {load_before[0]:.1f}")
    print(f"{'side':<10} {'wall s':>8} {'RTFx':>6} {'req/s':>6}  same text as CLI")
    for name, f in results.items():
        same = f.get("same_text_as_cli", len(clips))
        print(f"{name:<10} {f['wall_s']:8.1f} {f['rtfx']:6.2f} {f['requests_per_s']:6.2f}  {same}/{len(clips)}")
    for name, f in results.items():
        if name.startswith("cli"):
            print(f"{name} decode only (wall minus a one-clip run of {f['one_clip_s']:.1f} s): {f['decode_s']:.1f} s, "
                  f"RTFx {audio_s / f['decode_s']:.2f}")  # fmt: skip
    if args.json:
        doc = {
            "model": args.model,
            "clips": [{"audio": c["audio"], "duration_s": c["duration_s"]} for c in clips],
            "audio_s": audio_s,
            "concurrency": args.concurrency,
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "results": results,
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
