"""int8 against float32 end to end: one whisper-base engine of each in one process, the same
corpus clips transcribed by each in turn (the order alternating round by round), at each
thread count; median wall per side, the int8 speedup of every round, and the WER of both.

    python benchmarks/int8_ab.py --clips 12 --threads 1 2 --rounds 3 --json benchmarks/results/int8_ab_cpu2.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "audio"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's oasr, not an installed one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="whisper-base")
    ap.add_argument("--clips", type=int, default=12, help="English clips <= 30 s, evenly spread")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--audio-dir", type=Path, default=SHARED)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch

    import oasr
    from oasr.audio import load_audio
    from oasr.metrics import error_rates

    rows = [json.loads(line) for line in (args.audio_dir / "manifest.jsonl").read_text().splitlines() if line]
    english = [r for r in rows if r["language"] == "en" and r["duration_s"] <= 30]
    chosen = english[:: max(1, len(english) // args.clips)][: args.clips]
    audio = [load_audio(str(args.audio_dir / r["audio"])) for r in chosen]
    refs = [r["text"] for r in chosen]
    audio_s = sum(r["duration_s"] for r in chosen)
    engines = {
        "float32": oasr.ASREngine(args.model, device="cpu"),
        "int8": oasr.ASREngine(args.model, device="cpu", quantize="int8"),
    }
    opts = dict(beam_size=1, temperature=0.0, language="en")
    result = {"model": args.model, "clips": len(chosen), "audio_s": audio_s, "cells": []}
    for threads in args.threads:
        torch.set_num_threads(threads)
        walls: dict[str, list[float]] = {name: [] for name in engines}
        texts: dict[str, list[str]] = {}
        for engine in engines.values():  # warm-up: first-call costs out of the rounds
            engine.transcribe(audio[:1], **opts)
        for r in range(args.rounds):
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            for name in order:
                t0 = time.perf_counter()
                out = engines[name].transcribe(audio, **opts)
                walls[name].append(time.perf_counter() - t0)
                texts[name] = [o.text for o in out]
            took = ", ".join(f"{n} {walls[n][-1]:.2f} s" for n in engines)
            print(f"threads {threads} round {r}: {took}", flush=True)
        wer = {name: error_rates((r, h, "en") for r, h in zip(refs, texts[name]))["en"].rate for name in engines}
        speedups = [f / i for f, i in zip(walls["float32"], walls["int8"])]
        cell = {
            "threads": threads,
            "wall_s": {n: statistics.median(w) for n, w in walls.items()},
            "rounds_s": walls,
            "int8_speedup_median": statistics.median(speedups),
            "int8_speedup_rounds": speedups,
            "wer": wer,
            "same_text": sum(a == b for a, b in zip(texts["float32"], texts["int8"])),
        }
        result["cells"].append(cell)
        print(json.dumps(cell), flush=True)
    print("| threads | float32 wall s | int8 wall s | int8 speedup, median [min–max] | WER f32 / int8 | same text |")
    print("|---:|---:|---:|---:|---:|---:|")
    for c in result["cells"]:
        sp = c["int8_speedup_rounds"]
        print(
            f"| {c['threads']} | {c['wall_s']['float32']:.2f} | {c['wall_s']['int8']:.2f} | "
            f"{c['int8_speedup_median']:.2f}× [{min(sp):.2f}–{max(sp):.2f}] | "
            f"{100 * c['wer']['float32']:.2f} % / {100 * c['wer']['int8']:.2f} % | {c['same_text']}/{len(chosen)} |"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
