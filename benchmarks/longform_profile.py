"""Where a sequential long-form Whisper decode spends its time: oasr beside faster-whisper.

Times one ``transcribe`` of a long recording (the clips of the benchmark corpus concatenated, as
``oasr bench --workload long`` builds it) on each side, in a fresh process per side, with the
parts of the decode wrapped by timers:

* oasr: the audio and log-mel (``frontend.long_form`` and the windows read back), the encoder
  (``encode_offline``), the decoder's prefill and steps (``prefill`` / ``step``), Whisper's logit
  filters (``apply_filters``: timestamp rules, suppression), and the rest (the scheduler, the
  search, text, segments: Python);
* faster-whisper: ``decode_audio``, the feature extractor, ``encode``, CTranslate2's ``generate``
  (the whole token loop with its logit processors, in C++), and the rest (Python).

Usage::

    python benchmarks/longform_profile.py --threads 2 --min-seconds 600 [--side oasr|fw|both]
        [--cprofile FILE] [--json FILE]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Timers:
    """Wall time per part, summed over calls; nested wrapped calls count in the outer part only."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.depth = 0

    def wrap(self, owner: object, name: str, part: str) -> None:
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if self.depth:
                return fn(*args, **kwargs)
            self.depth += 1
            t, c = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total[part] += time.perf_counter() - t
                self.cpu[part] += time.process_time() - c
                self.calls[part] += 1
                self.depth -= 1

        setattr(owner, name, timed)

    def report(self, wall: float, cpu: float) -> dict:
        """Wall and CPU seconds (all the process's threads: less disturbed by other processes on
        the machine than wall time, though it counts OpenMP workers' spinning) per part."""
        parts = {
            k: {"s": round(v, 3), "cpu_s": round(self.cpu[k], 3), "calls": self.calls[k]} for k, v in self.total.items()
        }
        rest = {"s": round(wall - sum(self.total.values()), 3), "cpu_s": round(cpu - sum(self.cpu.values()), 3)}
        parts["rest (Python)"] = {**rest, "calls": 0}
        return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "parts": parts}


def _oasr(args: argparse.Namespace, path: str) -> dict:
    import torch

    import oasr.audio.stream as stream
    import oasr.engine.decode.aed.strategy as strategy
    from oasr.engine import ASREngine

    engine = ASREngine(args.model, device="cpu", num_threads=args.threads, max_batch_size=1)
    options = dict(beam_size=1, temperature=0.0, language="en", without_timestamps=not args.timestamps)
    engine.transcribe(args.warmup, **options)
    timers = Timers()
    strat = engine.strategy  # the strategy holds its own references: wrap those
    model = strat.model

    timers.wrap(strat.frontend, "long_form", "audio + log-mel")
    for cls in (stream.InMemoryMel, stream.SpooledMel):
        timers.wrap(cls, "window", "audio + log-mel")
    timers.wrap(model, "encode_offline", "encoder")
    timers.wrap(strat.decoder, "prefill", "decoder prefill")
    timers.wrap(strat.decoder, "step", "decoder step")
    timers.wrap(strategy, "apply_filters", "logit filters")
    profiler = _profiler(args)
    t, c = time.perf_counter(), time.process_time()
    out = engine.transcribe(path, **options)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    _dump(profiler, args)
    result = timers.report(wall, cpu)
    result["tokens"] = sum(len(s.tokens) for s in out.segments)
    result["windows"] = strat.counters.windows_encoded
    result["text"] = out.text
    result["torch_threads"] = torch.get_num_threads()
    return result


