"""faster-whisper's ``vad`` module: its ``VadOptions``, its Silero model and its span rule.

The speech probabilities are Silero VAD v6.0's, the model faster-whisper 1.2 bundles
(``faster_whisper/assets/silero_vad_v6.onnx``): its 16 kHz weights ship here
(``assets/silero_vad_v6.safetensors``, provenance below and in ``assets/README.md``) and run
in oasr's batched Silero (``oasr.audio.vad.SileroNet`` through ``_BatchedSilero``), with
faster-whisper's windows (512 samples, 64 of context, the audio zero-padded by 1..512 samples),
so that the probabilities equal faster-whisper's to float rounding and the spans exactly. oasr's
own VAD (``oasr.audio.vad``) runs the installed silero-vad package's newer model, whose
probabilities differ; this module needs neither that package nor onnxruntime.

The rule that turns probabilities into spans is faster-whisper's sequential one (start at
``threshold``, end after ``min_silence_duration_ms`` below ``neg_threshold``, long spans cut
at the last pause of >= 98 ms, ``speech_pad_ms`` padding shared between close spans), written
here from its documented behaviour.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SpeechTimestampsMap", "VadOptions", "collect_chunks", "get_speech_timestamps"]

_WINDOW = 512  # samples per Silero probability at 16 kHz
SILERO_V6 = Path(__file__).with_name("assets") / "silero_vad_v6.safetensors"
SILERO_V6_PROVENANCE = (
    "Silero VAD v6.0, 16 kHz network (faster-whisper 1.2.1's silero_vad_v6.onnx, equal to 5e-7); "
    "converted to safetensors from the silero-vad 6.0.0 PyPI wheel's silero_vad/data/silero_vad.jit "
    "(SHA-256 b178b4bc39467ecd5e9eb0bc6f2fcc291c1cc1cc55a68fea8c0c2c0d5fbbe66c), sub-model _model's "
    "state_dict; MIT licence, (c) 2020-present Silero Team (github.com/snakers4/silero-vad)"
)
SILERO_V6_SHA256 = "2a3d666b763b7984bec4667097ac4e35b5532bc8bcf45d4417e7555c5ec13953"
_lock = threading.Lock()
_net: Any = None
_MIN_PAUSE_AT_MAX_SPEECH_MS = 98  # a pause at least this long is where an over-long span may be cut


@dataclass
class VadOptions:
    """faster-whisper's VAD options and defaults (its sequential ``vad_filter``)."""

    threshold: float = 0.5
    neg_threshold: float | None = None  # default: max(threshold - 0.15, 0.01)
    min_speech_duration_ms: int = 0
    max_speech_duration_s: float = math.inf
    min_silence_duration_ms: int = 2000
    speech_pad_ms: int = 400

    def __post_init__(self) -> None:
        # faster-whisper takes anything and fails (or not) deep in its loop; a clear error here
        def number(name: str, value: Any) -> float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise ValueError(f"vad {name} must be a number, got {value!r}")
            return value

        number("threshold", self.threshold)
        if self.neg_threshold is not None:
            number("neg_threshold", self.neg_threshold)
        for name in ("min_speech_duration_ms", "min_silence_duration_ms", "speech_pad_ms"):
            if number(name, getattr(self, name)) < 0:
                raise ValueError(f"vad {name} must be >= 0, got {getattr(self, name)!r}")
        if not number("max_speech_duration_s", self.max_speech_duration_s) > 0:
            raise ValueError(f"vad max_speech_duration_s must be > 0, got {self.max_speech_duration_s!r}")


