"""WER of long-form transcription with and without VAD batching, on one recording made of
every English clip in ``../shared/data/audio/`` laid end to end (``oasr bench``'s ``long``
workload, 0.5 s of silence between clips).

Each variant transcribes the recording once through ``ASREngine`` (whisper-base, greedy,
``language="en"``) and prints wall time, WER, its substitutions / deletions / insertions
and how many chunk tails were decoded again. Variants (any of, in order):

* ``sequential``: no VAD, timestamps (Whisper's own seek over 30-s windows);
* ``vad``: VAD chunks decoded as one batch, no timestamps (faster-whisper's
  ``BatchedInferencePipeline`` default);
* ``vad-ts``: VAD chunks with timestamps (untranscribed tails decoded again);
* ``vad-ts-no-tails``: the same with tail decoding off.

Usage (from the repository root)::

    python benchmarks/vad_accuracy.py sequential vad vad-ts vad-ts-no-tails --threads 2
"""

from __future__ import annotations

import argparse
import time

VARIANTS = ("sequential", "vad", "vad-ts", "vad-ts-no-tails")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="+", choices=VARIANTS)
    parser.add_argument("--model", default="whisper-base")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    import jiwer

    import oasr.engine.chunking as chunking
    from oasr.cli import bench
    from oasr.engine import ASREngine
    from oasr.metrics import normalize_text

    rows = bench.read_manifest(bench.default_audio_dir(), "en")
    total = sum(bench._clip(r).duration_s for r in rows) + bench.SILENCE_S * (len(rows) - 1)
    workload = bench.long_workload(rows, bench.default_cache_dir(), total - 1.0)
    clip = workload.clips[0]
    print(f"recording: {clip.duration_s:.1f} s, {len(rows)} clips")
    engine = ASREngine(args.model, device="cpu", num_threads=args.threads, max_batch_size=args.batch_size)
    tail_s = chunking.TAIL_S
    for variant in args.variants:
        chunking.TAIL_S = float("inf") if variant.endswith("no-tails") else tail_s
        before = engine.splitter.stats().get("vad_tails_decoded", 0)
        t0 = time.perf_counter()
        out = engine.transcribe(
            clip.path,
            beam_size=1,
            temperature=0.0,
            language="en",
            vad_filter=variant != "sequential",
            without_timestamps=variant == "vad",
        )
        wall = time.perf_counter() - t0
        ref, hyp = normalize_text(clip.text, "en"), normalize_text(out.text, "en")
        m = jiwer.process_words(ref, hyp)
        tails = engine.splitter.stats().get("vad_tails_decoded", 0) - before
        print(
            f"{variant:>16}: wall {wall:6.1f} s  WER {m.wer:.2%}  S/D/I {m.substitutions}/{m.deletions}/"
            f"{m.insertions} of {len(ref.split())} words  tails decoded again {tails}",
            flush=True,
        )
    chunking.TAIL_S = tail_s


if __name__ == "__main__":
    main()
