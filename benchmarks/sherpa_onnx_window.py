"""How much of sherpa-onnx's Whisper speed is its shorter encoder window (issue 30).

sherpa-onnx's Whisper appends 10 s of padding to a clip instead of padding it to Whisper's 30-s
window, so a 5-s clip is encoded as 15 s. This times its float32 export of the same weights (the one
``oasr bench --peer sherpa-onnx`` writes into its cache; run that once first) at ``--threads`` on the
first ``--clips`` clips of a saved ``oasr bench`` corpus, as they are and padded with silence to 20 s
(so its encoder sees a 30-s window, as openai-whisper, faster-whisper and oasr encode), rounds
alternating::

    python benchmarks/sherpa_onnx_window.py [--report benchmarks/results/peers_cpu2.json] [--audio-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import sherpa_onnx
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oasr.cli.bench import default_audio_dir, default_cache_dir  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--report", type=Path, default=ROOT / "benchmarks/results/peers_cpu2.json")
    p.add_argument("--audio-dir", type=Path, default=None, help="the corpus folder (default: bench's)")
    p.add_argument("--clips", type=int, default=12)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--pad-to", type=float, default=20.0, help="seconds each clip is padded to (default 20)")
    args = p.parse_args()
    audio_dir = args.audio_dir or default_audio_dir()
    exports = sorted(default_cache_dir().glob("sherpa-onnx-*"))
    if audio_dir is None or not exports:
        sys.exit(
            "needs the bench corpus (--audio-dir) and a sherpa-onnx export: run oasr bench --peer sherpa-onnx once"
        )
    d = exports[0]
    rec = sherpa_onnx.OfflineRecognizer.from_whisper(
        encoder=str(d / "model-encoder.onnx"),
        decoder=str(d / "model-decoder.onnx"),
        tokens=str(d / "model-tokens.txt"),
        language="en",
        task="transcribe",
        num_threads=args.threads,
    )
    files = json.loads(args.report.read_text())["workloads"]["corpus"]["files"][: args.clips]
    clips = []
    for name in files:
        a, sr = sf.read(audio_dir / name, dtype="float32", always_2d=True)
        clips.append((a.mean(1), sr))

    def run(pad_to: float) -> float:
        t = time.perf_counter()
        for a, sr in clips:
            if pad_to:
                a = np.concatenate([a, np.zeros(max(0, int(pad_to * sr) - len(a)), np.float32)])
            s = rec.create_stream()
            s.accept_waveform(sr, a)
            rec.decode_stream(s)
        return time.perf_counter() - t

    run(0)  # warm-up
    audio_s = sum(len(a) / sr for a, sr in clips)
    for _ in range(args.rounds):
        for pad in (0.0, args.pad_to):
            print(f"padded to {pad:g} s: wall {run(pad):.2f} s for {audio_s:.1f} s of audio", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
