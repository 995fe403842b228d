"""Moonshine's short-clip latency against whisper-base's on the same clip (issue 32: Moonshine's
should be the lower): one 2-5 s clip, batch 1, greedy, English, no timestamps, each model in a
fresh ``oasr bench`` child per round (the bench harness: warm-up on the clip, then the timed
transcription), the two alternating round by round; median wall and CPU seconds.

whisper-base is oasr's bundled real checkpoint; Moonshine is a random checkpoint at a release's
shape (``benchmarks/moonshine_checkpoint.py``), whose decoder rarely ends early and so writes
its whole budget (``int(6.5 * seconds) - 1`` new tokens, ``finish_reason`` "length"), where
whisper-base writes the clip's real transcript (its tokens are counted): both are reported.

    python benchmarks/moonshine_checkpoint.py /tmp/moonshine-tiny --size tiny
    python benchmarks/moonshine_latency.py /tmp/moonshine-tiny --clip speechbrain_spk1_snt2.wav --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    from oasr.cli import bench

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("moonshine", help="a Moonshine checkpoint directory")
    p.add_argument("--whisper", default="whisper-base", help="bundled name or directory")
    p.add_argument("--clip", default="speechbrain_spk1_snt2.wav", help="a clip of the shared corpus")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)

    audio_dir = bench.default_audio_dir()
    if audio_dir is None:
        raise SystemExit("no shared audio (OASR_SHARED_DIR, or ../shared/data/audio)")
    path = str(audio_dir / args.clip)
    seconds = len(bench._decode_16k(path)) / 16000
    models = {"whisper-base": args.whisper, "moonshine": str(Path(args.moonshine).resolve())}
    runs: dict[str, list[dict]] = {name: [] for name in models}
    for r in range(args.rounds):
        for name, model in models.items() if r % 2 == 0 else reversed(models.items()):
            spec = {
                "system": bench.OASR,
                "model": model,
                "workload": "corpus",  # the timed call only (no streamed second call)
                "files": [path],
                "warmup": path,
                "threads": args.threads,
                "batch_size": 1,
                "compute_type": "float32",
                "beam_size": 1,
                "language": "en",
                "timestamps": False,
                "family_defaults": name == "moonshine",  # greedy, English: it takes no Whisper option
            }
            out = bench.run_child(spec, timeout_s=600.0)
            runs[name].append(out)
            print(f"round {r + 1} {name}: {out['wall_s']:.3f} s, {out['finish_reasons'][0]}, {out['texts'][0]!r}")
    summary = {
        name: {
            "wall_s": statistics.median(o["wall_s"] for o in rs),
            "wall_s_all": [round(o["wall_s"], 4) for o in rs],
            "cpu_s": statistics.median(o["cpu_s"] for o in rs),
            "tokens": rs[0]["tokens"],  # in the text's segments (a random model's ids past its pieces: none)
            "finish_reason": rs[0]["finish_reasons"][0],
            "text": rs[0]["texts"][0],
        }
        for name, rs in runs.items()
    }
    ratio = summary["whisper-base"]["wall_s"] / summary["moonshine"]["wall_s"]
    report = {"clip": args.clip, "audio_s": round(seconds, 3), "threads": args.threads, "rounds": args.rounds}
    report |= {"models": models, "summary": summary, "whisper_over_moonshine_wall": ratio}
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
