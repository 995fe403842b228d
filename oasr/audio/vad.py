"""Voice activity detection with Silero VAD, and the cutting of long audio into
speech chunks of at most 30 s.

``speech_spans`` runs the ``silero-vad`` package's model (shipped inside the package,
loaded on the CPU, no network) through its ``get_speech_timestamps``; ``merge_spans``
packs the spans, in order, into ``SpeechChunk``s whose speech adds up to at most
``CHUNK_S`` (the silences between spans are left out); ``SpeechChunk.to_global`` maps
a time in a chunk's audio back to the original recording, through the removed
silences. This is the cutting of faster-whisper's batched pipeline, with the
silences dropped as its sequential ``vad_filter`` does.

Silero's packaged model is stateful: it carries an LSTM state (and 64 samples of
context) from one 32 ms window to the next, and its own ``get_speech_timestamps``
calls it once per window, a long run of tiny ops (about 8 s for 6 min of audio on one
core). Only the LSTM needs that order: ``speech_probabilities`` runs the model's STFT
and convolutional encoder over every window at once (each window with its 64 samples
of context, as the model would have seen them), the LSTM over the whole sequence in
one call, and the output head batched; the probabilities match the window-by-window
model to ~1e-5 and are turned into spans by the package's own
``get_speech_timestamps_from_probs``. Nothing is carried between calls, so one loaded
model serves every thread; importing the package (which sets torch's thread count to
1) leaves the caller's thread count as it was. ``SileroNet`` is the same network in eager
PyTorch, under the TorchScript parameter names, for other Silero weights (the
faster-whisper drop-in's bundled v6.0), run by the same batched evaluation.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oasr.install import install_hint

__all__ = [
    "CHUNK_S",
    "SileroNet",
    "SpeechChunk",
    "VadOptions",
    "load_vad_model",
    "merge_spans",
    "require_silero",
    "speech_probabilities",
    "speech_spans",
]

CHUNK_S = 30.0
"""The most speech one chunk holds: a Whisper window."""

_VAD_RATES = (8000, 16000)  # what the Silero model takes; other rates are resampled to 16 kHz
_import_lock = threading.RLock()
_models: dict[int, Any] | None = None


@dataclass(frozen=True)
class VadOptions:
    """Silero VAD settings (faster-whisper's batched-pipeline defaults).

    Attributes:
        threshold: speech probability above which a 32 ms window is speech.
        min_speech_duration_ms: shorter speech spans are dropped.
        max_speech_duration_s: longer spans are split, at the longest pause inside
            when there is one (at most ``CHUNK_S`` keeps every cut at a pause).
        min_silence_duration_ms: a span ends after this much silence.
        speech_pad_ms: spans are padded by this much on each side.
    """

    threshold: float = 0.5
    min_speech_duration_ms: int = 0
    max_speech_duration_s: float = CHUNK_S
    min_silence_duration_ms: int = 160
    speech_pad_ms: int = 400

    def __post_init__(self) -> None:
        if not 0 < self.threshold < 1:
            raise ValueError(f"vad threshold must be in (0, 1), got {self.threshold}")
        for name in ("min_speech_duration_ms", "min_silence_duration_ms", "speech_pad_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"vad {name} must be a number >= 0, got {value!r}")
        if not self.max_speech_duration_s * 1000 > 2 * self.speech_pad_ms:
            raise ValueError(
                f"vad max_speech_duration_s={self.max_speech_duration_s} must be longer than twice "
                f"speech_pad_ms={self.speech_pad_ms}"
            )

    @classmethod
    def from_parameters(cls, parameters: VadOptions | dict[str, Any] | None) -> VadOptions:
        """``VadOptions`` from a dict of its fields (or itself, or None for the defaults).

        Raises:
            ValueError: an unknown field name, or a bad value.
        """
        if parameters is None:
            return cls()
        if isinstance(parameters, VadOptions):
            return parameters
        if not isinstance(parameters, dict):
            raise ValueError(f"vad_parameters must be a dict of VadOptions fields, got {type(parameters).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(parameters) - known)
        if unknown:
            raise ValueError(f"unknown vad_parameters {unknown}; known: {sorted(known)}")
        return cls(**parameters)


@dataclass(frozen=True)
class SpeechChunk:
    """Speech spans of a recording decoded together as one piece of audio.

    Attributes:
        spans: ``(start, end)`` sample ranges of the original audio, in order and
            disjoint; the chunk's audio is their concatenation.
        sampling_rate: the rate the samples are counted at.
    """

    spans: tuple[tuple[int, int], ...]
    sampling_rate: int

    @property
    def num_samples(self) -> int:
        return sum(b - a for a, b in self.spans)

    @property
    def duration(self) -> float:
        """Seconds of audio in the chunk."""
        return self.num_samples / self.sampling_rate

    @property
    def start(self) -> float:
        """Where the chunk starts in the original audio (seconds)."""
        return self.spans[0][0] / self.sampling_rate

    @property
    def end(self) -> float:
        """Where the chunk ends in the original audio (seconds)."""
        return self.spans[-1][1] / self.sampling_rate

    def audio(self, audio: np.ndarray) -> np.ndarray:
        """The chunk's samples: its spans of ``audio``, concatenated.

        Shapes:
            audio: (n,) -> (num_samples,)
        """
        return np.concatenate([audio[a:b] for a, b in self.spans])

    def tail(self, t: float) -> SpeechChunk:
        """The chunk from ``t`` seconds into its audio on: its audio is this chunk's
        samples from ``round(t * sampling_rate)``, and its times map to the same places.

        Raises:
            ValueError: ``t`` leaves no audio.
        """
        skip = max(0, round(t * self.sampling_rate))
        spans: list[tuple[int, int]] = []
        for a, b in self.spans:
            if skip >= b - a:
                skip -= b - a
                continue
            spans.append((a + skip, b))
            skip = 0
        if not spans:
            raise ValueError(f"a tail from {t} s of a {self.duration:.3f}-s chunk is empty")
        return SpeechChunk(tuple(spans), self.sampling_rate)

    def to_global(self, t: float, *, is_end: bool = False) -> float:
        """Map ``t`` seconds into the chunk's audio to seconds in the original audio.

        Args:
            t: time in the chunk (clamped to its length).
            is_end: ``t`` ends something: a time exactly on the seam of two spans
                maps to the end of the first span, not the start of the next.
        """
        sr = self.sampling_rate
        s = min(max(t * sr, 0.0), float(self.num_samples))
        offset = 0
        for a, b in self.spans:
            n = b - a
            if s < offset + n or (is_end and s <= offset + n):
                return (a + s - offset) / sr
            offset += n
        return self.spans[-1][1] / sr


def require_silero():
    """Import the ``silero_vad`` package, keeping torch's thread count.

    Raises:
        ImportError: silero-vad is not installed (the message says how to install it).
    """
    with _import_lock:
        threads = torch.get_num_threads()
        try:
            import silero_vad
        except ImportError as e:
            raise ImportError(
                "voice activity detection (vad_filter) needs the silero-vad package: "
                + install_hint("vad", ["silero-vad"])
            ) from e
        finally:
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
    return silero_vad


class _SileroSTFT(torch.nn.Module):
    """Silero's front end: magnitudes of a fixed windowed-DFT basis (the buffer), hop half of it,
    over each input reflect-padded on the right by a quarter of it."""

    def __init__(self, filter_length: int) -> None:
        super().__init__()
        self.filter_length = filter_length
        self.register_buffer("forward_basis_buffer", torch.zeros(filter_length + 2, 1, filter_length))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Shapes: x: (b, n) -> (b, filter_length // 2 + 1, frames)"""
        n = self.filter_length
        x = torch.nn.functional.pad(x, (0, n // 4), mode="reflect").unsqueeze(1)
        out = torch.nn.functional.conv1d(x, self.forward_basis_buffer, stride=n // 2)
        cut = n // 2 + 1
        return torch.sqrt(out[:, :cut] ** 2 + out[:, cut:] ** 2)


class _SileroBlock(torch.nn.Module):
    """One encoder layer: a (re-parametrised) 3-tap convolution and a ReLU."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.reparam_conv = torch.nn.Conv1d(inputs, outputs, 3, stride=stride, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.reparam_conv(x))


class _SileroDecoder(torch.nn.Module):
    """The LSTM cell (run as a sequence by ``_BatchedSilero``) and the output head."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.rnn = torch.nn.LSTMCell(hidden, hidden)
        self.decoder = torch.nn.Sequential(
            torch.nn.Dropout(0.1), torch.nn.ReLU(), torch.nn.Conv1d(hidden, 1, 1), torch.nn.Sigmoid()
        )


class SileroNet(torch.nn.Module):
    """Silero VAD v5/v6's network for one sampling rate, in eager PyTorch, with the parameter
    names of the packaged TorchScript sub-model (``_model`` / ``_model_8k``), so that its
    ``state_dict`` loads as is; ``_BatchedSilero`` runs either.

    Args:
        filter_length: the STFT basis length (256 at 16 kHz, 128 at 8 kHz).
    """

    def __init__(self, filter_length: int = 256) -> None:
        super().__init__()
        self.context_size_samples = filter_length // 4  # samples of the previous window each window sees
        self.stft = _SileroSTFT(filter_length)
        self.encoder = torch.nn.Sequential(
            _SileroBlock(filter_length // 2 + 1, 128, 1),
            _SileroBlock(128, 64, 2),
            _SileroBlock(64, 64, 2),
            _SileroBlock(64, 128, 1),
        )
        self.decoder = _SileroDecoder(128)

    @classmethod
    def from_state_dict(cls, state: dict[str, torch.Tensor]) -> SileroNet:
        """The network holding ``state`` (its rate read from the basis' shape), in eval mode.

        Raises:
            ValueError: ``state`` is not a Silero v5/v6 network's (missing, extra or misshapen tensors).
        """
        basis = state.get("stft.forward_basis_buffer")
        if basis is None or basis.dim() != 3:
            raise ValueError("not Silero VAD weights: no stft.forward_basis_buffer of shape (n + 2, 1, n)")
        net = cls(int(basis.shape[-1]))
        try:
            net.load_state_dict(state, strict=True)
        except RuntimeError as e:
            raise ValueError(f"not Silero VAD v5/v6 weights: {e}") from e
        return net.eval()


class _BatchedSilero:
    """Silero VAD's networks for one sampling rate, run over many windows at once.

    Args:
        model: the rate's network: a sub-model of the packaged TorchScript model (``_model``
            for 16 kHz, ``_model_8k`` for 8 kHz) or a ``SileroNet`` (from other weights).
        window: samples per window (512 at 16 kHz, 256 at 8 kHz).
    """

    BLOCK = 4096  # windows per encoder call (131 s at 16 kHz): bounds the activations

    def __init__(self, model: Any, window: int) -> None:
        self.stft = model.stft
        self.encoder = model.encoder
        self.head = model.decoder.decoder
        self.window = window
        self.context = int(model.context_size_samples)
        cell = model.decoder.rnn
        self.lstm = torch.nn.LSTM(cell.weight_ih.shape[1], cell.weight_hh.shape[1])
        with torch.no_grad():
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(self.lstm, f"{name}_l0").copy_(getattr(cell, name))
        self.lstm.eval()

    @torch.inference_mode()
    def __call__(self, samples: torch.Tensor) -> torch.Tensor:
        """Speech probability of each window of ``samples`` (the last zero-padded).

        Shapes:
            samples: (n,) -> (ceil(n / window),)
        """
        w, ctx = self.window, self.context
        count = -(-samples.numel() // w)
        padded = torch.zeros(ctx + count * w)
        padded[ctx : ctx + samples.numel()] = samples
        probs, _ = self.windows(padded, None)
        return probs

    @torch.inference_mode()
    def windows(self, padded: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """Probabilities of the whole windows of ``padded`` (``context`` samples of history,
        then ``k * window`` new ones), and the LSTM state after them.

        Shapes:
            padded: (context + k * window,) -> (k,)
        """
        w, ctx = self.window, self.context
        windows = padded.unfold(0, ctx + w, w)  # each window behind the context the model saw
        probs = []
        for i in range(0, windows.shape[0], self.BLOCK):
            features = self.encoder(self.stft(windows[i : i + self.BLOCK]))  # (b, hidden, 1)
            hidden, state = self.lstm(features.squeeze(-1).unsqueeze(1), state)  # (b, 1, hidden)
            out = self.head(hidden.squeeze(1).unsqueeze(-1))  # (b, 1, 1)
            probs.append(out.reshape(out.shape[0], -1).mean(1))
        return (torch.cat(probs) if probs else torch.zeros(0)), state


class SpeechProbabilityStream:
    """``speech_probabilities`` fed piece by piece, as audio is decoded: the same windows
    (and so the same probabilities, to float rounding), with memory bounded by one block of
    windows whatever the duration.

    Args:
        sampling_rate: 8000 or 16000.
    """

    def __init__(self, sampling_rate: int) -> None:
        if sampling_rate not in _VAD_RATES:
            raise ValueError(f"Silero VAD takes 8000 or 16000 Hz audio, got {sampling_rate}")
        self.net = load_vad_model()[sampling_rate]
        self.history = torch.zeros(self.net.context)  # the samples before the pending ones
        self.pending: list[torch.Tensor] = []
        self.n_pending = 0
        self.state: Any = None
        self.probs: list[torch.Tensor] = []
        self.num_samples = 0

    def feed(self, samples: np.ndarray) -> None:
        """Add the next samples (any length)."""
        piece = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32).reshape(-1))
        self.pending.append(piece)
        self.n_pending += piece.numel()
        self.num_samples += piece.numel()
        if self.n_pending >= self.net.BLOCK * self.net.window:
            self._run(final=False)

    def flush(self) -> np.ndarray:
        """The probabilities of the whole windows fed since the last ``flush`` (a live
        stream's endpointing reads them as they come; they are not kept for ``finish``)."""
        self._run(final=False)
        out = torch.cat(self.probs).numpy() if self.probs else np.zeros(0, np.float32)
        self.probs = []
        return out

    def finish(self) -> np.ndarray:
        """The probability of every window fed (the last one zero-padded)."""
        self._run(final=True)
        return torch.cat(self.probs).numpy() if self.probs else np.zeros(0, np.float32)

    def _run(self, *, final: bool) -> None:
        w = self.net.window
        pending = torch.cat(self.pending) if self.pending else torch.zeros(0)
        whole = pending.numel() // w
        if final and pending.numel() % w:
            whole += 1
            pending = torch.cat([pending, torch.zeros(whole * w - pending.numel())])
        if whole == 0:
            return
        used = whole * w
        padded = torch.cat([self.history, pending[:used]])
        probs, self.state = self.net.windows(padded, self.state)
        self.probs.append(probs)
        self.history = padded[-self.net.context :].clone()
        rest = pending[used:].clone()
        self.pending = [rest] if rest.numel() else []
        self.n_pending = rest.numel()


def load_vad_model() -> dict[int, _BatchedSilero]:
    """The Silero VAD networks (CPU) by sampling rate, loaded on first use.

    Raises:
        ImportError: silero-vad is not installed.
    """
    global _models
    with _import_lock:
        if _models is None:
            model = require_silero().load_silero_vad()
            _models = {16000: _BatchedSilero(model._model, 512), 8000: _BatchedSilero(model._model_8k, 256)}
    return _models


def speech_probabilities(audio: np.ndarray, sampling_rate: int = 16000) -> np.ndarray:
    """Silero's speech probability for each 32 ms window of ``audio`` (8 or 16 kHz).

    Shapes:
        audio: (n,) -> (ceil(n / window),), window 512 at 16 kHz, 256 at 8 kHz

    Raises:
        ValueError: another sampling rate.
        ImportError: silero-vad is not installed.
    """
    if sampling_rate not in _VAD_RATES:
        raise ValueError(f"Silero VAD takes 8000 or 16000 Hz audio, got {sampling_rate}")
    samples = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32).reshape(-1))
    return load_vad_model()[sampling_rate](samples).numpy()


def speech_spans(
    audio: np.ndarray, sampling_rate: int = 16000, options: VadOptions | None = None
) -> list[tuple[int, int]]:
    """Where ``audio`` has speech.

    Args:
        audio: mono float samples at ``sampling_rate``.
        sampling_rate: the rate of ``audio`` (rates other than 8 or 16 kHz are
            resampled to 16 kHz for the model; the spans count ``audio``'s samples).
        options: VAD settings (default ``VadOptions()``).

    Returns:
        ``(start, end)`` sample ranges, in order and disjoint (padded spans may touch).

    Shapes:
        audio: (n,)

    Raises:
        ImportError: silero-vad is not installed.
    """
    samples = np.asarray(audio, dtype=np.float32).reshape(-1)
    rate = sampling_rate
    if rate not in _VAD_RATES:
        import soxr  # only here: importing the engine needs no resampler

        samples = soxr.resample(samples, sampling_rate, 16000).astype(np.float32, copy=False)
        rate = 16000
    probs = speech_probabilities(samples, rate)
    return spans_from_probabilities(probs, len(samples), rate, len(audio), sampling_rate, options)


def spans_from_probabilities(
    probs: np.ndarray,
    vad_samples: int,
    vad_rate: int,
    n: int,
    sampling_rate: int,
    options: VadOptions | None = None,
) -> list[tuple[int, int]]:
    """``speech_spans`` from Silero's window probabilities of ``vad_samples`` samples at
    ``vad_rate``, counted in the ``n`` samples of the audio at ``sampling_rate``."""
    options = options or VadOptions()
    stamps = require_silero().get_speech_timestamps_from_probs(
        probs.tolist(),
        sampling_rate=vad_rate,
        threshold=options.threshold,
        min_speech_duration_ms=options.min_speech_duration_ms,
        max_speech_duration_s=options.max_speech_duration_s,
        min_silence_duration_ms=options.min_silence_duration_ms,
        speech_pad_ms=options.speech_pad_ms,
        audio_length_samples=vad_samples,
    )
    scale = sampling_rate / vad_rate
    spans: list[tuple[int, int]] = []
    for stamp in stamps:
        start = min(n, round(stamp["start"] * scale))
        end = min(n, round(stamp["end"] * scale))
        if spans:
            start = max(start, spans[-1][1])
        if end > start:
            spans.append((start, end))
    return spans


def merge_spans(
    spans: Sequence[tuple[int, int]], sampling_rate: int = 16000, max_chunk_s: float = CHUNK_S
) -> list[SpeechChunk]:
    """Pack speech spans, in order, into chunks of at most ``max_chunk_s`` of speech.

    A chunk takes spans while their total length fits; a span longer than a chunk
    on its own is cut into pieces of ``max_chunk_s`` (``VadOptions.max_speech_duration_s``
    at most ``CHUNK_S`` avoids that by splitting long speech at its pauses). Spans
    that touch become one span of the chunk.

    Args:
        spans: ``(start, end)`` sample ranges in order (``speech_spans``).
        sampling_rate: the rate of the samples.
        max_chunk_s: the most speech in one chunk (seconds).

    Returns:
        the chunks, in time order.

    Raises:
        ValueError: ``max_chunk_s`` is not positive, or the spans are not in order.
    """
    if not max_chunk_s > 0:
        raise ValueError(f"max_chunk_s must be > 0, got {max_chunk_s}")
    max_n = max(1, int(max_chunk_s * sampling_rate))
    chunks: list[SpeechChunk] = []
    current: list[tuple[int, int]] = []
    size = 0
    last_end = 0

    def flush() -> None:
        nonlocal current, size
        if current:
            chunks.append(SpeechChunk(tuple(current), sampling_rate))
        current, size = [], 0

    for start, end in spans:
        if start < last_end:
            raise ValueError(f"speech spans must be in order and disjoint; ({start}, {end}) starts before {last_end}")
        last_end = end
        while end - start > max_n:
            flush()
            chunks.append(SpeechChunk(((start, start + max_n),), sampling_rate))
            start += max_n
        if end <= start:
            continue
        if size + end - start > max_n:
            flush()
        if current and current[-1][1] == start:
            current[-1] = (current[-1][0], end)
        else:
            current.append((start, end))
        size += end - start
    flush()
    return chunks
