"""faster-whisper as a peer process: load a model and transcribe files, like `oasr transcribe`.

Used by the benchmarks to time oasr against faster-whisper on the same weights (``oasr bench``
runs its own timed children; this script is for looking at the peer by hand):
    python benchmarks/peer_faster_whisper.py --model whisper-base a.wav [--beam-size 5] [--batched 8]

``--model`` takes oasr's bundled names (a split CTranslate2 model.bin is joined once into
``~/.cache/oasr-bench``) or a CTranslate2 directory.
"""

from __future__ import annotations

import argparse
import sys


def ct2_dir(model: str) -> str:
    """A CTranslate2 directory with one ``model.bin`` (``oasr bench`` joins split weights the same way)."""
    from oasr.cli.bench import ct2_model_dir, default_cache_dir

    return ct2_model_dir(model, default_cache_dir())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--model", default="whisper-base")
    ap.add_argument("--beam-size", type=int, default=5)
    ap.add_argument("--language", default=None)
    ap.add_argument("--compute-type", default="float32")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--batched", type=int, default=0, help="use BatchedInferencePipeline with this batch size")
    args = ap.parse_args()
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    model = WhisperModel(ct2_dir(args.model), device="cpu", compute_type=args.compute_type, cpu_threads=args.threads)
    runner = BatchedInferencePipeline(model) if args.batched else model
    kw = dict(beam_size=args.beam_size, language=args.language)
    if args.batched:
        kw["batch_size"] = args.batched
    for f in args.files:
        segments, _ = runner.transcribe(f, **kw)
        print(f"{f}: " + "".join(s.text for s in segments).strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