def get_vad_model() -> Any:
    """Silero VAD v6.0's 16 kHz network, batched (loaded once, shared by every thread).

    Raises:
        RuntimeError: the bundled weights are missing or not the recorded file.
    """
    global _net
    with _lock:
        if _net is None:
            from safetensors.torch import load_file

            from oasr.audio.vad import SileroNet, _BatchedSilero

            try:
                digest = hashlib.sha256(SILERO_V6.read_bytes()).hexdigest()
            except OSError as e:
                raise RuntimeError(f"the bundled Silero VAD v6.0 weights are missing ({e}): reinstall oasr") from e
            if digest != SILERO_V6_SHA256:
                raise RuntimeError(
                    f"{SILERO_V6} has SHA-256 {digest}, not the bundled {SILERO_V6_SHA256}: reinstall oasr"
                )
            _net = _BatchedSilero(SileroNet.from_state_dict(load_file(str(SILERO_V6))), _WINDOW)
    return _net


def speech_probabilities(audio: np.ndarray) -> np.ndarray:
    """Silero v6.0's probability for each 512-sample window of ``audio`` zero-padded by 1..512
    samples to a whole number of windows, as faster-whisper computes them: a whole silent window
    when the length is a multiple of 512, and the padded audio's last 64 samples zeroed (its
    model writes zeros into the last window's context slice, a view of that audio, before it
    runs: only the last probability changes, and only when the padding is under 64 samples).

    Shapes:
        audio: (n,) -> (n // 512 + 1,)
    """
    import torch

    net = get_vad_model()
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    padded = np.pad(audio, (0, _WINDOW - audio.shape[0] % _WINDOW))
    padded[-net.context :] = 0
    return net(torch.from_numpy(padded)).numpy()


def get_speech_timestamps(
    audio: np.ndarray, vad_options: VadOptions | None = None, sampling_rate: int = 16000, **kwargs
) -> list[dict]:
    """Speech spans of 16 kHz ``audio``: ``[{"start": sample, "end": sample}, ...]`` in order.

    Args:
        audio: mono float samples.
        vad_options: the options (else ``VadOptions(**kwargs)``).

    Raises:
        ValueError: ``sampling_rate`` is not 16000.
    """
    if sampling_rate != 16000:
        raise ValueError(f"faster-whisper's VAD takes 16 kHz audio, got {sampling_rate}")
    o = vad_options if vad_options is not None else VadOptions(**kwargs)
    probs = speech_probabilities(audio)
    return spans_from_probabilities(probs, len(audio), o, sampling_rate)


