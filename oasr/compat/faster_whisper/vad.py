"""faster-whisper's ``vad`` module: its ``VadOptions`` and span rule over oasr's Silero VAD.

The speech probabilities are oasr's (``oasr.audio.vad.speech_probabilities``: the silero-vad
package's model, batched); the rule that turns them into spans is faster-whisper's sequential
one (start at ``threshold``, end after ``min_silence_duration_ms`` below ``neg_threshold``,
long spans cut at the last pause of >= 98 ms, ``speech_pad_ms`` padding shared between close
spans), written here from its documented behaviour. Spans equal faster-whisper's wherever the
probabilities do: faster-whisper 1.2 bundles Silero v6.0 (``silero_vad_v6.onnx``), which
silero-vad 6.0 ships too; silero-vad 6.2's model gives other probabilities on the same audio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["VadOptions", "collect_chunks", "get_speech_timestamps"]

_WINDOW = 512  # samples per Silero probability at 16 kHz
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


def speech_probabilities(audio: np.ndarray) -> np.ndarray:
    """One Silero probability per 512-sample window of ``audio`` zero-padded by 1..512 samples
    to a whole number of windows (faster-whisper's padding)."""
    from oasr.audio.vad import speech_probabilities as probs

    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    return probs(np.pad(audio, (0, _WINDOW - audio.shape[0] % _WINDOW)), 16000)


def get_speech_timestamps(
    audio: np.ndarray, vad_options: VadOptions | None = None, sampling_rate: int = 16000, **kwargs
) -> list[dict]:
    """Speech spans of 16 kHz ``audio``: ``[{"start": sample, "end": sample}, ...]`` in order.

    Args:
        audio: mono float samples.
        vad_options: the options (else ``VadOptions(**kwargs)``).

    Raises:
        ImportError: silero-vad is not installed.
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
        the first span's start in seconds).
    """
    if not chunks:
        return [np.array([], dtype=np.float32)], [{"offset": 0, "duration": 0, "segments": []}]
    pieces, meta = [], []
    current: list[dict] = []
    size = 0
    limit = max_duration * sampling_rate

    def flush() -> None:
        pieces.append(np.concatenate([audio[c["start"] : c["end"]] for c in current]))
        meta.append(
            {"offset": current[0]["start"] / sampling_rate, "duration": size / sampling_rate, "segments": current}
        )

    for c in chunks:
        if current and size + c["end"] - c["start"] > limit:
            flush()
            current, size = [], 0
        current = [*current, c]
        size += c["end"] - c["start"]
    flush()
    return pieces, meta