def _fw(args: argparse.Namespace, path: str) -> dict:
    import faster_whisper.transcribe as fwt
    from faster_whisper import WhisperModel

    from oasr.cli.bench import ct2_model_dir, default_cache_dir

    model = WhisperModel(
        ct2_model_dir(args.model, default_cache_dir()), device="cpu", compute_type="float32", cpu_threads=args.threads
    )
    options = dict(
        beam_size=1, temperature=0.0, language="en", without_timestamps=not args.timestamps, vad_filter=False
    )
    _ = list(model.transcribe(args.warmup, **options)[0])
    timers = Timers()
    timers.wrap(fwt, "decode_audio", "audio")
    timers.wrap(model, "feature_extractor", "log-mel")
    timers.wrap(model, "encode", "encoder")
    inner = model.model  # the CTranslate2 model: generate is its whole token loop

    class Generate:
        def __init__(self, ct2) -> None:
            self._ct2 = ct2

        def __getattr__(self, name):
            return getattr(self._ct2, name)

    proxy = Generate(inner)
    proxy.generate = inner.generate
    timers.wrap(proxy, "generate", "decoder (CTranslate2 generate)")
    model.model = proxy
    profiler = _profiler(args)
    t, c = time.perf_counter(), time.process_time()
    segments, _ = model.transcribe(path, **options)
    segments = list(segments)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    _dump(profiler, args)
    result = timers.report(wall, cpu)
    result["tokens"] = sum(len(s.tokens) for s in segments)
    result["text"] = "".join(s.text for s in segments).strip()
    return result


def _profiler(args: argparse.Namespace):
    if not args.cprofile:
        return None
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    return profiler


def _dump(profiler, args: argparse.Namespace) -> None:
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(f"{args.cprofile}.{args.side}")


def _recording(args: argparse.Namespace) -> str:
    from oasr.cli.bench import default_audio_dir, default_cache_dir, long_recording, read_manifest

    rows = read_manifest(default_audio_dir(), "en")
    path, _ = long_recording(rows, default_cache_dir(), args.min_seconds)
    return str(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=("oasr", "fw", "both"), default="both")
    parser.add_argument("--model", default="whisper-base")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-seconds", type=float, default=600.0)
    parser.add_argument("--no-timestamps", dest="timestamps", action="store_false")
    parser.add_argument("--rounds", type=int, default=1, help="both: alternate the sides this many times")
    parser.add_argument("--cprofile", default=None, help="write cProfile stats to FILE.<side>")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--path", default=None, help="the recording (default: the corpus concatenated)")
    parser.add_argument("--warmup", default=None, help="(internal) the warm-up clip")
    args = parser.parse_args()
    if args.side != "both":
        fn = _oasr if args.side == "oasr" else _fw
        print("RESULT " + json.dumps(fn(args, args.path)), flush=True)
        return 0
    from oasr.cli.bench import default_audio_dir

    path = args.path or _recording(args)
    warmup = str(default_audio_dir() / "jfk.wav")
    env = {**os.environ, **{v: str(args.threads) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    runs: dict[str, list[dict]] = {"oasr": [], "fw": []}
    for k in range(args.rounds):
        for side in ("oasr", "fw"):
            cmd = [sys.executable, __file__, "--side", side, "--model", args.model, "--threads", str(args.threads)]
            cmd += ["--path", path, "--warmup", warmup] + ([] if args.timestamps else ["--no-timestamps"])
            cmd += ["--cprofile", args.cprofile] if args.cprofile else []
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if proc.returncode or not lines:
                sys.exit(f"{side} failed:\n{proc.stderr[-3000:]}")
            result = json.loads(lines[-1][len("RESULT ") :])
            result["load_average_1m"] = os.getloadavg()[0]
            runs[side].append(result)
            parts = ", ".join(f"{p} {v['s']:.1f} / {v['cpu_s']:.1f}" for p, v in result["parts"].items())
            print(
                f"round {k + 1} {side}: wall / cpu {result['wall_s']:.1f} / {result['cpu_s']:.1f} s ({parts})",
                flush=True,
            )
    same = all(a["text"] == b["text"] for a, b in zip(runs["oasr"], runs["fw"]))
    print(f"transcripts equal: {same}")
    if args.json:
        args.json.write_text(json.dumps({"recording": path, "threads": args.threads, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