def spans_from_probabilities(probs: np.ndarray, n: int, o: VadOptions, sampling_rate: int = 16000) -> list[dict]:
    """faster-whisper's span rule over window probabilities of ``n`` samples of audio."""
    neg = o.neg_threshold if o.neg_threshold is not None else max(o.threshold - 0.15, 0.01)
    pad = sampling_rate * o.speech_pad_ms / 1000
    min_speech = sampling_rate * o.min_speech_duration_ms / 1000
    min_silence = sampling_rate * o.min_silence_duration_ms / 1000
    max_speech = sampling_rate * o.max_speech_duration_s - _WINDOW - 2 * pad
    pause_at_max = sampling_rate * _MIN_PAUSE_AT_MAX_SPEECH_MS / 1000

    spans: list[dict] = []
    start: int | None = None  # the open span's start, None while in silence
    silence_from = 0  # where the current run below neg began (0: none)
    last_pause_end = 0  # end of the latest long-enough pause in the open span
    resume_at = 0  # where speech resumed after that pause
    for i, p in enumerate(probs):
        t = _WINDOW * i
        if p >= o.threshold and silence_from:
            silence_from = 0
            if resume_at < last_pause_end:
                resume_at = t
        if start is None:
            if p >= o.threshold:
                start = t
            continue
        if t - start > max_speech:
            if last_pause_end:  # cut at the last pause; continue from where speech resumed
                spans.append({"start": start, "end": last_pause_end})
                start = None if resume_at < last_pause_end else resume_at
                last_pause_end = resume_at = silence_from = 0
                if start is None:
                    continue
            else:  # no pause: cut here
                spans.append({"start": start, "end": t})
                start, last_pause_end, resume_at, silence_from = None, 0, 0, 0
                continue
        if p < neg:
            if not silence_from:
                silence_from = t
            if t - silence_from > pause_at_max:
                last_pause_end = silence_from
            if t - silence_from >= min_silence:
                if silence_from - start > min_speech:
                    spans.append({"start": start, "end": silence_from})
                start, last_pause_end, resume_at, silence_from = None, 0, 0, 0
    if start is not None and n - start > min_speech:
        spans.append({"start": start, "end": n})
    for i, s in enumerate(spans):  # pad; close neighbours share the silence between them
        if i == 0:
            s["start"] = int(max(0, s["start"] - pad))
        if i + 1 < len(spans):
            nxt = spans[i + 1]
            gap = nxt["start"] - s["end"]
            if gap < 2 * pad:
                s["end"] += int(gap // 2)
                nxt["start"] = int(max(0, nxt["start"] - gap // 2))
            else:
                s["end"] = int(min(n, s["end"] + pad))
                nxt["start"] = int(max(0, nxt["start"] - pad))
        else:
            s["end"] = int(min(n, s["end"] + pad))
    return spans


def collect_chunks(
    audio: np.ndarray, chunks: list[dict], sampling_rate: int = 16000, max_duration: float = math.inf
) -> tuple[list[np.ndarray], list[dict]]:
    """Join the spans' audio, in order, into pieces of at most ``max_duration`` seconds.

    Returns:
        the pieces, and for each ``{"offset": s, "duration": s, "segments": [spans]}`` (offset:
        where the piece starts in the joined speech, in seconds, as faster-whisper's; its
        ``segments`` are all of the piece's spans, where faster-whisper 1.2.1 leaves out the
        first span of every piece after the first).
    """
    if not chunks:
        return [np.array([], dtype=np.float32)], [{"offset": 0, "duration": 0, "segments": []}]
    pieces, meta = [], []
    current: list[dict] = []
    size = done = 0  # samples in the current piece, and in the pieces before it
    limit = max_duration * sampling_rate

    def flush() -> None:
        pieces.append(np.concatenate([audio[c["start"] : c["end"]] for c in current]))
        meta.append({"offset": done / sampling_rate, "duration": size / sampling_rate, "segments": current})

    for c in chunks:
        if current and size + c["end"] - c["start"] > limit:
            flush()
            current, size, done = [], 0, done + size
        current = [*current, c]
        size += c["end"] - c["start"]
    flush()
    return pieces, meta


class SpeechTimestampsMap:
    """faster-whisper's map from a time in the joined speech back to the original audio.

    Args:
        chunks: the speech spans (``get_speech_timestamps``), in samples of the original audio.
        sampling_rate: their rate.
        time_precision: decimals of the mapped times.
    """

    def __init__(self, chunks: list[dict], sampling_rate: int, time_precision: int = 2) -> None:
        self.sampling_rate = sampling_rate
        self.time_precision = time_precision
        self.chunk_end_sample: list[int] = []  # each span's end, counted in the joined speech
        self.total_silence_before: list[float] = []  # seconds cut before each span
        cut = last_end = 0
        for c in chunks:
            cut += c["start"] - last_end
            last_end = c["end"]
            self.chunk_end_sample.append(c["end"] - cut)
            self.total_silence_before.append(cut / sampling_rate)

    def get_original_time(self, time: float, chunk_index: int | None = None, is_end: bool = False) -> float:
        """``time`` (seconds in the joined speech) in the original audio, in span ``chunk_index``
        (default: the span holding it; an end exactly on a span's end stays in that span)."""
        if chunk_index is None:
            chunk_index = self.get_chunk_index(time, is_end)
        return round(self.total_silence_before[chunk_index] + time, self.time_precision)

    def get_chunk_index(self, time: float, is_end: bool = False) -> int:
        """The span holding ``time`` (seconds in the joined speech); past the last, the last."""
        sample = int(time * self.sampling_rate)
        if is_end and sample in self.chunk_end_sample:
            return self.chunk_end_sample.index(sample)
        return min(bisect.bisect(self.chunk_end_sample, sample), len(self.chunk_end_sample) - 1)
