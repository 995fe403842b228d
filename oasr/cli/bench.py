"""``oasr bench``: time oasr against its peers (faster-whisper, whisper.cpp, CrispASR, sherpa-onnx; for
the other families their reference: transformers, funasr) on the same audio, weights and decode settings.

Method
------
Every timed run is a fresh child process (this file run as a script, its spec on
stdin; the peers' children never import oasr, nor torch but for the families' references that
run on it) that imports its library and loads the model (both timed and reported, neither part of the wall
time), transcribes the warm-up clip once, then times one transcription of the whole
workload and prints one JSON line: wall seconds, output tokens, transcripts, load
seconds and its peak RSS (``VmHWM`` on Linux, so model load and warm-up included;
not ``ru_maxrss``, which a child inherits from the parent across ``execve``).
The runs form a matrix: for each ``--compute-type``, each ``--threads`` value, each
workload and each batch size (a *cell*), the parent runs ``--rounds`` rounds, each round
one child per system in a fixed order (oasr, then every ``--peer``'s systems), so slow
drift of the machine hits every side alike. Reported per system: median, min and max over
the rounds of wall time, RTFx (workload audio seconds / wall seconds), output
tokens per wall second (the decoder's emitted text and timestamp tokens, prompt and
end-of-text excluded), peak RSS and WER; and the oasr / peer ratios of the medians in
the same cell. Every side's WER comes from the same normaliser (openai-whisper's
English normaliser, ``oasr.metrics``) against the manifest's references.

Workloads (``--audio-dir``: a folder with a ``manifest.jsonl`` of ``{"audio", "text",
"language"}`` rows; by default the shared corpus; clips of ``--language``, all with ``auto``):

* ``short``: one short clip (``jfk.wav`` when present), i.e. latency; also the time to the
  first text ("first text s"): oasr transcribes it once more streamed (``on_token``) and times
  its first delta, faster-whisper times its first segment of the timed run;
* ``long``: the clips concatenated (0.5 s of silence between) until the recording is
  longer than ``--long-min-seconds``, written once to ``--cache-dir`` as 16 kHz WAV;
* ``corpus``: every clip (``--corpus-limit N``: N of them, evenly spread by name), i.e.
  throughput, once per ``--batch-sizes`` entry.

What each side runs (paths in, so audio decoding is timed on both sides):

* oasr: ``ASREngine(model, max_batch_size=B, num_threads=T).transcribe(paths, ...)``.
  Every input walks its audio in 30-s windows, seeking by the decoded timestamps; the
  engine batches encoder windows and decode rows *across inputs*, so one long file
  decodes one window at a time and a corpus fills the batch with different files.
* ``faster-whisper`` (sequential): ``WhisperModel(...).transcribe(path, ...)`` per file,
  no VAD -- the same long-form algorithm as oasr. Used for ``short`` and ``long``.
* ``faster-whisper-batched``: ``BatchedInferencePipeline(model).transcribe(path,
  batch_size=B, ...)`` per file -- Silero VAD cuts each file into speech chunks of up to
  30 s and batches the chunks *of that file* (no conditioning on previous text; silence is
  skipped). Used for ``long`` (batch ``--batch-size``) and for ``corpus`` at each batch size,
  where it batches within a file while oasr batches across files: for clips under 30 s
  it decodes one chunk at a time whatever B is.
* ``whisper.cpp``: pywhispercpp's ``Model.transcribe(audio)`` per file (decoded by PyAV
  in the child: pywhispercpp reads only 16-kHz WAV itself), sequential, no VAD.
* ``crispasr``: CrispASR's ``CrispASR.transcribe_pcm(audio)`` per file, the same way;
  its Python API sets neither ``no_timestamps`` nor the fallback increment, so it
  decodes timestamps and may fall back to a higher temperature (greedy only).

Both whisper.cpp peers read the same weights, written once into ``--cache-dir`` by
oasr's own ggml writer (``oasr.models.whisper.ggml``): f16 for float32 (``--ggml-float
f32``: f32, which pywhispercpp's whisper.cpp 1.8.5 cannot run) and q8_0 for int8; the
table names them (``whisper.cpp (q8_0)``).
* ``sherpa-onnx`` (``--peer sherpa-onnx``): ``OfflineRecognizer.from_whisper`` on the same
  weights exported by oasr to sherpa-onnx's Whisper ONNX layout (once, into ``--cache-dir``;
  float32 graphs, or the int8 ones for ``--compute-type int8``), one ``decode_stream`` per
  file (audio read by soundfile, resampled by sherpa-onnx), greedy, ``num_threads`` =
  ``--threads``. Its Whisper decodes at most 29.5 s a call and drops the rest, so it has no
  ``long`` cell, and with it the corpus keeps the clips of at most 29.5 s (for every side).

A family's own reference, on the same directory (``--model DIR``), for the families that are not
Whisper; each side then decodes at the family's defaults (greedy) with the same batch size and
threads, the reference in float32 whatever oasr's ``--compute-type``; no ``long`` cell:

* ``transformers`` (Hugging Face CTC: wav2vec2, HuBERT, WavLM, data2vec-audio, MMS, Granite Speech 5):
  ``AutoProcessor`` pads each batch of B files (in the given order, with an attention mask where
  the feature extractor asks for one), ``AutoModelForCTC``, argmax, ``batch_decode``; Moonshine
  and Moonshine Streaming: greedy ``generate`` with the card's ``max_length`` (6.5 per second of
  the batch's longest clip); Voxtral, Voxtral Realtime (offline) and Granite Speech: their model
  card's ``generate`` on padded batches (``GENERATE_CHILDREN``);
* ``funasr`` (FunASR directories: SenseVoiceSmall, Paraformer): ``funasr.AutoModel(model=dir)
  .generate(input=paths, batch_size=B)``, texts through ``rich_transcription_postprocess``.

A diarizer (``--model``: any path ``oasr.load_diarizer`` reads) against its own reference on the same
path, ``--peer reference`` (``oasr.diarization.references``: transformers' ``nemotron3_diarization``,
pyannote.audio's pipeline, NeMo's Sortformer): the same clips, workloads, children and rounds, the two
sides' order reversed every other round; each child decodes the clips with oasr before the clock (both
import oasr: the references take arrays) and diarizes ``--batch-size`` of them a call
(``--batch-sizes`` for ``corpus``) at its defaults in float32, no speaker count given. Reported: wall
and CPU seconds, RTFx, peak RSS, oasr's lead, and the DER of oasr's turns with the reference's as the
truth (collar 0, overlap scored) with the files whose turns are the same.

A peer's row also says how far its transcripts are oasr's (files with the same text, share of
characters matched): with the same weights and greedy decodes, the parity of the two at full size.
``--random-weights`` (a real model's shape with random weights, for timing) drops the WER, which
would mean nothing, and leaves that agreement as the check.

Decode settings are the same everywhere: ``--beam-size`` (default 1, greedy),
temperature 0.0 only (no fallback), ``language`` fixed (default ``en``; ``auto`` detects
on both sides), timestamps off unless ``--timestamps``, condition_on_previous_text on
(the sequential sides), ``--threads`` for every side (oasr ``num_threads``, faster-whisper
``cpu_threads``, whisper.cpp ``n_threads``; ``OMP_NUM_THREADS`` and friends set alike in
every child) and ``--compute-type`` (faster-whisper ``compute_type``; oasr float32, or its
``quantize`` engine option for int8; whisper.cpp's weights as above). faster-whisper reads
the CTranslate2 ``model.bin`` the bundled model ships (a split one is joined once into
``--cache-dir``), so every side runs the same weights.

Results go to stdout as a markdown table (a row per cell and system, each peer's row with
oasr's lead: the peer's wall / oasr's wall, and oasr's RSS / the peer's), and optionally to
``--json``, ``--markdown`` and ``--plot`` (RTFx against batch size for ``corpus``, a line per
system, compute type and thread count; needs matplotlib).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# Only the standard library at module level: the timed children run this file as a script
# (``python .../oasr/cli/bench.py``), and the peers' children must not import oasr (and with
# it torch: ~220 MB of RSS and a second OpenMP runtime beside CTranslate2's or ggml's).

NAME = "bench"
WORKLOADS = ("short", "long", "corpus")
OASR = "oasr"
FW = "faster-whisper"  # WhisperModel.transcribe, file by file
FW_BATCHED = "faster-whisper-batched"  # BatchedInferencePipeline.transcribe, file by file
WCPP = "whisper.cpp"  # pywhispercpp's Model.transcribe, file by file, on oasr's ggml file of the weights
CRISP = "crispasr"  # CrispASR's whisper.cpp (CrispASR.transcribe_pcm), file by file, on the same ggml file
SHERPA = "sherpa-onnx"  # OfflineRecognizer.from_whisper on oasr's ONNX export of the weights, file by file
SHERPA_MAX_S = 29.5  # sherpa-onnx's Whisper takes the first 2950 frames of a call and drops the rest
TRANSFORMERS = "transformers"  # AutoModelForCTC on a Hugging Face CTC directory (wav2vec2, HuBERT, WavLM, ...)
FUNASR = "funasr"  # funasr.AutoModel(model=dir).generate on a FunASR directory (SenseVoice, Paraformer)
REFERENCES = (TRANSFORMERS, FUNASR)  # a family's own reference implementation, on the same directory
DIARIZER_REFERENCE = "reference"  # a diarizer's own (oasr.diarization.references), on the same path
RESULT_MARKER = "OASR_BENCH_RESULT "
METRICS = ("wall_s", "rtfx", "tokens_per_s", "peak_rss_mb", "load_s")
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
SILENCE_S = 0.5  # between the clips of the long recording


def _bench_hint() -> str:
    from oasr.install import install_hint

    return install_hint("bench", ["faster-whisper", "pywhispercpp", "soundfile", "matplotlib"])


def _torch_version() -> str:
    """The installed torch's version (without a local tag): pinned beside a reference peer's install."""
    from importlib.metadata import version

    return version("torch").split("+")[0]


def _error(message: str, exit_code: int = 1) -> Exception:
    """A ``CliError`` (one line on stderr, no traceback), imported late for the children's sake."""
    from oasr.cli.common import CliError

    return CliError(message, exit_code)


# ---------------------------------------------------------------------------
# Workloads


@dataclasses.dataclass(frozen=True)
class Clip:
    """One manifest row: path, reference text, language, duration (seconds, decoded)."""

    path: str
    text: str
    language: str | None
    duration_s: float


