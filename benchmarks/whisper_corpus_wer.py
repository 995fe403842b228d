"""WER of oasr and faster-whisper on the same real Whisper weights over every English clip of the
shared corpus (<= 30 s), greedy, language forced, in one run. The test suite checks a quarter of
the clips (tests/engine/test_whisper_real.py); this is the whole measurement.

    python benchmarks/whisper_corpus_wer.py [--models whisper-base whisper-tiny.en] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "audio"


def _fw_dir(name: str, scratch: Path) -> Path:
    from oasr.models.bundled import bundled_path
    from oasr.models.formats.ctranslate2 import find_model_parts

    src = bundled_path(name)
    if src is None:
        raise SystemExit(f"{name} is not installed")
    parts = find_model_parts(src)
    if len(parts) == 1:
        return src
    dst = scratch / name
    dst.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "tokenizer.json", "vocabulary.txt"):
        if (src / f).exists():
            shutil.copy(src / f, dst / f)
    with open(dst / "model.bin", "wb") as out:
        for p in parts:
            out.write(p.read_bytes())
    return dst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["whisper-base", "whisper-tiny.en"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--audio-dir", type=Path, default=SHARED)
    args = parser.parse_args()

    import faster_whisper

    import oasr
    from oasr.audio import load_audio
    from oasr.metrics import error_rates

    rows = [json.loads(line) for line in (args.audio_dir / "manifest.jsonl").read_text().splitlines() if line]
    english = [r for r in rows if r["language"] == "en" and r["duration_s"] <= 30]
    audio = [load_audio(str(args.audio_dir / r["audio"])) for r in english]
    opts = dict(beam_size=1, temperature=0.0, language="en")
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models:
            fw = faster_whisper.WhisperModel(
                str(_fw_dir(name, Path(scratch))), device="cpu", compute_type="float32", cpu_threads=args.threads
            )
            engine = oasr.ASREngine(name, max_batch_size=8, num_threads=args.threads)
            t0 = time.perf_counter()
            outs = engine.transcribe(audio, **opts)
            t_oasr = time.perf_counter() - t0
            t0 = time.perf_counter()
            theirs_text = ["".join(s.text for s in fw.transcribe(a, **opts)[0]) for a in audio]
            t_fw = time.perf_counter() - t0
            ours = error_rates([(r["text"], o.text, "en") for r, o in zip(english, outs)])["en"]
            theirs = error_rates([(r["text"], t, "en") for r, t in zip(english, theirs_text)])["en"]
            print(
                f"{name}: {len(english)} clips, {ours.reference_units} words: oasr WER {ours.rate:.4f} "
                f"({t_oasr:.1f} s), faster-whisper WER {theirs.rate:.4f} ({t_fw:.1f} s)"
            )


if __name__ == "__main__":
    main()
