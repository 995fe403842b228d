"""Where the time of a whisper-base transcription goes, float32 or int8: torch.profiler over a
few corpus clips, the CPU self time of every op grouped into linear GEMMs, attention, conv,
softmax, layer norm, other tensor ops, and the rest of the wall (Python, the engine, features).

    python benchmarks/int8_profile.py --quantize int8 --clips 4 --threads 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "audio"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's oasr, not an installed one

# op name fragment -> group, first match wins
GROUPS = [
    ("linear_dynamic", "linear (int8 dynamic)"),
    ("quantized::", "linear (int8 dynamic)"),
    ("onednn::", "linear (int8 dynamic)"),
    ("aten::addmm", "linear (float GEMM)"),
    ("aten::mm", "linear (float GEMM)"),
    ("aten::linear", "linear (float GEMM)"),
    ("scaled_dot_product", "attention"),
    ("aten::bmm", "attention"),
    ("aten::baddbmm", "attention"),
    ("aten::matmul", "attention"),
    ("softmax", "softmax"),
    ("conv", "conv"),
    ("layer_norm", "layer norm"),
    ("gelu", "activation"),
]


def group_of(name: str) -> str:
    for frag, group in GROUPS:
        if frag in name:
            return group
    return "other tensor ops"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="whisper-base")
    ap.add_argument("--quantize", choices=("none", "int8"), default="int8")
    ap.add_argument("--clips", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--audio-dir", type=Path, default=SHARED)
    args = ap.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    import oasr

    rows = [json.loads(line) for line in (args.audio_dir / "manifest.jsonl").read_text().splitlines() if line]
    english = [r for r in rows if r["language"] == "en" and r["duration_s"] <= 30]
    step = max(1, len(english) // args.clips)
    paths = [str(args.audio_dir / r["audio"]) for r in english[::step][: args.clips]]
    quantize = None if args.quantize == "none" else args.quantize
    engine = oasr.ASREngine(args.model, quantize=quantize, num_threads=args.threads, max_batch_size=args.batch_size)
    opts = dict(beam_size=1, language="en")
    engine.transcribe(paths[:1], **opts)  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        engine.transcribe(paths, **opts)
        wall = time.perf_counter() - t0
    by_group: dict[str, float] = defaultdict(float)
    top: list[tuple[float, str]] = []
    for ev in prof.key_averages():
        by_group[group_of(ev.key)] += ev.self_cpu_time_total / 1e6
        top.append((ev.self_cpu_time_total / 1e6, ev.key))
    ops = sum(by_group.values())
    print(f"{args.model} quantize={args.quantize} threads={args.threads} clips={len(paths)}: wall {wall:.2f} s")
    print("| part | s | share of wall |\n|---|---:|---:|")
    for group, s in sorted(by_group.items(), key=lambda kv: -kv[1]):
        print(f"| {group} | {s:.2f} | {100 * s / wall:.1f} % |")
    print(
        f"| outside ops (Python, engine; profiler overhead) | {max(wall - ops, 0):.2f} | "
        f"{100 * max(wall - ops, 0) / wall:.1f} % |"
    )
    print("\ntop ops by self CPU s:")
    for s, key in sorted(top, reverse=True)[:15]:
        print(f"  {s:7.3f}  {key}")
    del torch


if __name__ == "__main__":
    main()