@dataclasses.dataclass(frozen=True)
class Workload:
    """What one timed run transcribes.

    Attributes:
        name: short, long or corpus.
        clips: the inputs (for ``long`` one clip: the concatenated recording).
        references: ``(reference text, language)`` per input, for the error rate.
    """

    name: str
    clips: tuple[Clip, ...]
    references: tuple[tuple[str, str | None], ...]

    @property
    def audio_s(self) -> float:
        return sum(c.duration_s for c in self.clips)

    @property
    def paths(self) -> list[str]:
        return [c.path for c in self.clips]


def default_audio_dir() -> Path | None:
    """``$OASR_SHARED_DIR/data/audio``, else ``shared/data/audio`` here or one level up."""
    if "OASR_SHARED_DIR" in os.environ:
        candidates = [Path(os.environ["OASR_SHARED_DIR"]) / "data" / "audio"]
    else:
        candidates = [Path.cwd() / "shared" / "data" / "audio", Path.cwd().parent / "shared" / "data" / "audio"]
    return next((c for c in candidates if (c / "manifest.jsonl").is_file()), None)


def default_cache_dir() -> Path:
    return Path(os.environ.get("OASR_BENCH_CACHE", Path.home() / ".cache" / "oasr-bench"))


def read_manifest(audio_dir: Path, language: str | None) -> list[dict]:
    """Manifest rows (``audio`` resolved against ``audio_dir``) of ``language`` (None: all), by file name."""
    rows = []
    with open(audio_dir / "manifest.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                if language is None or row.get("language") == language:
                    rows.append({**row, "path": str(audio_dir / row["audio"])})
    return sorted(rows, key=lambda r: r["audio"])


def _load(path: str):
    from oasr.audio import load_audio

    return load_audio(path)


def _clip(row: dict) -> Clip:
    from oasr.audio import SAMPLE_RATE

    return Clip(row["path"], row.get("text", ""), row.get("language"), len(_load(row["path"])) / SAMPLE_RATE)


def short_workload(rows: list[dict], clip: str | None = None) -> Workload:
    """``clip`` (a path), else ``jfk.wav`` from the manifest, else the clip nearest 10 s."""
    if clip is not None:
        row = next((r for r in rows if Path(r["path"]).resolve() == Path(clip).resolve()), None)
        row = row or {"path": str(clip), "text": "", "language": None}
    else:
        by_name = {Path(r["audio"]).name: r for r in rows}
        row = by_name.get("jfk.wav") or min(rows, key=lambda r: abs(r.get("duration_s", 0.0) - 10.0))
    c = _clip(row)
    return Workload("short", (c,), ((c.text, c.language),))


def long_recording(rows: list[dict], cache_dir: Path, min_seconds: float) -> tuple[Path, list[dict]]:
    """The clips concatenated in order (0.5 s of silence between) until longer than ``min_seconds``.

    Written once as 16 kHz 16-bit WAV under ``cache_dir`` (named by a hash of its
    clips); returns its path and the rows it holds.
    """
    import numpy as np

    from oasr.audio import SAMPLE_RATE

    try:
        import soundfile
    except ImportError:
        raise _error(f"the long workload writes its recording with soundfile: {_bench_hint()}", 2) from None
    pieces: list[np.ndarray] = []
    used: list[dict] = []
    gap = np.zeros(int(SILENCE_S * SAMPLE_RATE), dtype=np.float32)
    for row in rows:
        if sum(len(p) for p in pieces) / SAMPLE_RATE > min_seconds:
            break
        pieces += [gap, _load(row["path"])] if pieces else [_load(row["path"])]
        used.append(row)
    total = sum(len(p) for p in pieces) / SAMPLE_RATE
    if total <= min_seconds:
        raise _error(f"the clips add up to {total:.0f} s, not more than --long-min-seconds {min_seconds:g}", 2)
    key = hashlib.sha1(json.dumps([r["path"] for r in used] + [SILENCE_S]).encode()).hexdigest()[:12]
    path = cache_dir / f"long_{key}.wav"
    if not path.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.wav")
        soundfile.write(tmp, np.concatenate(pieces), SAMPLE_RATE, subtype="PCM_16")
        tmp.rename(path)
    return path, used


def long_workload(rows: list[dict], cache_dir: Path, min_seconds: float) -> Workload:
    path, used = long_recording(rows, cache_dir, min_seconds)
    languages = {r.get("language") for r in used}
    language = languages.pop() if len(languages) == 1 else None
    clip = Clip(str(path), " ".join(r.get("text", "") for r in used), language, _clip({"path": str(path)}).duration_s)
    return Workload("long", (clip,), ((clip.text, language),))


def sherpa_onnx_rows(rows: list[dict]) -> list[dict]:
    """The rows sherpa-onnx's Whisper decodes whole: at most ``SHERPA_MAX_S`` seconds."""
    return [r for r in rows if (r["duration_s"] if "duration_s" in r else _clip(r).duration_s) <= SHERPA_MAX_S]


def corpus_workload(rows: list[dict], limit: int | None = None) -> Workload:
    """Every clip, or ``limit`` of them spread evenly over the list (sorted by name)."""
    if limit is not None and limit < len(rows):
        rows = [rows[i * len(rows) // limit] for i in range(limit)]
    clips = tuple(_clip(r) for r in rows)
    return Workload("corpus", clips, tuple((c.text, c.language) for c in clips))


# ---------------------------------------------------------------------------
# The peer's weights


def ct2_model_dir(model: str, cache_dir: Path) -> str:
    """A CTranslate2 directory with one ``model.bin`` for ``model`` (a bundled name or a directory).

    A model split into ``model.bin.partN`` pieces (as the bundled whisper-base ships) is
    joined once into ``cache_dir/<package>`` with its config and tokenizer files.
    """
    from oasr.models.bundled import bundled_path
    from oasr.models.formats.ctranslate2 import find_model_parts

    src = bundled_path(model) or Path(model)
    parts = find_model_parts(src)
    if len(parts) == 1:
        return str(src)
    dst = cache_dir / src.parent.name
    if not (dst / "model.bin").is_file():
        dst.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "tokenizer.json", "vocabulary.txt", "preprocessor_config.json"):
            if (src / name).exists():
                shutil.copy(src / name, dst / name)
        tmp = dst / "model.bin.tmp"
        with open(tmp, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, out)
        tmp.rename(dst / "model.bin")
    return str(dst)


def _cache_key(model: str) -> tuple[Path, str, str]:
    """``model``'s checkpoint path (resolved), a short name and a key of that path: what names the
    peers' converted copies of it in the cache."""
    from oasr.models.bundled import bundled_path

    bundled = bundled_path(model)
    src = (bundled or Path(model)).resolve()
    return src, model if bundled is not None else src.name, hashlib.sha1(str(src).encode()).hexdigest()[:12]


def ggml_model_file(model: str, cache_dir: Path, file_type: str) -> str:
    """``model`` written once by oasr's ggml writer as whisper.cpp's ``ggml-*.bin`` of ``file_type``
    (f32, f16 or q8_0) into ``cache_dir``, named by the checkpoint's path. The writer runs as its own
    process (``python -m oasr.models.whisper.ggml``): the CLI imports no family, and the checkpoint
    it loads is not held by this process while the children run.

    Raises:
        CliError: the writer failed (its message).
    """
    src, name, key = _cache_key(model)
    path = cache_dir / f"ggml-{name}-{key}-{file_type}.bin"
    if not path.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "oasr.models.whisper.ggml", str(src), str(path), "--type", file_type]
        env = {**os.environ, "PYTHONPATH": _package_path()}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise _error(f"writing {model} as whisper.cpp's {file_type} file failed:\n{proc.stderr[-2000:]}")
    return str(path)


def sherpa_onnx_model(model: str, cache_dir: Path, compute_type: str) -> dict[str, str]:
    """``model`` exported once by oasr in sherpa-onnx's Whisper layout (float32 and int8 graphs)
    into ``cache_dir``; the spec's ``sherpa_encoder`` / ``sherpa_decoder`` / ``sherpa_tokens``
    paths for ``compute_type``."""
    from oasr.models import export_sherpa_onnx

    _, name, key = _cache_key(model)
    out = cache_dir / f"sherpa-onnx-{name}-{key}"
    graphs = ".int8.onnx" if compute_type == "int8" else ".onnx"
    paths = {
        "sherpa_encoder": out / f"model-encoder{graphs}",
        "sherpa_decoder": out / f"model-decoder{graphs}",
        "sherpa_tokens": out / "model-tokens.txt",
    }
    if not all(p.is_file() for p in paths.values()):
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        export_sherpa_onnx(model, tmp, prefix="model", int8=True)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return {k: str(p) for k, p in paths.items()}


# ---------------------------------------------------------------------------
# The child process


def _peak_rss_mb() -> float:
    """This process's peak resident memory. On Linux ``VmHWM``: ``ru_maxrss`` survives ``execve``, so a
    child would report at least the RSS its parent had when it forked (the parent that wrote a peer's
    weights holds hundreds of MB)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**10  # kB
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


def _decode_options(spec: dict) -> dict[str, Any]:
    """The decoding both systems are timed with: greedy or beam, no fallback, fixed language."""
    return {
        "beam_size": spec["beam_size"],
        "temperature": 0.0,
        "language": spec["language"],
        "without_timestamps": not spec["timestamps"],
    }


def _timed(
    spec: dict,
    marks: tuple[float, float, float],
    warm: Callable[[str], Any],
    run: Callable[[list[str]], list[tuple[str, int]]],
) -> dict:
    """``warm`` on ``spec["warmup"]``, then ``run`` (-> text, tokens per file) timed over the files;
    ``marks`` are the child's start, imported and loaded times."""
    t0, t1, t2 = marks
    warm(spec["warmup"])
    t3, c3 = time.perf_counter(), time.process_time()
    results = run(list(spec["files"]))
    wall = time.perf_counter() - t3
    return {
        "import_s": t1 - t0,
        "load_s": t2 - t1,
        "warmup_s": t3 - t2,
        "wall_s": wall,
        "cpu_s": time.process_time() - c3,  # every thread's: the work, steadier than wall on a busy machine
        "tokens": sum(n for _, n in results),
        "texts": [text for text, _ in results],
    }


def _oasr_child(spec: dict) -> dict:
    t0 = time.perf_counter()
    from oasr.engine import ASREngine

    t1 = time.perf_counter()
    extra = {"quantize": "int8"} if spec["compute_type"] == "int8" else {}
    engine = ASREngine(
        spec["model"], device="cpu", num_threads=spec["threads"], max_batch_size=spec["batch_size"], **extra
    )
    t2 = time.perf_counter()
    # Against a family's reference each side decodes at the family's defaults (the reference's).
    options = {} if spec.get("family_defaults") else _decode_options(spec)
    if spec.get("vad"):
        options["vad_filter"] = True

    finished: list[str] = []  # "stop" / "length" per file of the timed run

    def run(paths: list[str]) -> list[tuple[str, int]]:
        outputs = engine.transcribe(paths, **options)  # one batched call: what is timed
        finished.extend(o.finish_reason for o in outputs)
        return [(o.text.strip(), sum(len(s.tokens) for s in o.segments)) for o in outputs]

    result = _timed(spec, (t0, t1, t2), lambda path: engine.transcribe(path, **options), run)
    result["finish_reasons"] = finished
    if spec["workload"] == "short" and not spec.get("family_defaults"):  # once more, streamed: first text
        first: list[float] = []
        t4 = time.perf_counter()

        def on_token(_delta: str) -> None:
            if not first:
                first.append(time.perf_counter() - t4)

        engine.transcribe(spec["files"][0], on_token=on_token, **options)
        result["first_delta_s"] = first[0] if first else None
    return result


def _faster_whisper_child(spec: dict) -> dict:
    t0 = time.perf_counter()
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    t1 = time.perf_counter()
    model = WhisperModel(spec["ct2_dir"], device="cpu", compute_type=spec["compute_type"], cpu_threads=spec["threads"])
    options = _decode_options(spec)
    if spec["system"] == FW_BATCHED:
        runner = BatchedInferencePipeline(model)
        options["batch_size"] = spec["batch_size"]
    else:
        runner = model
        options["vad_filter"] = False
    t2 = time.perf_counter()

    first: list[float] = []

    def one(path: str) -> tuple[str, int]:
        start = time.perf_counter()
        segments, _ = runner.transcribe(path, **options)
        out = []
        for s in segments:  # the generator decodes as it is consumed
            if not out:
                first.append(time.perf_counter() - start)
            out.append(s)
        return "".join(s.text for s in out).strip(), sum(len(s.tokens) for s in out)

    def every(paths: list[str]) -> list[tuple[str, int]]:
        first.clear()  # the warm-up's is not timed
        return [one(path) for path in paths]

    result = _timed(spec, (t0, t1, t2), one, every)
    if spec["workload"] == "short":  # its first text is its first segment
        result["first_delta_s"] = first[0] if first else None
    return result


def _decode_16k(path: str):
    """``path`` decoded and resampled by PyAV to 16 kHz mono float32 (as faster-whisper decodes):
    the audio the whisper.cpp child passes in, since pywhispercpp reads only 16-kHz WAV itself."""
    import av
    import numpy as np

    resampler = av.AudioResampler(format="s16", layout="mono", rate=16000)
    pieces = []
    with av.open(path) as container:
        for frame in container.decode(audio=0):
            pieces += [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
        pieces += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]  # flush
    return np.concatenate(pieces).astype(np.float32) / 32768.0


def _whisper_cpp_child(spec: dict) -> dict:
    """pywhispercpp (whisper.cpp) on ``spec["ggml_path"]``: one ``whisper_full`` per file, in order."""
    t0 = time.perf_counter()
    import _pywhispercpp as pw
    from pywhispercpp.model import Model

    t1 = time.perf_counter()
    beam = spec["beam_size"] > 1
    model = Model(
        spec["ggml_path"],
        params_sampling_strategy=int(beam),
        redirect_whispercpp_logs_to=None,
        n_threads=spec["threads"],
        language=spec["language"] or "auto",
        no_timestamps=not spec["timestamps"],
        no_context=False,  # condition_on_previous_text, as the sequential sides
        temperature=0.0,
        temperature_inc=0.0,  # no fallback
        print_progress=False,
        print_realtime=False,
        greedy={"best_of": 1},
        beam_search={"beam_size": spec["beam_size"] if beam else -1, "patience": -1.0},
    )
    t2 = time.perf_counter()
    ctx = model._ctx  # the token ids: pywhispercpp's segments carry text only
    eot, beg = pw.whisper_token_eot(ctx), pw.whisper_token_beg(ctx)

    def one(path: str) -> tuple[str, int]:
        segments = model.transcribe(_decode_16k(path))
        ids = [
            pw.whisper_full_get_token_id(ctx, i, j)
            for i in range(pw.whisper_full_n_segments(ctx))
            for j in range(pw.whisper_full_n_tokens(ctx, i))
        ]
        return " ".join(s.text.strip() for s in segments).strip(), sum(1 for t in ids if t < eot or t >= beg)

    return _timed(spec, (t0, t1, t2), one, lambda paths: [one(path) for path in paths])


def _crispasr_child(spec: dict) -> dict:
    """CrispASR's whisper.cpp on ``spec["ggml_path"]``: one ``transcribe_pcm`` per file, in order. Its
    Python API sets no ``no_timestamps`` and no fallback increment: it decodes timestamps (the tokens
    counted) and may fall back to higher temperatures on a failed window, as whisper.cpp's defaults do."""
    t0 = time.perf_counter()
    import crispasr

    t1 = time.perf_counter()
    model = crispasr.CrispASR(spec["ggml_path"])
    options = {"n_threads": spec["threads"], "temperature": 0.0, "no_context": False, "best_of": 1}
    t2 = time.perf_counter()

    def counted(raw: bytes) -> bool:  # text and timestamp tokens, as the other sides count
        return not raw.startswith(b"[_") or raw.startswith(b"[_TT_") or raw == b"[_BEG_]"

    def one(path: str) -> tuple[str, int]:
        segments = model.transcribe_pcm(_decode_16k(path), language=spec["language"] or "auto", decode_options=options)
        tokens = sum(counted(t.raw_text) for s in segments for t in s.tokens)
        return "".join(s.text for s in segments).strip(), tokens

    return _timed(spec, (t0, t1, t2), one, lambda paths: [one(path) for path in paths])


def _sherpa_onnx_child(spec: dict) -> dict:
    """sherpa-onnx's Whisper on oasr's export: one ``decode_stream`` per file, in order."""
    t0 = time.perf_counter()
    import sherpa_onnx
    import soundfile

    t1 = time.perf_counter()
    recognizer = sherpa_onnx.OfflineRecognizer.from_whisper(
        encoder=spec["sherpa_encoder"],
        decoder=spec["sherpa_decoder"],
        tokens=spec["sherpa_tokens"],
        language=spec["language"] or "",  # "": sherpa-onnx detects it
        task="transcribe",
        num_threads=spec["threads"],
    )
    t2 = time.perf_counter()

    def one(path: str) -> tuple[str, int]:
        samples, rate = soundfile.read(path, dtype="float32", always_2d=True)
        stream = recognizer.create_stream()
        stream.accept_waveform(rate, samples.mean(axis=1))  # mono; sherpa-onnx resamples to 16 kHz
        recognizer.decode_stream(stream)
        return stream.result.text.strip(), len(stream.result.tokens)

    return _timed(spec, (t0, t1, t2), one, lambda paths: [one(path) for path in paths])


def _transformers_child(spec: dict) -> dict:
    """transformers on ``spec["model_dir"]`` as its model cards show: ``AutoProcessor`` pads each
    batch of ``batch_size`` files (in the given order; with an attention mask where the feature
    extractor asks for one), ``AutoModelForCTC``, argmax, then ``batch_decode`` of each row cut to
    its own frames (the padding's frames would decode to extra text). A speech-LLM or streaming
    directory goes to its ``GENERATE_CHILDREN`` entry."""
    config = json.loads((Path(spec["model_dir"]) / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") in GENERATE_CHILDREN:
        return GENERATE_CHILDREN[config["model_type"]](spec)
    t0 = time.perf_counter()
    import torch
    from transformers import AutoModelForCTC, AutoProcessor

    t1 = time.perf_counter()
    torch.set_num_threads(spec["threads"])
    processor = AutoProcessor.from_pretrained(spec["model_dir"])
    config = json.loads((Path(spec["model_dir"]) / "config.json").read_text())
    if config.get("model_type") == "moonshine":
        return _moonshine_generate(spec, (t0, t1), processor)
    model = AutoModelForCTC.from_pretrained(spec["model_dir"]).eval()
    t2 = time.perf_counter()
    pad = processor.tokenizer.pad_token_id

    # Granite Speech 5's model card: generate (the argmax, padding frames set to the blank), then
    # batch_decode with skip_special_tokens.
    granite5 = model.config.model_type == "granite_speech5_ctc"

    def batch(paths: list[str]) -> list[tuple[str, int]]:
        audio = [_decode_16k(path) for path in paths]
        inputs = processor(audio, sampling_rate=16000, padding=True, return_tensors="pt")
        with torch.inference_mode():
            if granite5:
                rows = list(model.generate(**inputs))
            else:
                ids = model(**inputs).logits.argmax(dim=-1)  # (B, frames)
                frames = model._get_feat_extract_output_lengths(torch.tensor([len(a) for a in audio]))
                rows = [row[:n] for row, n in zip(ids, frames.tolist())]
        texts = processor.batch_decode(rows, skip_special_tokens=granite5)
        tokens = [int((torch.unique_consecutive(row) != pad).sum()) for row in rows]
        return [(text.strip(), n) for text, n in zip(texts, tokens)]

    def every(paths: list[str]) -> list[tuple[str, int]]:
        b = spec["batch_size"]
        return [out for i in range(0, len(paths), b) for out in batch(paths[i : i + b])]

    return _timed(spec, (t0, t1, t2), lambda path: batch([path]), every)


def _transformers_voxtral_child(spec: dict) -> dict:
    """Voxtral as its model card transcribes: ``VoxtralForConditionalGeneration.generate`` (greedy,
    the checkpoint's generation config) on left-padded batches of ``batch_size`` transcription
    requests. ``VoxtralProcessor`` builds those through mistral-common; here they are written as
    mistral-common writes them (``<s>[INST][BEGIN_AUDIO][AUDIO] x n[/INST]``, ``lang:xx`` when the
    language is given, ``[TRANSCRIBE]``) with the checkpoint's ``tokenizer.json``, and the features
    as the processor takes them (each clip zero-padded to whole 30-s windows, 3000 frames each)."""
    t0 = time.perf_counter()
    import torch
    from tokenizers import Tokenizer
    from transformers import VoxtralForConditionalGeneration, WhisperFeatureExtractor

    t1 = time.perf_counter()
    torch.set_num_threads(spec["threads"])
    model = VoxtralForConditionalGeneration.from_pretrained(spec["model_dir"]).eval()
    extractor = WhisperFeatureExtractor.from_pretrained(spec["model_dir"])
    tok = Tokenizer.from_file(str(Path(spec["model_dir"]) / "tokenizer.json"))
    t2 = time.perf_counter()
    special = {t: tok.token_to_id(t) for t in ("<s>", "[INST]", "[/INST]", "[AUDIO]", "[BEGIN_AUDIO]", "[TRANSCRIBE]")}
    audio = model.config.audio_config
    frames = 2 * audio.max_source_positions
    per_window = audio.max_source_positions * audio.hidden_size // audio.intermediate_size
    gen = model.generation_config
    stops = set(gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id])
    language = tok.encode(f"lang:{spec['language']}").ids if spec["language"] else []

    def batch(paths: list[str]) -> list[tuple[str, int]]:
        feats, prompts = [], []
        for path in paths:
            x = extractor(
                _decode_16k(path),
                sampling_rate=16000,
                padding=True,
                truncation=False,
                pad_to_multiple_of=16000 * frames // 100,
                return_tensors="pt",
            ).input_features
            feats.append(x.reshape(audio.num_mel_bins, -1, frames).transpose(0, 1))  # (windows, n_mels, frames)
            ids = [special["<s>"], special["[INST]"], special["[BEGIN_AUDIO]"]]
            ids += [special["[AUDIO]"]] * (feats[-1].shape[0] * per_window) + [special["[/INST]"]]
            prompts.append(ids + language + [special["[TRANSCRIBE]"]])
        t = max(map(len, prompts))
        pad = gen.pad_token_id or 0
        input_ids = torch.tensor([[pad] * (t - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (t - len(p)) + [1] * len(p) for p in prompts])
        with torch.inference_mode():
            out = model.generate(input_ids=input_ids, attention_mask=mask, input_features=torch.cat(feats))
        rows = [row[: next((i for i, x in enumerate(row) if x in stops), len(row))] for row in out[:, t:].tolist()]
        return [(tok.decode(row, skip_special_tokens=True).strip(), len(row)) for row in rows]

    def every(paths: list[str]) -> list[tuple[str, int]]:
        b = spec["batch_size"]
        return [out for i in range(0, len(paths), b) for out in batch(paths[i : i + b])]

    return _timed(spec, (t0, t1, t2), lambda path: batch([path]), every)


def _moonshine_generate(spec: dict, times: tuple[float, float], processor) -> dict:
    """Moonshine as its model card runs it: the processor pads a batch, greedy ``generate`` with
    ``max_length`` of 6.5 positions per second of the batch's longest clip, ``batch_decode``
    without special tokens; tokens counted up to each row's end id."""
    import torch
    from transformers import AutoModelForSpeechSeq2Seq

    model = AutoModelForSpeechSeq2Seq.from_pretrained(spec["model_dir"]).eval()
    t2 = time.perf_counter()
    eos = model.generation_config.eos_token_id

    def batch(paths: list[str]) -> list[tuple[str, int]]:
        inputs = processor([_decode_16k(p) for p in paths], sampling_rate=16000, padding=True, return_tensors="pt")
        max_length = int((inputs.attention_mask.sum(-1) * 6.5 / 16000).max())
        with torch.inference_mode():
            ids = model.generate(**inputs, max_length=max_length)[:, 1:]
        texts = processor.batch_decode(ids, skip_special_tokens=True)
        ended = (ids == eos).long().cumsum(-1) > 0
        return [(t.strip(), int(n)) for t, n in zip(texts, (~ended).sum(-1).tolist())]

    def every(paths: list[str]) -> list[tuple[str, int]]:
        b = spec["batch_size"]
        return [out for i in range(0, len(paths), b) for out in batch(paths[i : i + b])]

    return _timed(spec, (*times, t2), lambda path: batch([path]), every)


def _transformers_moonshine_streaming_child(spec: dict) -> dict:
    """Moonshine Streaming's offline decode as ``_moonshine_generate`` runs Moonshine's (its card's
    budget, which oasr's default follows), through ``MoonshineStreamingProcessor`` (samples
    zero-padded to a multiple of 80, with their mask); transformers maps no auto processor to it."""
    t0 = time.perf_counter()
    import torch
    from transformers import AutoFeatureExtractor, MoonshineStreamingProcessor, PreTrainedTokenizerFast

    t1 = time.perf_counter()
    torch.set_num_threads(spec["threads"])
    directory = Path(spec["model_dir"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(directory / "tokenizer.json"))
    processor = MoonshineStreamingProcessor(AutoFeatureExtractor.from_pretrained(directory), tokenizer)
    return _moonshine_generate(spec, (t0, t1), processor)


def _transformers_voxtral_realtime_child(spec: dict) -> dict:
    """Voxtral Realtime's offline decode as its model card runs it: ``VoxtralRealtimeProcessor``
    (mistral-common's transcription request over ``tekken.json``) on a batch, ``generate`` at its
    default length (the batch's audio tokens), each row cut to the tokens of its own audio (what it
    gives alone: the padding's positions would decode to extra text) and up to its end id."""
    t0 = time.perf_counter()
    import math

    import torch
    from transformers import (
        MistralCommonBackend,
        VoxtralRealtimeFeatureExtractor,
        VoxtralRealtimeForConditionalGeneration,
        VoxtralRealtimeProcessor,
    )

    t1 = time.perf_counter()
    torch.set_num_threads(spec["threads"])
    directory = Path(spec["model_dir"])
    model = VoxtralRealtimeForConditionalGeneration.from_pretrained(directory).eval()
    tokenizer = MistralCommonBackend(tokenizer_path=str(directory / "tekken.json"))
    processor = VoxtralRealtimeProcessor(VoxtralRealtimeFeatureExtractor.from_pretrained(directory), tokenizer)
    t2 = time.perf_counter()
    eos = model.generation_config.eos_token_id

    def batch(paths: list[str]) -> list[tuple[str, int]]:
        audio = [_decode_16k(path) for path in paths]
        inputs = processor(audio, return_tensors="pt")
        prompt = inputs["input_ids"].shape[1]
        frames = [processor(a, return_tensors="pt")["input_features"].shape[-1] for a in audio]  # each alone
        with torch.inference_mode():
            out = model.generate(**inputs)
        rows = []
        for row, n in zip(out[:, prompt:].tolist(), frames):
            row = row[: math.ceil(n / model.config.audio_length_per_tok) - prompt]
            rows.append(row[: row.index(eos)] if eos in row else row)
        return [(processor.decode(row, skip_special_tokens=True).strip(), len(row)) for row in rows]

    def every(paths: list[str]) -> list[tuple[str, int]]:
        b = spec["batch_size"]
        return [out for i in range(0, len(paths), b) for out in batch(paths[i : i + b])]

    return _timed(spec, (t0, t1, t2), lambda path: batch([path]), every)


def _transformers_granite_speech_child(spec: dict) -> dict:
    """Granite Speech as its model card transcribes: the chat template over a user turn
    ``<|audio|>can you transcribe the speech into a written format?``, ``GraniteSpeechProcessor``
    on a left-padded batch, greedy ``generate`` with the LoRA adapter ``from_pretrained`` loaded
    (the checkpoint's generation config: its budget), rows up to their end id, decoded without
    special tokens. ``GraniteSpeechForConditionalGeneration.generate`` only enables that adapter
    before ``GenerationMixin.generate`` (through peft >= 0.22); it is checked enabled here and the
    latter called."""
    t0 = time.perf_counter()
    import torch
    from peft.tuners.lora import LoraLayer
    from transformers import AutoProcessor, GenerationMixin, GraniteSpeechForConditionalGeneration

    t1 = time.perf_counter()
    torch.set_num_threads(spec["threads"])
    model = GraniteSpeechForConditionalGeneration.from_pretrained(spec["model_dir"]).eval()
    lora = [m for m in model.modules() if isinstance(m, LoraLayer)]
    if model.config.has_lora_adapter and (not lora or any(m.disable_adapters for m in lora)):
        raise RuntimeError("transformers did not load the checkpoint's LoRA adapter")
    processor = AutoProcessor.from_pretrained(spec["model_dir"])
    processor.tokenizer.padding_side = "left"
    t2 = time.perf_counter()
    chat = [{"role": "user", "content": "<|audio|>can you transcribe the speech into a written format?"}]
    prompt = processor.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    eos = model.generation_config.eos_token_id
    stops = set(eos if isinstance(eos, list) else [eos])

    def batch(paths: list[str]) -> list[tuple[str, int]]:
        audio = [torch.from_numpy(_decode_16k(path)) for path in paths]
        inputs = processor(text=[prompt] * len(audio), audio=audio, padding=True, return_tensors="pt")
        with torch.inference_mode():
            out = GenerationMixin.generate(model, **inputs, do_sample=False)
        t = inputs["input_ids"].shape[1]
        rows = [row[: next((i for i, x in enumerate(row) if x in stops), len(row))] for row in out[:, t:].tolist()]
        texts = processor.tokenizer.batch_decode(rows, skip_special_tokens=True)
        return [(text.strip(), len(row)) for text, row in zip(texts, rows)]

    def every(paths: list[str]) -> list[tuple[str, int]]:
        b = spec["batch_size"]
        return [out for i in range(0, len(paths), b) for out in batch(paths[i : i + b])]

    return _timed(spec, (t0, t1, t2), lambda path: batch([path]), every)


# transformers' generate-based children, by the directory's config.json model_type.
GENERATE_CHILDREN: dict[str, Callable[[dict], dict]] = {
    "voxtral": _transformers_voxtral_child,
    "voxtral_realtime": _transformers_voxtral_realtime_child,
    "granite_speech": _transformers_granite_speech_child,
    "moonshine_streaming": _transformers_moonshine_streaming_child,
}


def _funasr_child(spec: dict) -> dict:
    """funasr 1.4's ``AutoModel(model=dir).generate(input=paths, batch_size=B)`` at its defaults (its
    own audio loading and frontend; SenseVoice's language ``auto``, no ITN) but for dither: the
    released SenseVoice config sets none, and funasr's front end then adds random noise to every
    call (a transcript that changes from run to run; oasr's is funasr's at ``dither=0``, which costs
    the same). Each text goes through ``rich_transcription_postprocess`` (SenseVoice's tags out, as
    its model card does; its emoji for the event and emotion tags dropped: oasr returns them as
    fields); tokens counted by the model's own tokenizer."""
    t0 = time.perf_counter()
    from funasr import AutoModel
    from funasr.utils import postprocess_utils as post

    t1 = time.perf_counter()
    model = AutoModel(
        model=spec["model_dir"],
        device="cpu",
        ncpu=spec["threads"],
        disable_update=True,
        log_level="ERROR",
        frontend_conf={"dither": 0.0},  # SenseVoice's config sets none: WavFrontend's default 1.0 is random
    )
    t2 = time.perf_counter()
    tokenizer = model.kwargs["tokenizer"]
    emoji = {*post.emo_set, *post.event_set, post.emoji_dict["<|nospeech|><|Event_UNK|>"]}

    def plain(text: str) -> str:
        return "".join(c for c in post.rich_transcription_postprocess(text) if c not in emoji).strip()

    def run(paths: list[str]) -> list[tuple[str, int]]:
        results = model.generate(input=paths, batch_size=spec["batch_size"], disable_pbar=True)
        texts = [plain(r["text"]) for r in results]
        return [(text, len(tokenizer.encode(text))) for text in texts]

    return _timed(spec, (t0, t1, t2), lambda path: run([path]), run)


# ---------------------------------------------------------------------------
# The peers: one row each (a new peer is a row here and its child in CHILDREN)


@dataclasses.dataclass(frozen=True)
class Peer:
    """A system oasr is timed against.

    Attributes:
        package: the module its child imports (refused before any work when missing).
        systems: ``(args, workload name) -> systems`` it runs in each round of that workload.
        prepare: in the parent, once per compute type: ``(args, cache_dir, compute_type) -> spec fields``
            (the same weights in its own format: a path its child reads).
        weights: ``(args, compute_type) -> what its weights are``, for the table.
    """

    package: str
    systems: Callable[[argparse.Namespace, str], list[str]]
    prepare: Callable[[argparse.Namespace, Path, str], dict[str, Any]]
    weights: Callable[[argparse.Namespace, str], str]


def _fw_systems(args: argparse.Namespace, workload: str) -> list[str]:
    long_peers = {"sequential": [FW], "batched": [FW_BATCHED], "both": [FW, FW_BATCHED]}[args.long_peer]
    return {"short": [FW], "long": long_peers, "corpus": [FW_BATCHED]}[workload]


def ggml_type(args: argparse.Namespace, compute_type: str) -> str:
    """whisper.cpp's weights for ``compute_type``: q8_0 for int8, else ``--ggml-float`` (f16 or f32)."""
    return "q8_0" if compute_type == "int8" else args.ggml_float


def _reference_peer(name: str) -> Peer:
    """A family's own reference (``REFERENCES``) on the directory oasr reads, in float32 whatever
    oasr's compute type; no long cell: neither cuts a long input (attention over all of it)."""
    return Peer(
        name,
        lambda args, workload: [] if workload == "long" else [name],
        lambda args, cache_dir, ct: {"model_dir": str(Path(args.model).resolve())},
        lambda args, ct: "float32",
    )


PEERS: dict[str, Peer] = {
    FW: Peer(
        "faster_whisper",
        _fw_systems,
        lambda args, cache_dir, ct: {"ct2_dir": ct2_model_dir(args.model, cache_dir)},
        lambda args, ct: ct,
    ),
    WCPP: Peer(
        "pywhispercpp",
        lambda args, workload: [WCPP],
        lambda args, cache_dir, ct: {"ggml_path": ggml_model_file(args.model, cache_dir, ggml_type(args, ct))},
        ggml_type,
    ),
    CRISP: Peer(
        "crispasr",
        lambda args, workload: [CRISP],
        lambda args, cache_dir, ct: {"ggml_path": ggml_model_file(args.model, cache_dir, ggml_type(args, ct))},
        ggml_type,
    ),
    SHERPA: Peer(
        "sherpa_onnx",
        lambda args, workload: [] if workload == "long" else [SHERPA],  # it decodes 29.5 s a call at most
        lambda args, cache_dir, ct: sherpa_onnx_model(args.model, cache_dir, ct),
        lambda args, ct: ct,
    ),
    TRANSFORMERS: _reference_peer(TRANSFORMERS),
    FUNASR: _reference_peer(FUNASR),
}
CHILDREN: dict[str, Callable[[dict], dict]] = {
    OASR: _oasr_child,
    FW: _faster_whisper_child,
    FW_BATCHED: _faster_whisper_child,
    WCPP: _whisper_cpp_child,
    CRISP: _crispasr_child,
    SHERPA: _sherpa_onnx_child,
    TRANSFORMERS: _transformers_child,
    FUNASR: _funasr_child,
}


def child_main() -> int:
    """Entry of a timed child: a JSON spec on stdin, one ``RESULT_MARKER`` JSON line on stdout."""
    spec = json.loads(sys.stdin.read())
    result = (_diarization_child if "diarizer" in spec else CHILDREN[spec["system"]])(spec)
    result["peak_rss_mb"] = _peak_rss_mb()
    result["load_average_1m"] = os.getloadavg()[0]  # other work on the machine skews the timing
    print(RESULT_MARKER + json.dumps(result), flush=True)
    return 0


def _package_path() -> str:
    """``PYTHONPATH`` with this checkout first, so that a child imports this oasr."""
    package_root = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)


def child_command(spec: dict) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a timed child (its spec goes on stdin)."""
    env = {**os.environ, **{name: str(spec["threads"]) for name in THREAD_ENV}, "PYTHONPATH": _package_path()}
    return [sys.executable, str(Path(__file__).resolve())], env


def run_child(spec: dict, timeout_s: float) -> dict:
    """Run one timed child and return its result.

    Raises:
        CliError: the child failed or timed out (with the end of its stderr).
    """
    cmd, env = child_command(spec)
    try:
        proc = subprocess.run(
            cmd, input=json.dumps(spec), capture_output=True, text=True, env=env, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise _error(f"{spec['system']} ({spec['workload']}) ran past --timeout {timeout_s:g} s") from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if proc.returncode != 0 or not lines:
        raise _error(
            f"{spec['system']} ({spec['workload']}) failed with exit code {proc.returncode}:\n{proc.stderr[-3000:]}"
        )
    return json.loads(lines[-1][len(RESULT_MARKER) :])


# ---------------------------------------------------------------------------
# Aggregation and reporting


def spread(values: Sequence[float]) -> dict[str, float]:
    """``{"median", "min", "max"}`` of ``values``."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: Sequence[dict], audio_s: float) -> dict[str, dict[str, float]]:
    """Median / min / max over the rounds of each metric in ``METRICS``.

    Args:
        runs: child results (``wall_s``, ``tokens``, ``peak_rss_mb``, ``load_s``).
        audio_s: seconds of audio one run transcribes (for RTFx).
    """
    per_run = [
        {
            "wall_s": r["wall_s"],
            "rtfx": audio_s / r["wall_s"],
            "tokens_per_s": r["tokens"] / r["wall_s"],
            "peak_rss_mb": r["peak_rss_mb"],
            "load_s": r["load_s"],
        }
        for r in runs
    ]
    stats = {m: spread([p[m] for p in per_run]) for m in METRICS}
    for optional in ("first_delta_s", "cpu_s"):
        values = [r.get(optional) for r in runs]
        if values and all(v is not None for v in values):
            stats[optional] = spread(values)  # type: ignore[arg-type]
    return stats


def ratios(oasr_stats: dict, peer_stats: dict) -> dict[str, float]:
    """oasr / peer of the medians: RTFx (> 1: oasr faster), wall time (< 1: oasr faster), peak RSS, and
    CPU seconds where both children reported them."""
    metrics = ("rtfx", "wall_s", "peak_rss_mb", *(["cpu_s"] if "cpu_s" in oasr_stats and "cpu_s" in peer_stats else []))
    return {m: oasr_stats[m]["median"] / peer_stats[m]["median"] for m in metrics}


def error_rate(workload: Workload, texts: Sequence[str]) -> dict[str, float]:
    """Corpus WER (CER for unspaced scripts) per language of ``texts`` against the references."""
    from oasr.metrics import error_rates

    rows = [(ref, hyp, lang) for (ref, lang), hyp in zip(workload.references, texts) if ref]
    return {lang: e.rate for lang, e in error_rates(rows).items()}


def agreement(oasr_texts: Sequence[str], peer_texts: Sequence[str]) -> dict[str, float]:
    """How far the peer's transcripts are oasr's: files with the same text (whitespace runs
    collapsed) and the share of the peer's characters oasr matches (1 - character edit distance /
    the peer's characters). With the same weights and the same greedy decode this is the parity of
    the two implementations at full size, random weights included.

    Returns:
        ``{"same_files", "files", "chars"}``.
    """
    from rapidfuzz.distance import Levenshtein  # jiwer's own dependency

    pairs = [(" ".join(a.split()), " ".join(b.split())) for a, b in zip(oasr_texts, peer_texts, strict=True)]
    chars = sum(len(b) for _, b in pairs)
    edits = sum(Levenshtein.distance(a, b) for a, b in pairs)
    return {
        "same_files": sum(a == b for a, b in pairs),
        "files": len(pairs),
        "chars": 1.0 - edits / chars if chars else float(edits == 0),
    }


def _cell(s: dict[str, float], spec: str) -> str:
    return f"{s['median']:{spec}} [{s['min']:{spec}}–{s['max']:{spec}}]"


def _system_label(r: dict) -> str:
    """The system, with its weights where they are not the compute type (whisper.cpp's f16, q8_0)."""
    weights = r.get("weights")
    return r["system"] if weights in (None, r.get("compute_type")) else f"{r['system']} ({weights})"


def markdown_table(report: dict) -> str:
    """The results as a markdown table, a row per cell and system (median [min–max] over the rounds);
    each peer's row ends with oasr's lead: the peer's wall / oasr's wall (> 1: oasr faster) and
    oasr's peak RSS / the peer's, both of the medians in the same cell."""
    lines = [
        "| compute | threads | workload | audio s | batch | system | wall s | first text s | RTFx | tokens/s "
        "| peak RSS MiB | load s | WER | oasr ahead by (peer wall / oasr wall) | oasr/peer RSS | CPU s "
        "| oasr ahead in CPU s | same text as oasr (files, chars) |",
        "|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    s = report["settings"]
    for r in report["results"]:
        st = r["stats"]
        rates = r.get("error_rate") or {}
        rate = rates.get("en", next(iter(rates.values()), None))
        vs = r.get("vs_oasr")
        wer = "random weights" if s.get("random_weights") else "-" if rate is None else f"{100 * rate:.1f}%"
        cpu = _cell(st["cpu_s"], ".2f") if "cpu_s" in st else "-"
        cpu_ratio = "-" if vs is None or "cpu_s" not in vs else f"{1 / vs['cpu_s']:.2f}×"
        same = r.get("agreement")
        same = "-" if same is None else f"{same['same_files']}/{same['files']}, {100 * same['chars']:.1f}%"
        rtfx_ratio = "-" if vs is None else f"{vs['rtfx']:.2f}×"
        rss_ratio = "-" if vs is None else f"{vs['peak_rss_mb']:.2f}×"
        lines.append(
            f"| {r['compute_type']} | {r['threads']} "
            f"| {r['workload']} | {r['audio_s']:.1f} | {r['batch_size']} | {_system_label(r)} "
            f"| {_cell(st['wall_s'], '.2f')} | {_cell(st['first_delta_s'], '.2f') if 'first_delta_s' in st else '-'} "
            f"| {_cell(st['rtfx'], '.1f')} | {st['tokens_per_s']['median']:.1f} "
            f"| {st['peak_rss_mb']['median']:.0f} | {st['load_s']['median']:.2f} | {wer} | {rtfx_ratio} | {rss_ratio} "
            f"| {cpu} | {cpu_ratio} | {same} |"
        )
    lines += [
        "",
        f"{s['model']}, beam {s['beam_size']}, temperature 0, language {s['language']}, "
        f"timestamps {'on' if s['timestamps'] else 'off'}, oasr VAD {'on' if s.get('oasr_vad') else 'off'}, "
        f"{s['rounds']} rounds, one fresh process per run, systems interleaved in each round "
        f"(median [min–max]); WER of every side by one normaliser (openai-whisper's English normaliser, "
        f"whisper_normalizer) against the references; {report['machine']['cpus']} CPUs, "
        f"{report['machine']['platform']}.",
        *([s["note"] + "."] if s.get("note") else []),
        *(
            [
                "Random weights (a checkpoint's shape, for timing): no WER; the parity of the two sides is the "
                "last column (transcripts equal to oasr's, and the share of the peer's characters oasr matches)."
            ]
            if s.get("random_weights")
            else []
        ),
        *(
            [f"{', '.join(refs)}: each side at the family's defaults (greedy), the reference in float32."]
            if (refs := [p for p in s.get("peers", []) if p in REFERENCES])
            else []
        ),
    ]
    return "\n".join(lines) + "\n"


def plot_rtfx(report: dict, path: Path) -> bool:
    """RTFx (median, min–max bars) of the corpus workload; False if there is none. Against batch
    size, a line per system, compute type and thread count, when several batch sizes ran; with one
    batch size, grouped bars: a group per compute type and thread count, a bar per system."""
    rows = [r for r in report["results"] if r["workload"] == "corpus"]
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = report["settings"]
    sizes = sorted({r["batch_size"] for r in rows})

    def spread(mine: list[dict]) -> tuple[list[float], list[list[float]]]:
        med = [r["stats"]["rtfx"]["median"] for r in mine]
        err = [
            [m - r["stats"]["rtfx"]["min"] for m, r in zip(med, mine)],
            [r["stats"]["rtfx"]["max"] - m for m, r in zip(med, mine)],
        ]
        return med, err

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    if len(sizes) > 1:
        for label in dict.fromkeys(f"{_system_label(r)}, {r['compute_type']}, {r['threads']} threads" for r in rows):
            mine = sorted(
                (r for r in rows if f"{_system_label(r)}, {r['compute_type']}, {r['threads']} threads" == label),
                key=lambda r: r["batch_size"],
            )
            med, err = spread(mine)
            ax.errorbar([r["batch_size"] for r in mine], med, yerr=err, marker="o", capsize=3, label=label)
        ax.set_xscale("log", base=2)  # batch sizes are usually powers of two
        ax.set_xticks(sizes, labels=[str(b) for b in sizes])
        ax.set_xlabel("batch size")
    else:
        cells = list(dict.fromkeys((r["compute_type"], r["threads"]) for r in rows))
        systems = list(dict.fromkeys(r["system"] for r in rows))
        width = 0.8 / len(systems)
        for k, system in enumerate(systems):
            mine = [
                next((r for r in rows if r["system"] == system and (r["compute_type"], r["threads"]) == c), None)
                for c in cells
            ]
            xs = [i + (k - (len(systems) - 1) / 2) * width for i, r in enumerate(mine) if r is not None]
            med, err = spread([r for r in mine if r is not None])
            ax.bar(xs, med, width, yerr=err, capsize=2, label=system)
        ax.set_xticks(range(len(cells)), labels=[f"{c}, {t} thr" for c, t in cells])
        ax.set_xlabel(f"compute type, threads (batch {sizes[0]})")
    ax.set_ylabel("RTFx (audio s / wall s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"corpus throughput: {s['model']}, beam {s['beam_size']}")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------
# A diarizer against its reference (--peer reference)


def _diarization_child(spec: dict) -> dict:
    """oasr's ``load_diarizer(spec["model"])`` (system ``oasr``) or its reference (``REFERENCES`` of
    ``oasr.diarization.references``, by ``spec["diarizer"]``) on ``spec["files"]``, ``batch_size``
    recordings a call, after one call on the warm-up clip. Both sides get the same arrays, decoded
    by oasr before the clock (the references take arrays); no speaker count is given. Both import
    oasr before torch, so both run with the OpenMP spin count oasr sets (``oasr/__init__.py``)."""
    t0 = time.perf_counter()
    from oasr.audio import load_audio
    from oasr.diarization.loader import load_diarizer
    from oasr.diarization.references import REFERENCES, in_batches

    t1 = time.perf_counter()
    import torch  # loaded by oasr.audio already

    torch.set_num_threads(spec["threads"])
    if spec["system"] == OASR:
        diarizer = load_diarizer(spec["model"])

        def diarize(audios):
            return diarizer.diarize(list(audios))
    else:
        diarize = REFERENCES[spec["diarizer"]].load(spec["model"])
    t2 = time.perf_counter()
    audios = [load_audio(path) for path in spec["files"]]
    diarize([load_audio(spec["warmup"])])
    t3, c3 = time.perf_counter(), time.process_time()
    out = in_batches(diarize, audios, spec["batch_size"])
    return {
        "import_s": t1 - t0,
        "load_s": t2 - t1,
        "warmup_s": t3 - t2,
        "wall_s": time.perf_counter() - t3,
        "cpu_s": time.process_time() - c3,
        "diarizations": [d.to_dict() for d in out],
    }


def check_diarizer_reference(args: argparse.Namespace) -> str:
    """What ``--peer reference`` cannot run: other peers beside it, decode options, a plot, a model
    that is not a diarizer, its reference's package missing. Returns the diarization package's name.

    Raises:
        CliError: (exit code 2) naming the option and the reason or the fix.
    """
    flag = f"--peer {DIARIZER_REFERENCE}"
    if len(_peers(args)) > 1:
        raise _error(f"{flag}: a diarizer's own reference, alone", 2)
    changed = [
        option
        for option, on in (
            ("--beam-size", args.beam_size != 1),
            ("--timestamps", args.timestamps),
            ("--vad", args.vad),
            ("--compute-type int8", "int8" in args.compute_type),
        )
        if on
    ]
    if changed:
        raise _error(f"{flag}: both sides diarize at their defaults in float32; drop {' '.join(changed)}", 2)
    if args.plot is not None:
        raise _error(f"{flag}: no plot (the table and --json hold the figures); drop --plot", 2)
    from oasr.diarization.loader import PACKAGES, detect_diarizer
    from oasr.diarization.references import REFERENCES

    kind = detect_diarizer(args.model) if Path(args.model).exists() else None
    if kind is None:
        layouts = "; ".join(f"{name}: {layout}" for name, (_, layout) in PACKAGES.items())
        raise _error(f"{flag}: --model {args.model} is not a diarizer oasr.load_diarizer reads ({layouts})", 2)
    if kind not in REFERENCES:
        raise _error(f"{flag}: oasr knows no reference for {kind} diarizers", 2)
    reference = REFERENCES[kind]
    if not reference.available():
        raise _error(
            f"{flag}: a {kind} diarizer's reference is {reference.name}, which needs {reference.module}: "
            f"pip install torch=={_torch_version()} {reference.install}",
            2,
        )
    return kind


def _diarization_stats(runs: Sequence[dict], audio_s: float) -> dict[str, dict[str, float]]:
    """Median / min / max over the rounds of wall and CPU seconds, RTFx, peak RSS and load time."""
    per_run = [
        {**{m: r[m] for m in ("wall_s", "cpu_s", "peak_rss_mb", "load_s")}, "rtfx": audio_s / r["wall_s"]} for r in runs
    ]
    return {m: spread([p[m] for p in per_run]) for m in per_run[0]}


def run_diarization_benchmark(args: argparse.Namespace, kind: str) -> dict:
    """oasr's diarizer (``kind``: its ``oasr.diarization.loader`` package) against its reference, both
    on ``args.model``: for each thread count, workload and batch size, ``--rounds`` rounds of one fresh
    child each, the order reversed every other round (A/B, B/A); the turns' agreement from the first
    round's. Returns the report (settings, workloads, results)."""
    from oasr.cli import bench_contention
    from oasr.diarization import Diarization, SpeakerTurn
    from oasr.diarization.references import REFERENCES, agreement

    _, _, workloads, warmup = _inputs(args)
    reference = REFERENCES[kind].name
    thread_counts = list(dict.fromkeys(t or _all_cores() for t in args.threads))
    report: dict[str, Any] = {
        "settings": {
            "model": args.model,
            "diarizer": kind,
            "reference": reference,
            "thread_counts": thread_counts,
            "rounds": args.rounds,
            "batch_size": args.batch_size,
            "batch_sizes": args.batch_sizes,
            "warmup": Path(warmup).name,
            **bench_contention.settings(args),
        },
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "workloads": {w.name: {"audio_s": w.audio_s, "files": [Path(p).name for p in w.paths]} for w in workloads},
        "results": [],
    }
    for threads in thread_counts:
        for workload in workloads:
            for batch_size in args.batch_sizes if workload.name == "corpus" else [args.batch_size]:
                runs: dict[str, list[dict]] = {OASR: [], DIARIZER_REFERENCE: []}
                for k in range(args.rounds):
                    for system in list(runs) if k % 2 == 0 else list(runs)[::-1]:
                        spec = {**_child_spec(args, system, workload, warmup, batch_size, threads), "diarizer": kind}
                        cell = f"{kind} {threads} thr {workload.name} batch {batch_size}"
                        runs[system].append(_run_timed(args, spec, f"{cell} round {k + 1}/{args.rounds}"))
                stats = {s: _diarization_stats(r, workload.audio_s) for s, r in runs.items()}
                turns = {
                    s: [
                        Diarization([SpeakerTurn(**t) for t in d["turns"]], d["duration"]) for d in r[0]["diarizations"]
                    ]
                    for s, r in runs.items()
                }
                for system, mine in runs.items():
                    peer = system != OASR
                    report["results"].append(
                        {
                            "compute_type": "float32",
                            "threads": threads,
                            "workload": workload.name,
                            "batch_size": batch_size,
                            "system": reference if peer else OASR,
                            "audio_s": workload.audio_s,
                            "files": len(workload.clips),
                            "stats": stats[system],
                            "vs_oasr": ratios(stats[OASR], stats[system]) if peer else None,
                            "agreement": agreement(turns[OASR], turns[system]) if peer else None,
                            "speakers": [len(d.speakers) for d in turns[system]],
                            "runs": [{k: v for k, v in r.items() if k != "diarizations"} for r in mine],
                        }
                    )
    return report


def diarization_table(report: dict) -> str:
    """``run_diarization_benchmark``'s report as a markdown table, a row per cell and side (median
    [min–max] over the rounds); the reference's row ends with oasr's lead (its wall / oasr's, its
    CPU seconds / oasr's, oasr's RSS / its) and the DER of oasr's turns against its turns."""
    lines = [
        "| threads | workload | audio s | batch | system | wall s | CPU s | RTFx | peak RSS MiB | load s "
        "| oasr ahead by (ref wall / oasr wall) | oasr ahead in CPU s | oasr/ref RSS "
        "| DER of oasr vs the reference's turns | same turns (files) |",
        "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        st, vs, agree = r["stats"], r["vs_oasr"], r["agreement"]
        lead = (
            "- | - | -"
            if vs is None
            else f"{1 / vs['wall_s']:.2f}× | {1 / vs['cpu_s']:.2f}× | {vs['peak_rss_mb']:.2f}×"
        )
        if agree is None:
            same = "- | -"
        else:
            der = "-" if agree["der"] is None else f"{100 * agree['der']:.2f}%"
            same = f"{der} | {agree['same_turns']}/{agree['files']}"
        lines.append(
            f"| {r['threads']} | {r['workload']} | {r['audio_s']:.1f} | {r['batch_size']} | {r['system']} "
            f"| {_cell(st['wall_s'], '.2f')} | {_cell(st['cpu_s'], '.2f')} | {_cell(st['rtfx'], '.1f')} "
            f"| {st['peak_rss_mb']['median']:.0f} | {st['load_s']['median']:.2f} | {lead} | {same} |"
        )
    s = report["settings"]
    lines += [
        "",
        f"{s['model']} (oasr's {s['diarizer']} diarizer) against {s['reference']} on the same weights, both in "
        f"float32 at their defaults, no speaker count given; {s['rounds']} rounds, one fresh process per run, the "
        "two sides' order reversed every other round (median [min–max]); the audio decoded by oasr before the "
        "clock on both sides; DER at collar 0 with overlap scored, the reference's turns as the truth, over the "
        f"files where it found speech; {report['machine']['cpus']} CPUs, {report['machine']['platform']}.",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# The command


def register(subparsers: argparse._SubParsersAction) -> None:
    from oasr.cli.common import nonnegative_int, positive_float, positive_int

    p = subparsers.add_parser(
        NAME,
        help="benchmark oasr against faster-whisper, whisper.cpp, ... (separate processes, alternating rounds)",
        description="Time oasr and its peers on the same audio, weights and decode settings, each run a "
        "fresh process, alternating; print median and spread of wall time, RTFx, tokens/s, peak memory and WER "
        "for every cell of compute types x thread counts x workloads x batch sizes.",
    )
    p.add_argument(
        "--workload",
        choices=(*WORKLOADS, "streaming", "all"),
        default="all",
        help="what to time (default all: short, long, corpus); streaming: live streams kept at real time by "
        "--model (a streaming checkpoint), batched against a one-stream-per-forward loop",
    )
    p.add_argument(
        "--peer",
        nargs="+",
        choices=(*PEERS, DIARIZER_REFERENCE, "none"),
        default=[FW],
        help="the systems to compare with, each timed in every cell (default %(default)s; none: oasr alone; "
        f"{DIARIZER_REFERENCE}: --model is a diarizer, timed against its reference: transformers, pyannote.audio "
        "or NeMo)",
    )
    p.add_argument("--rounds", type=positive_int, default=3, metavar="K", help="timed runs per system (default 3)")
    p.add_argument(
        "--batch-sizes",
        type=positive_int,
        nargs="+",
        default=[1, 4, 8, 16],
        metavar="N",
        help="corpus: batch sizes to sweep (default 1 4 8 16)",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=8,
        metavar="N",
        help="short and long: oasr max_batch_size and the batched peer's batch_size (default 8)",
    )
    p.add_argument(
        "--long-peer",
        choices=("sequential", "batched", "both"),
        default="both",
        help="long: faster-whisper's WhisperModel.transcribe, its BatchedInferencePipeline, or both (default)",
    )
    g = p.add_argument_group("model and decoding (the same on both sides)")
    g.add_argument(
        "-m",
        "--model",
        nargs="+",
        default="whisper-base",
        help="bundled name or CTranslate2 directory (with --peer transformers / funasr: the family's "
        "checkpoint directory; with --peer reference: a diarizer, any path oasr.load_diarizer reads); "
        "streaming: one or more models (a family each)",
    )
    g.add_argument(
        "--compute-type",
        nargs="+",
        choices=("float32", "int8"),
        default=["float32"],
        help="one or more (default float32); int8: oasr's quantize, faster-whisper's int8, whisper.cpp's q8_0",
    )
    g.add_argument(
        "--ggml-float",
        choices=("f16", "f32"),
        default="f16",
        help="the whisper.cpp peers' weights for float32 (default f16, whisper.cpp's usual; f32 runs in CrispASR, "
        "not in pywhispercpp 1.5.1, whose whisper.cpp 1.8.5 convolves with f16 kernels only)",
    )
    g.add_argument("--beam-size", type=positive_int, default=1, metavar="N", help="default 1 (greedy)")
    g.add_argument(
        "-l", "--language", default="en", metavar="L", help="language of the clips and the decode; auto: detect"
    )
    g.add_argument("--timestamps", action="store_true", help="decode timestamp tokens (default: text only)")
    g.add_argument(
        "--vad",
        action="store_true",
        help="oasr cuts each file at Silero VAD speech boundaries and batches the pieces (vad_filter), as "
        "faster-whisper's batched pipeline does; its sequential transcribe stays without VAD",
    )
    g.add_argument(
        "--threads",
        type=nonnegative_int,
        nargs="+",
        default=[0],
        metavar="N",
        help="CPU threads for each side, one or more values (default 0: all cores)",
    )
    a = p.add_argument_group("audio")
    a.add_argument("--audio-dir", type=Path, default=None, help="folder with manifest.jsonl (default: shared corpus)")
    a.add_argument("--short-clip", default=None, metavar="PATH", help="short: the clip (default jfk.wav)")
    a.add_argument(
        "--long-min-seconds",
        type=positive_float,
        default=330.0,
        metavar="S",
        help="long: concatenate clips until longer than this (default 330)",
    )
    a.add_argument(
        "--corpus-limit", type=positive_int, default=None, metavar="N", help="corpus: N clips, spread evenly"
    )
    a.add_argument(
        "--cache-dir", type=Path, default=None, help="long recording and the peers' weights (~/.cache/oasr-bench)"
    )
    st = p.add_argument_group("streaming workload")
    st.add_argument(
        "--stream-counts",
        type=positive_int,
        nargs="+",
        default=[1, 2, 4, 8, 16, 32, 64, 128],
        metavar="N",
        help="concurrent streams to try, in order, until one falls behind (default 1 2 4 ... 128)",
    )
    st.add_argument("--chunk-ms", type=positive_float, default=None, metavar="MS", help="chunk (default: the family's)")
    st.add_argument(
        "--left-chunks", type=nonnegative_int, default=None, metavar="N", help="attention history in chunks"
    )
    st.add_argument(
        "--stream-seconds", type=positive_float, default=8.0, metavar="S", help="audio per stream (default 8)"
    )
    st.add_argument("--architecture", default=None, help="load the checkpoint as this architecture (e.g. transducer)")
    st.add_argument(
        "--transports",
        nargs="+",
        choices=("engine", "ws", "realtime"),
        default=["engine", "ws", "realtime"],
        help="how the streams reach the engine: in-process, oasr's /v1/audio/stream, OpenAI's /v1/realtime "
        "(the last two through an oasr serve child process and WebSocket clients; default all three)",
    )
    from oasr.cli.bench_contention import add_arguments as contention_arguments

    contention_arguments(p)
    g.add_argument(
        "--random-weights",
        action="store_true",
        help="the checkpoint has random weights (a real model's shape, for timing): no WER, whose number "
        "would mean nothing; the agreement of each peer's text with oasr's is the parity check",
    )
    o = p.add_argument_group("output")
    o.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the results as JSON")
    o.add_argument("--markdown", type=Path, default=None, metavar="PATH", help="write the markdown table")
    o.add_argument("--plot", type=Path, default=None, metavar="PATH", help="PNG of corpus RTFx against batch size")
    o.add_argument(
        "--timeout", type=positive_float, default=3600.0, metavar="S", help="seconds one run may take (default 3600)"
    )
    p.set_defaults(func=run, parser=p)


def oasr_quantizes() -> bool:
    """Whether this oasr has int8 weight quantisation (``EngineConfig.quantize``)."""
    from oasr.engine.config import EngineConfig

    return "quantize" in {f.name for f in dataclasses.fields(EngineConfig)}


def check_requirements(args: argparse.Namespace) -> None:
    """Refuse before any work what cannot run: a missing peer or plotting library, int8 without support.

    Raises:
        CliError: (exit code 2) naming the option and the fix.
    """
    if "none" in args.peer and len(args.peer) > 1:
        raise _error("--peer none: oasr alone, with no other peer", 2)
    for name in args.peer:
        if name != "none" and importlib.util.find_spec(PEERS[name].package) is None:
            hint = f"pip install torch=={_torch_version()} {name}" if name in REFERENCES else _bench_hint()
            raise _error(f"--peer {name} needs the {PEERS[name].package} package: {hint} (or --peer none)", 2)
    if CRISP in args.peer and args.beam_size > 1:
        raise _error(f"--peer {CRISP}: greedy only (its Python API sets no beam size); drop --beam-size", 2)
    if SHERPA in args.peer:
        check_sherpa_onnx(args)
    check_references(args)
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise _error(f"--plot needs matplotlib: {_bench_hint()}", 2)
    if "int8" in args.compute_type and not oasr_quantizes():
        raise _error("--compute-type int8: this oasr has no int8 quantisation (EngineConfig.quantize)", 2)
    from oasr.models.bundled import bundled_path, install_hint, is_bundled_name

    if is_bundled_name(args.model) and bundled_path(args.model) is None:
        raise _error(f"model {args.model} is not installed: {install_hint(args.model)}", 2)


def check_sherpa_onnx(args: argparse.Namespace) -> None:
    """What ``--peer sherpa-onnx`` cannot run: its packages missing, beam search, timestamps, long-form
    alone, a short clip it would cut.

    Raises:
        CliError: (exit code 2) naming the option and the reason.
    """
    for package in ("sherpa_onnx", "onnx", "onnxruntime", "soundfile"):
        if importlib.util.find_spec(package) is None:
            raise _error(
                f"--peer {SHERPA} needs the {package} package: pip install sherpa-onnx onnx onnxruntime soundfile", 2
            )
    if args.beam_size != 1:
        raise _error(f"--peer {SHERPA}: its Whisper decodes greedily only; use --beam-size 1", 2)
    if args.timestamps:
        raise _error(f"--peer {SHERPA}: timed without timestamps only (drop --timestamps)", 2)
    if args.workload == "long" and _peers(args) == [SHERPA]:
        raise _error(
            f"--peer {SHERPA}: no long-form cell: its Whisper decodes at most {SHERPA_MAX_S:g} s a call and drops "
            "the rest",
            2,
        )


def check_references(args: argparse.Namespace) -> None:
    """What a family's reference peer (``REFERENCES``) cannot run: Whisper's peers beside it, a model
    that is not a directory, decode settings (each side decodes at the family's defaults).

    Raises:
        CliError: (exit code 2) naming the option and the reason.
    """
    chosen = [name for name in _peers(args) if name in REFERENCES]
    if not chosen:
        return
    if len(_peers(args)) > len(chosen):
        raise _error(f"--peer {' '.join(chosen)}: a family's own reference, not beside Whisper's peers", 2)
    if not Path(args.model).is_dir():
        raise _error(f"--peer {chosen[0]}: --model must be the checkpoint's directory (both sides read it)", 2)
    changed = [
        option
        for option, on in (("--beam-size", args.beam_size != 1), ("--timestamps", args.timestamps), ("--vad", args.vad))
        if on
    ]
    if changed:
        raise _error(f"--peer {chosen[0]}: each side decodes at the family's defaults; drop {' '.join(changed)}", 2)


def _all_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _workloads(args: argparse.Namespace, rows: list[dict], cache_dir: Path) -> list[Workload]:
    names = WORKLOADS if args.workload == "all" else (args.workload,)
    made = {
        "short": lambda: short_workload(rows, args.short_clip),
        "long": lambda: long_workload(rows, cache_dir, args.long_min_seconds),
        "corpus": lambda: corpus_workload(sherpa_onnx_rows(rows) if SHERPA in args.peer else rows, args.corpus_limit),
    }
    workloads = [made[name]() for name in names]
    if SHERPA in args.peer:
        too_long = [
            Path(c.path).name for w in workloads if w.name == "short" for c in w.clips if c.duration_s > SHERPA_MAX_S
        ]
        if too_long:
            raise _error(
                f"--peer {SHERPA}: its Whisper decodes at most {SHERPA_MAX_S:g} s a call: {', '.join(too_long)}", 2
            )
    return workloads


def _peers(args: argparse.Namespace) -> list[str]:
    return [name for name in dict.fromkeys(args.peer) if name != "none"]


def _plan(args: argparse.Namespace, workload: Workload) -> list[tuple[int, list[tuple[str, str]]]]:
    """``(batch size, [(system, its PEERS row or oasr)])`` groups for ``workload``, systems in their
    per-round order: oasr first, then each ``--peer``'s systems."""
    systems = [(OASR, OASR)] + [(s, name) for name in _peers(args) for s in PEERS[name].systems(args, workload.name)]
    sizes = args.batch_sizes if workload.name == "corpus" else [args.batch_size]
    return [(b, systems) for b in sizes]


def _result(
    workload: Workload, batch_size: int, system: str, runs: dict[str, list[dict]], stats: dict, random_weights: bool
) -> dict:
    """One system's row of a cell; ``runs``: every system's runs in the cell (oasr's for the agreement)."""
    texts = runs[system][0]["texts"]
    result = {
        "workload": workload.name,
        "batch_size": batch_size,
        "system": system,
        "audio_s": workload.audio_s,
        "files": len(workload.clips),
        "stats": stats[system],
        "vs_oasr": None if system == OASR else ratios(stats[OASR], stats[system]),
        "error_rate": None if random_weights else error_rate(workload, texts),
        "agreement": None if system == OASR else agreement(runs[OASR][0]["texts"], texts),
        "runs": [{k: v for k, v in r.items() if k != "texts"} for r in runs[system]],
    }
    if len(workload.clips) == 1:  # the transcript of a corpus would bloat the JSON
        result["text"] = texts[0]
    return result


def _child_spec(
    args: argparse.Namespace, system: str, workload: Workload, warmup: str, batch_size: int, threads: int
) -> dict[str, Any]:
    """What every timed child reads: its system, the model, the workload's files, the warm-up clip."""
    return {
        "system": system,
        "workload": workload.name,
        "model": args.model,
        "files": workload.paths,
        "warmup": warmup,
        "batch_size": batch_size,
        "threads": threads,
    }


def _run_timed(args: argparse.Namespace, spec: dict, cell: str) -> dict:
    """One timed child as ``--contention`` asks; its wall and CPU seconds, RTFx and peak RSS on stderr."""
    from oasr.cli import bench_contention  # each child quiet, then beside competitors (--contention)

    timed = functools.partial(run_child, timeout_s=args.timeout)
    result = bench_contention.run_contended(args, spec, timed, child_command(spec))
    print(
        f"oasr {NAME}: {cell} {spec['system']}: {result['wall_s']:.2f} s ({result.get('cpu_s', float('nan')):.2f} "
        f"CPU s), {result['peak_rss_mb']:.0f} MiB",
        file=sys.stderr,
        flush=True,
    )
    return result


def _inputs(args: argparse.Namespace) -> tuple[Path, str | None, list[Workload], str]:
    """The cache folder, the language (None: auto), the workloads asked for and the warm-up clip."""
    audio_dir = args.audio_dir or default_audio_dir()
    if audio_dir is None or not (audio_dir / "manifest.jsonl").is_file():
        raise _error("no benchmark audio: give --audio-dir DIR (a folder with manifest.jsonl)", 2)
    cache_dir = args.cache_dir or default_cache_dir()
    language = None if args.language == "auto" else args.language
    rows = read_manifest(audio_dir, language)
    if not rows:
        raise _error(f"no clips of language {args.language} in {audio_dir / 'manifest.jsonl'}", 2)
    return cache_dir, language, _workloads(args, rows, cache_dir), short_workload(rows, args.short_clip).paths[0]


def run_benchmark(args: argparse.Namespace) -> dict:
    """Run every planned child, cell by cell (compute type x threads x workload x batch size) and round
    by round within a cell, and return the report (settings, workloads, results)."""
    from oasr.cli import bench_contention  # each child quiet, then beside competitors (--contention)

    cache_dir, language, workloads, warmup = _inputs(args)
    thread_counts = list(dict.fromkeys(t or _all_cores() for t in args.threads))
    compute_types = list(dict.fromkeys(args.compute_type))
    settings = {
        "model": args.model,
        "compute_types": compute_types,
        "beam_size": args.beam_size,
        "temperature": 0.0,
        "language": args.language,
        "timestamps": args.timestamps,
        "oasr_vad": args.vad,
        "thread_counts": thread_counts,
        "rounds": args.rounds,
        "peers": _peers(args),
        "ggml_float": args.ggml_float,
        "batch_size": args.batch_size,
        "batch_sizes": args.batch_sizes,
        "warmup": Path(warmup).name,
        "random_weights": args.random_weights,
        **bench_contention.settings(args),
    }
    if SHERPA in args.peer:
        settings["note"] = (
            f"{SHERPA}: no long-form cell (its Whisper decodes at most {SHERPA_MAX_S:g} s a call); "
            f"the corpus holds the clips of at most {SHERPA_MAX_S:g} s"
        )
    report: dict[str, Any] = {
        "settings": settings,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "workloads": {w.name: {"audio_s": w.audio_s, "files": [Path(p).name for p in w.paths]} for w in workloads},
        "results": [],
    }
    for compute_type in compute_types:
        weights = {name: PEERS[name].prepare(args, cache_dir, compute_type) for name in _peers(args)}
        for threads in thread_counts:
            for workload in workloads:
                for batch_size, systems in _plan(args, workload):
                    runs: dict[str, list[dict]] = {s: [] for s, _ in systems}
                    for k in range(args.rounds):
                        for system, peer in systems:
                            spec = {
                                **weights.get(peer, {}),
                                **_child_spec(args, system, workload, warmup, batch_size, threads),
                                "compute_type": compute_type,
                                "beam_size": args.beam_size,
                                "language": language,
                                "timestamps": args.timestamps,
                                "vad": args.vad,
                                "family_defaults": any(p in REFERENCES for p in _peers(args)),
                            }
                            cell = f"{compute_type} {threads} thr {workload.name} batch {batch_size}"
                            runs[system].append(_run_timed(args, spec, f"{cell} round {k + 1}/{args.rounds}"))
                    stats = {s: summarize(r, workload.audio_s) for s, r in runs.items()}
                    for system, peer in systems:
                        cell = {
                            "compute_type": compute_type,
                            "threads": threads,
                            "weights": compute_type if peer == OASR else PEERS[peer].weights(args, compute_type),
                        }
                        row = _result(workload, batch_size, system, runs, stats, args.random_weights)
                        report["results"].append({**cell, **row})
    return report


def run(args: argparse.Namespace) -> int:
    if args.workload == "streaming":
        from oasr.cli.bench_streaming import run_streaming

        if len(args.threads) > 1:
            raise _error("--threads: one value for --workload streaming", 2)
        args.threads = args.threads[0]
        return run_streaming(args, args.audio_dir or default_audio_dir())
    if isinstance(args.model, list):
        if len(args.model) > 1:
            raise _error(f"--model: one model for --workload {args.workload} (several only with streaming)", 2)
        args.model = args.model[0]
    if DIARIZER_REFERENCE in args.peer:
        report = run_diarization_benchmark(args, check_diarizer_reference(args))
        table = diarization_table(report)
    else:
        check_requirements(args)
        report = run_benchmark(args)
        table = markdown_table(report)
    from oasr.cli.bench_contention import slowdown_table

    table += slowdown_table(report)
    print(table)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.markdown is not None:
        args.markdown.write_text(table, encoding="utf-8")
    if args.plot is not None and not plot_rtfx(report, args.plot):
        print(f"oasr {NAME}: --plot: no corpus workload was run, nothing plotted", file=sys.stderr)
    return 0


if __name__ == "__main__":  # a timed child, started by run_child
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # this file's folder (oasr/cli) is no place to import other packages from
    sys.exit(child_main())
