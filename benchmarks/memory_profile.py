"""Where the memory of a Whisper transcription goes, stage by stage, in a fresh process.

Each run is a child process (this file with ``--child``) that prints, after each stage, its
resident set (``VmRSS``) and its peak so far (``VmHWM``, the same figure as ``ru_maxrss`` and
``/usr/bin/time -v``'s "Maximum resident set size"), in MiB:

* oasr: python start, ``import oasr``, ``import torch``, ``from oasr.engine import ASREngine``,
  the engine built (model loaded), a warm-up transcription, then the workload;
* faster-whisper: python start, ``import faster_whisper``, the model loaded, warm-up, workload.

Workloads (the shared corpus, English clips):

* ``corpus``: ``--corpus-size`` clips of at most 30 s, spread evenly by name, transcribed in one
  call (oasr: batched across files, ``--batch-size``; faster-whisper: ``BatchedInferencePipeline``
  per file at that batch size, as ``oasr bench`` runs its corpus peer);
* ``long``: the clips concatenated to a recording longer than ``--long-min-seconds`` (the
  recording ``oasr bench`` writes), decoded sequentially with timestamps (faster-whisper:
  ``WhisperModel.transcribe``).

Greedy, temperature 0, ``language="en"``, ``--threads`` threads on both sides. Peak RSS does not
depend on other work on the machine, so one run per cell is enough.

    python benchmarks/memory_profile.py --systems oasr faster-whisper --workloads corpus long \
        --batch-sizes 1 8 --compute-type float32 --markdown out.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

MARK = "OASR_MEM "


def _status_mb() -> tuple[float, float]:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def _mark(stage: str) -> None:
    rss, peak = _status_mb()
    print(MARK + json.dumps({"stage": stage, "rss_mb": round(rss, 1), "peak_mb": round(peak, 1), "t": time.time()}))
    sys.stdout.flush()


def _child(spec: dict) -> None:
    _mark("python start")
    options = {"language": "en", "beam_size": 1, "temperature": 0.0, "without_timestamps": spec["workload"] != "long"}
    if spec["system"] == "oasr":
        import oasr  # noqa: F401

        _mark("import oasr")
        import torch  # noqa: F401

        _mark("import torch")
        from oasr.engine import ASREngine

        _mark("import oasr.engine")
        extra = {"quantize": "int8"} if spec["compute_type"] == "int8" else {}
        if spec.get("dtype"):
            extra["dtype"] = spec["dtype"]
        engine = ASREngine(
            spec["model"], device="cpu", num_threads=spec["threads"], max_batch_size=spec["batch_size"], **extra
        )
        _mark("model loaded")
        engine.transcribe(spec["warmup"], **options)
        _mark("warm-up")
        outputs = engine.transcribe(spec["files"], **options)
        texts = [o.text.strip() for o in outputs]
    else:
        from faster_whisper import BatchedInferencePipeline, WhisperModel

        _mark("import faster_whisper")
        model = WhisperModel(
            spec["ct2_dir"], device="cpu", compute_type=spec["compute_type"], cpu_threads=spec["threads"]
        )
        _mark("model loaded")
        if spec["workload"] == "corpus":
            runner = BatchedInferencePipeline(model)
            options["batch_size"] = spec["batch_size"]
        else:
            runner = model
            options["vad_filter"] = False

        def one(path: str) -> str:
            segments, _ = runner.transcribe(path, **options)
            return "".join(s.text for s in segments).strip()

        one(spec["warmup"])
        _mark("warm-up")
        texts = [one(p) for p in spec["files"]]
    _mark(spec["workload"] + (f" batch {spec['batch_size']}" if spec["workload"] == "corpus" else ""))
    print(MARK + json.dumps({"texts": texts}))


def _workload_files(args: argparse.Namespace, workload: str) -> list[str]:
    from oasr.cli.bench import corpus_workload, default_cache_dir, long_recording, read_manifest

    rows = read_manifest(Path(args.audio_dir), "en")
    if workload == "long":
        path, _ = long_recording(rows, default_cache_dir(), args.long_min_seconds)
        return [str(path)]
    short = [r for r in rows if r["duration_s"] <= 30.0]
    return corpus_workload(short, args.corpus_size).paths


def run_one(args: argparse.Namespace, system: str, workload: str, batch_size: int, files: list[str]) -> dict:
    from oasr.cli.bench import ct2_model_dir, default_cache_dir

    spec = {
        "system": system,
        "workload": workload,
        "batch_size": batch_size,
        "threads": args.threads,
        "compute_type": args.compute_type,
        "dtype": args.dtype,
        "model": args.model,
        "ct2_dir": ct2_model_dir(args.model, default_cache_dir()) if system != "oasr" else None,
        "files": files,
        "warmup": files[0] if workload == "corpus" else args.warmup,
    }
    env = {**os.environ, **{k: str(args.threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}}
    env.update(dict(kv.split("=", 1) for kv in args.env))
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, __file__, "--child"], input=json.dumps(spec), capture_output=True, text=True, env=env
    )
    rows = [json.loads(line[len(MARK) :]) for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not rows or "texts" not in rows[-1]:
        raise SystemExit(f"{system} {workload} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {
        "system": system,
        "workload": workload,
        "batch_size": batch_size,
        "stages": rows[:-1],
        "texts": rows[-1]["texts"],
    }


def markdown(results: list[dict]) -> str:
    lines = ["| system | workload | batch | " + " | ".join(["stage: RSS / peak MiB"]) + " |", "|---|---|---:|---|"]
    for r in results:
        stages = "; ".join(f"{s['stage']}: {s['rss_mb']:.0f} / {s['peak_mb']:.0f}" for s in r["stages"])
        lines.append(f"| {r['system']} | {r['workload']} | {r['batch_size']} | {stages} |")
    return "\n".join(lines)


def main() -> int:
    if "--child" in sys.argv:
        _child(json.loads(sys.stdin.read()))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", nargs="+", default=["oasr", "faster-whisper"])
    ap.add_argument("--workloads", nargs="+", default=["corpus", "long"], choices=["corpus", "long"])
    ap.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--compute-type", default="float32", choices=["float32", "int8"])
    ap.add_argument("--dtype", default=None, help="oasr's compute dtype (default: the family's, float32 on CPU)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default="whisper-base")
    ap.add_argument("--audio-dir", default=str(Path(__file__).resolve().parents[1].parent / "shared/data/audio"))
    ap.add_argument("--corpus-size", type=int, default=36)
    ap.add_argument("--long-min-seconds", type=float, default=600.0)
    ap.add_argument("--warmup", default=None, help="the long workload's warm-up clip (default: the corpus's first)")
    ap.add_argument("--env", nargs="*", default=[], help="NAME=VALUE set in the children (e.g. MALLOC_ARENA_MAX=2)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args()
    if not Path(args.audio_dir, "manifest.jsonl").is_file():
        from oasr.cli.bench import default_audio_dir

        args.audio_dir = str(default_audio_dir())
    corpus = _workload_files(args, "corpus")
    args.warmup = args.warmup or corpus[0]
    results = []
    for workload in args.workloads:
        files = corpus if workload == "corpus" else _workload_files(args, "long")
        for batch in args.batch_sizes if workload == "corpus" else [1]:
            for system in args.systems:
                r = run_one(args, system, workload, batch, files)
                results.append(r)
                last = r["stages"][-1]
                print(f"{system} {workload} batch {batch}: peak {last['peak_mb']:.0f} MiB", file=sys.stderr)
    table = markdown(results)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": vars(args), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
