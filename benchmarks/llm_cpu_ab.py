"""In-process A/B of two CPU paths of the ``llm`` strategy against transformers, on a benchmark
checkpoint (``benchmarks/speech_llm_checkpoints.py``) and the same clips, batch 8:

* ``before``: an untied LM head through ``F.linear`` and prefill groups padded without limit;
* ``after``: the head as ``(W @ x.T).T`` (``layers.embedding.table_logits``) and, on a CPU, a
  prefill group's padding under ``CPU_PREFILL_MAX_PADDING`` of its tokens (the code as it is);
* ``transformers``: the ``oasr bench`` transformers child's timed batch function.

One engine serves both oasr sides (the two paths switched between calls); the three sides
alternate in a rotating order each round, after a warm-up of each. Reported per side: median
wall and process CPU seconds (every thread's, steadier than wall on a shared machine), and the
ratios of the medians; the transcripts of ``before`` and ``after`` are checked equal.

    python benchmarks/llm_cpu_ab.py /tmp/bench32/granite-speech --audio-dir /tmp/bench32/corpus --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", type=Path)
    p.add_argument("--audio-dir", type=Path, required=True, help="a folder with manifest.jsonl")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)

    import torch
    import torch.nn.functional as F

    import oasr
    from oasr.cli import bench
    from oasr.engine.decode import llm
    from oasr.models.decoders import causal_lm

    torch.set_num_threads(args.threads)
    paths = [row["path"] for row in bench.read_manifest(args.audio_dir, None)][: args.batch_size]
    engine = oasr.ASREngine(str(args.model), device="cpu", num_threads=args.threads, max_batch_size=args.batch_size)
    after_paths = (causal_lm.table_logits, llm.CPU_PREFILL_MAX_PADDING)

    def oasr_side(before: bool):
        def run() -> list[str]:
            causal_lm.table_logits, llm.CPU_PREFILL_MAX_PADDING = (
                ((lambda x, w: F.linear(x, w)), float("inf")) if before else after_paths
            )
            try:
                return [o.text for o in engine.transcribe(paths)]
            finally:
                causal_lm.table_logits, llm.CPU_PREFILL_MAX_PADDING = after_paths

        return run

    captured = {}

    def capture(spec, marks, warm, run):  # the child's timed batch function, without its timing
        captured["run"] = run
        return {}

    spec = {"files": paths, "warmup": paths[0], "threads": args.threads, "batch_size": args.batch_size}
    bench._timed, timed = capture, bench._timed
    try:
        bench._transformers_child({**spec, "model_dir": str(args.model), "language": None})
    finally:
        bench._timed = timed
    sides = {
        "before": oasr_side(True),
        "after": oasr_side(False),
        "transformers": lambda: [t for t, _ in captured["run"](paths)],
    }
    texts = {name: run() for name, run in sides.items()}  # warm-up
    assert texts["before"] == texts["after"], "the two oasr paths gave different transcripts"
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(args.rounds):
        for name in names[r % 3 :] + names[: r % 3]:
            t, c = time.perf_counter(), time.process_time()
            sides[name]()
            times[name].append((time.perf_counter() - t, time.process_time() - c))
            print(f"round {r + 1} {name}: wall {times[name][-1][0]:.2f} s, CPU {times[name][-1][1]:.2f} s", flush=True)
    med = {
        n: {"wall_s": statistics.median(w for w, _ in v), "cpu_s": statistics.median(c for _, c in v)}
        for n, v in times.items()
    }
    report = {
        "model": str(args.model),
        "clips": len(paths),
        "threads": args.threads,
        "rounds": args.rounds,
        "runs": {n: [{"wall_s": round(w, 3), "cpu_s": round(c, 3)} for w, c in v] for n, v in times.items()},
        "median": med,
        "after_over_before_cpu": med["before"]["cpu_s"] / med["after"]["cpu_s"],
        "transformers_over_before_cpu": med["transformers"]["cpu_s"] / med["before"]["cpu_s"],
        "transformers_over_after_cpu": med["transformers"]["cpu_s"] / med["after"]["cpu_s"],
        "transformers_over_before_wall": med["transformers"]["wall_s"] / med["before"]["wall_s"],
        "transformers_over_after_wall": med["transformers"]["wall_s"] / med["after"]["wall_s"],
        "same_text_as_transformers": sum(a == b for a, b in zip(texts["after"], texts["transformers"])),
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
