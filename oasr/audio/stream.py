"""Whisper log-mel features of long recordings without holding the audio or the mel in memory.

The Whisper decoders read a recording's features as 30-s windows of one matrix,

    mel = log_mel_spectrogram(audio, n_mels, padding=160)   # (n_mels, len(audio) // 160 + 1)
    mel[:, start:start + size]

whose values depend on the whole recording through one number: the clamp to
``max - 8`` uses the maximum over every frame. A :class:`FeatureSource` serves those
windows. :class:`InMemoryMel` holds the matrix; :class:`SpooledMel` computes the raw
``log10`` frames (before the clamp) in one streamed pass over the decoded audio, writes
them to a temporary float32 file and applies the clamp with the global maximum when a
window is read back, so an hour-long upload costs a few chunks of memory plus about
115 MB of disk at 80 mels (32 KB per second of audio at 80 mels, 51 KB at 128).

The streamed frames are bit-identical to :func:`~oasr.audio.features.log_mel_spectrogram`
of the fully decoded audio: every frame is the same ``torch.stft`` frame of the same
samples (the reflect padding at both ends of the padded signal and the ``n_fft // 2``
samples of context across chunk boundaries are rebuilt exactly), and the mel projection
is always run on at least :data:`_MIN_BATCH_FRAMES` frames at a time, because CPU GEMM
kernels round differently for very narrow right-hand sides (fewer than ~12 columns)
than for wide ones. Recordings shorter than that many frames are computed in one call
of exactly the reference's shape.
"""

from __future__ import annotations

import abc
import math
import os
import tempfile
import threading
import weakref
from collections.abc import Iterable
from types import TracebackType

import numpy as np
import torch

from oasr.audio.features import HOP_LENGTH, N_FFT, _hann_window, log_mel_spectrogram, mel_filters
from oasr.audio.frontends import check_features
from oasr.audio.io import SAMPLE_RATE, AudioSource, iter_audio, load_audio

__all__ = [
    "FeatureSource",
    "InMemoryMel",
    "SpooledMel",
    "features_from",
]

# Zero samples appended to the waveform before the STFT (faster-whisper's convention
# for the long-form matrix): n_frames = len(audio) // HOP_LENGTH + 1.
PADDING = HOP_LENGTH

_PAD = N_FFT // 2  # reflect padding at each end of the (zero-extended) signal
# Every STFT + mel projection covers at least this many frames (or the whole recording
# when it is shorter): narrower GEMMs take other kernels and differ in the last bit.
_MIN_BATCH_FRAMES = 64
# ... and at most this many, which bounds the working memory whatever ``chunk_s`` is
# (4096 frames: ~7 MB of complex STFT output).
_MAX_BATCH_FRAMES = 4096


class FeatureSource(abc.ABC):
    """Random access to 30-s windows of a recording's Whisper log-mel matrix,
    ``log_mel_spectrogram(audio, n_mels, padding=160)``, with the final values (global
    ``max - 8`` clamp and ``(x + 4) / 4`` applied).

    Attributes:
        n_mels: Mel bands.
        n_frames: Frames in the matrix, ``len(audio) // 160 + 1``.
        duration: Seconds of audio, ``len(audio) / sampling_rate``.

    Use as a context manager, or call :meth:`close`, to release its storage.
    """

    n_mels: int
    n_frames: int
    duration: float

    @abc.abstractmethod
    def window(self, start: int, size: int) -> torch.Tensor:
        """Frames ``[start, start + size)`` of the matrix; frames past the end are not
        returned.

        Args:
            start: First frame, ``>= 0``.
            size: Number of frames wanted, ``>= 0``.

        Returns:
            float32 CPU tensor of shape ``(n_mels, max(0, min(size, n_frames - start)))``,
            a copy the caller owns.

        Raises:
            ValueError: Negative ``start`` / ``size``, or the source is closed.
        """

    def close(self) -> None:  # noqa: B027 - storage-less sources need nothing
        """Release the storage; :meth:`window` raises afterwards. Idempotent."""

    def __enter__(self) -> FeatureSource:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _bounds(self, start: int, size: int) -> tuple[int, int]:
        start, size = int(start), int(size)
        if start < 0 or size < 0:
            raise ValueError(f"window start and size must be >= 0, got start={start}, size={size}")
        end = min(start + size, self.n_frames)
        return start, max(start, end)


class InMemoryMel(FeatureSource):
    """A feature matrix held in memory (final values).

    Args:
        mel: ``(n_mels, n_frames)`` matrix, as returned by
            ``log_mel_spectrogram(audio, n_mels, padding=160)``; kept as float32 on its
            device (windows come from there).
        duration: Seconds of audio it was computed from.
    """

    def __init__(self, mel: torch.Tensor, duration: float) -> None:
        if mel.ndim != 2 or mel.shape[1] == 0:
            raise ValueError(f"mel must be (n_mels, n_frames) with n_frames >= 1, got {tuple(mel.shape)}")
        self._mel: torch.Tensor | None = mel.detach().to(dtype=torch.float32)
        self.n_mels = int(mel.shape[0])
        self.n_frames = int(mel.shape[1])
        self.duration = float(duration)

    @classmethod
    def from_waveform(
        cls,
        audio: np.ndarray | torch.Tensor,
        n_mels: int,
        *,
        sampling_rate: int = SAMPLE_RATE,
        device: torch.device | str = "cpu",
    ) -> InMemoryMel:
        """Features of a whole ``(samples,)`` waveform at ``sampling_rate``:
        ``log_mel_spectrogram(audio, n_mels, padding=160)``, computed and kept on ``device``.

        Raises:
            ValueError: Fewer than 41 samples (too short for the reflect padding).
            AudioDecodeError: The features are not finite (samples far outside [-1, 1]).
        """
        mel = log_mel_spectrogram(audio, n_mels, padding=PADDING, device=device, sampling_rate=sampling_rate)
        return cls(check_features(mel, "whisper_mel"), audio.shape[0] / sampling_rate)

    def window(self, start: int, size: int) -> torch.Tensor:
        if self._mel is None:
            raise ValueError("window() on a closed InMemoryMel")
        start, end = self._bounds(start, size)
        return self._mel[:, start:end].clone()

    def close(self) -> None:
        self._mel = None


class SpooledMel(FeatureSource):
    """Raw log10-mel frames spooled to a temporary float32 file (frame-major,
    ``(n_frames, n_mels)``), clamped with the recording's global maximum on read.

    Build it with :meth:`from_source`. The file is removed by :meth:`close`, when the
    object is garbage-collected, at interpreter exit, and when building fails.
    :meth:`window` is safe to call from several threads.

    Attributes:
        path: The spool file (``None`` once closed).
        peak: The global maximum of the raw ``log10`` frames.
    """

    def __init__(self, spool: _Spool, n_mels: int, n_frames: int, duration: float, peak: float) -> None:
        # Not public: use from_source.
        self._spool: _Spool | None = spool
        self.n_mels = n_mels
        self.n_frames = n_frames
        self.duration = duration
        self.peak = peak
        self._floor = torch.tensor(peak, dtype=torch.float32) - 8.0  # float32, as the reference computes it

    @property
    def path(self) -> str | None:
        return None if self._spool is None else self._spool.path

    @classmethod
    def from_source(
        cls,
        source: AudioSource,
        n_mels: int,
        *,
        spool_dir: str | os.PathLike | None = None,
        sampling_rate: int = SAMPLE_RATE,
        max_duration_s: float | None = None,
        chunk_s: float = 30.0,
        input_sampling_rate: int | None = None,
    ) -> SpooledMel:
        """Decode ``source`` once, chunk by chunk, spooling its raw frames.

        Args:
            source: Anything :func:`~oasr.audio.io.iter_audio` reads (path, bytes,
                binary file object, or an array at ``input_sampling_rate``).
            n_mels: Mel bands.
            spool_dir: Directory of the temporary file (default: :mod:`tempfile`'s).
            sampling_rate: Decoding rate in Hz.
            max_duration_s: Refuse audio longer than this (see ``iter_audio``).
            chunk_s: Decoded chunk length; memory is a few chunks.
            input_sampling_rate: Rate of an array ``source``.

        Raises:
            AudioDecodeError, OSError, TypeError: From decoding (or non-finite features),
                unchanged, after the partial spool file has been removed.
            ValueError: Fewer than 41 samples, or invalid arguments.
        """
        result = _decode(
            source, n_mels, sampling_rate, spool_dir, chunk_s, input_sampling_rate, max_duration_s, memory_frames=0
        )
        assert isinstance(result, SpooledMel)
        return result

    def window(self, start: int, size: int) -> torch.Tensor:
        spool = self._spool
        if spool is None:
            raise ValueError("window() on a closed SpooledMel")
        start, end = self._bounds(start, size)
        frames = spool.read(start, end - start, self.n_mels)  # (k, n_mels), a fresh array
        x = torch.from_numpy(frames).T.contiguous()
        x = torch.maximum(x, self._floor)
        return x.add_(4.0).div_(4.0)

    def close(self) -> None:
        spool, self._spool = self._spool, None
        if spool is not None:
            spool.remove()


def _decode(
    source: AudioSource,
    n_mels: int,
    sampling_rate: int,
    spool_dir: str | os.PathLike | None,
    chunk_s: float,
    input_sampling_rate: int | None,
    max_duration_s: float | None,
    memory_frames: int | None,
) -> FeatureSource:
    """``source`` decoded in one streamed pass of ``chunk_s`` chunks into frames (see ``_compute``)."""
    chunks = iter_audio(
        source, sampling_rate, chunk_s, input_sampling_rate=input_sampling_rate, max_duration_s=max_duration_s
    )
    return _compute(chunks, n_mels, sampling_rate, spool_dir, memory_frames=memory_frames)


def features_from(
    source: AudioSource,
    n_mels: int,
    *,
    in_memory_limit_s: float | None = 600.0,
    spool_dir: str | os.PathLike | None = None,
    sampling_rate: int = SAMPLE_RATE,
    max_duration_s: float | None = None,
    input_sampling_rate: int | None = None,
    chunk_s: float = 30.0,
    device: torch.device | str = "cpu",
) -> FeatureSource:
    """The feature source for any audio input.

    Arrays (``np.ndarray`` / ``torch.Tensor``, at ``input_sampling_rate``, default
    ``sampling_rate``) are already in memory: :class:`InMemoryMel`. Encoded sources
    (path, bytes, file object) are decoded in one streamed pass; their raw frames stay
    in memory while the recording is at most ``in_memory_limit_s`` long (to the frame),
    giving an :class:`InMemoryMel`, and move to a spool file in ``spool_dir`` as soon as
    it is longer, giving a :class:`SpooledMel`. Both storages hold the same frames, so
    the windows are bit-identical whichever is used, and equal to
    ``log_mel_spectrogram(load_audio(source), n_mels, padding=160)``.

    Args:
        source: As for :func:`~oasr.audio.io.load_audio`.
        n_mels: Mel bands.
        in_memory_limit_s: Longest recording kept in memory; ``0`` always spools,
            ``None`` never does.
        spool_dir: Directory of spool files (default: :mod:`tempfile`'s).
        sampling_rate: Decoding rate in Hz.
        max_duration_s: Refuse audio longer than this.
        input_sampling_rate: Rate of an array ``source``.
        chunk_s: Decoded chunk length for encoded sources.
        device: Where the features of an array source are computed and kept (a GPU
            spares the host the FFTs); encoded sources are decoded and featurised on
            the CPU.

    Raises:
        As :meth:`SpooledMel.from_source`.
    """
    if isinstance(source, (np.ndarray, torch.Tensor)):
        audio = load_audio(
            source,
            sampling_rate,
            input_sampling_rate=input_sampling_rate,
            max_duration_s=max_duration_s,
        )
        return InMemoryMel.from_waveform(audio, n_mels, sampling_rate=sampling_rate, device=device)
    if in_memory_limit_s is not None and in_memory_limit_s < 0:
        raise ValueError(f"in_memory_limit_s must be >= 0 or None, got {in_memory_limit_s}")
    memory_frames = None
    if in_memory_limit_s is not None:
        # The frame count of exactly in_memory_limit_s of audio (1e-6: float noise in s * rate).
        memory_frames = (
            math.floor(in_memory_limit_s * sampling_rate + 1e-6) // HOP_LENGTH + 1 if in_memory_limit_s else 0
        )
    return _decode(
        source, n_mels, sampling_rate, spool_dir, chunk_s, input_sampling_rate, max_duration_s, memory_frames
    )


# ---------------------------------------------------------------------------
# Streaming computation


class _LogMelStream:
    """Raw ``log10`` mel frames of ``audio ++ zeros(PADDING)`` under a centred, reflect-
    padded STFT with the last frame dropped, from the audio pushed chunk by chunk.

    Works on ``xp``, the reflect-padded signal: frame ``t`` is ``xp[160 t : 160 t + 400]``.
    ``self._buf`` holds ``xp`` from frame ``self._buf_t`` on; frames before
    ``self._next_t`` have been emitted.
    """

    def __init__(self, n_mels: int, sampling_rate: int) -> None:
        self._filters = mel_filters(n_mels, N_FFT, sampling_rate)
        self._window = _hann_window(N_FFT, torch.device("cpu"), torch.float32)
        self._head: list[np.ndarray] | None = []  # audio before the left padding can be built
        self._n_head = 0
        self._buf: np.ndarray | None = None
        self._buf_t = 0
        self._next_t = 0
        self.n_samples = 0

    def push(self, chunk: np.ndarray) -> list[torch.Tensor]:
        """Add audio; returns the ``(n_mels, k)`` frames now computable (maybe none)."""
        chunk = np.asarray(chunk, dtype=np.float32)
        self.n_samples += chunk.size
        if self._buf is None:
            assert self._head is not None
            self._head.append(chunk)
            self._n_head += chunk.size
            if self._n_head <= _PAD:  # the left reflection needs x[1 .. _PAD]
                return []
            x = np.concatenate(self._head)
            self._head = None
            self._buf = np.concatenate([x[_PAD:0:-1], x])
        else:
            self._buf = np.concatenate([self._buf, chunk])
        # Frames lying entirely inside the known part of xp.
        avail = self._buf_t + (self._buf.size - N_FFT) // HOP_LENGTH + 1 if self._buf.size >= N_FFT else 0
        if avail - self._next_t < _MIN_BATCH_FRAMES:
            return []
        out = self._frames(self._next_t, avail)
        self._next_t = avail
        # Keep the unfinished frames' samples plus _MIN_BATCH_FRAMES frames of history,
        # so that a short final batch can be widened (see finish).
        keep_t = max(self._buf_t, self._next_t - _MIN_BATCH_FRAMES)
        self._buf = self._buf[(keep_t - self._buf_t) * HOP_LENGTH :].copy()
        self._buf_t = keep_t
        return out

    def finish(self) -> list[torch.Tensor]:
        """End of audio: append the zero padding and the right reflection, return the rest."""
        zeros = np.zeros(PADDING, np.float32)
        if self._buf is None:
            assert self._head is not None
            x = np.concatenate([*self._head, zeros])
            self._head = None
            if x.size <= _PAD:
                raise ValueError(
                    f"audio too short for a log-mel spectrogram: {self.n_samples} samples "
                    f"(need more than {_PAD - PADDING})"
                )
            xp = np.concatenate([x[_PAD:0:-1], x, x[-_PAD - 1 : -1][::-1]])
        else:
            x = np.concatenate([self._buf, zeros])  # ends with the last sample of x
            xp = np.concatenate([x, x[-_PAD - 1 : -1][::-1]])
        self._buf = xp
        n_frames = (self.n_samples + PADDING) // HOP_LENGTH
        first = self._next_t
        if n_frames - first < _MIN_BATCH_FRAMES:
            first = max(self._buf_t, n_frames - _MIN_BATCH_FRAMES)
        out = self._frames(first, n_frames)
        if first < self._next_t:
            out = [out[0][:, self._next_t - first :]]  # one batch: it is under _MAX_BATCH_FRAMES
        self._next_t = n_frames
        self._buf = None
        return out

    def _frames(self, t0: int, t1: int) -> list[torch.Tensor]:
        """Frames ``[t0, t1)`` from the buffer, in batches of at least
        ``_MIN_BATCH_FRAMES`` (unless fewer in all) and at most ``_MAX_BATCH_FRAMES``."""
        assert self._buf is not None and t0 >= self._buf_t
        n = t1 - t0
        n_batches = -(-n // _MAX_BATCH_FRAMES)
        out = []
        start = t0
        for i in range(n_batches):
            stop = t0 + n * (i + 1) // n_batches
            a = (start - self._buf_t) * HOP_LENGTH
            b = (stop - 1 - self._buf_t) * HOP_LENGTH + N_FFT
            seg = torch.from_numpy(self._buf[a:b])
            stft = torch.stft(seg, N_FFT, HOP_LENGTH, window=self._window, center=False, return_complex=True)
            power = stft.abs() ** 2
            mel = self._filters @ power
            out.append(torch.clamp(mel, min=1e-10).log10())
            start = stop
        return out


class _Spool:
    """A named temporary float32 file of frames, removed by :meth:`remove`, on garbage
    collection of this object, or at interpreter exit."""

    def __init__(self, spool_dir: str | os.PathLike | None) -> None:
        fd, path = tempfile.mkstemp(prefix="oasr-mel-", suffix=".f32", dir=spool_dir)
        try:
            self._file = os.fdopen(fd, "w+b")
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        self.path = path
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _remove_file, self._file, path)

    def write(self, frames: np.ndarray) -> None:
        self._file.write(memoryview(np.ascontiguousarray(frames, dtype=np.float32)).cast("B"))

    def done_writing(self) -> None:
        self._file.flush()

    def read(self, start: int, count: int, n_mels: int) -> np.ndarray:
        out = np.empty((count, n_mels), np.float32)
        if count == 0:
            return out
        with self._lock:
            self._file.seek(start * n_mels * 4)
            got = self._file.readinto(memoryview(out).cast("B"))
        if got != out.nbytes:
            raise OSError(f"spool file {self.path} is short: read {got} of {out.nbytes} bytes")
        return out

    def remove(self) -> None:
        self._finalizer()


def _remove_file(file, path: str) -> None:
    try:
        file.close()
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _compute(
    chunks: Iterable[np.ndarray],
    n_mels: int,
    sampling_rate: int,
    spool_dir: str | os.PathLike | None,
    memory_frames: int | None,
) -> FeatureSource:
    """Stream ``chunks`` through :class:`_LogMelStream`; keep the raw frames in memory
    while there are at most ``memory_frames`` of them (``None``: no limit), else spool."""
    stream = _LogMelStream(n_mels, sampling_rate)
    parts: list[torch.Tensor] = []
    spool: _Spool | None = None
    n_frames = 0
    peak = -math.inf

    def store(batch: list[torch.Tensor]) -> None:
        nonlocal spool, n_frames, peak, parts
        for raw in batch:
            check_features(raw, "whisper_mel")  # one NaN / inf frame would be every frame's clamp floor
            peak = max(peak, float(raw.max()))
            n_frames += raw.shape[1]
            if spool is None and memory_frames is not None and n_frames > memory_frames:
                spool = _Spool(spool_dir)
                for part in parts:
                    spool.write(part.T.numpy())
                parts = []
            if spool is None:
                parts.append(raw)
            else:
                spool.write(raw.T.numpy())

    try:
        for chunk in chunks:
            store(stream.push(chunk))
        store(stream.finish())
        if spool is not None:
            spool.done_writing()
    except BaseException:
        if spool is not None:
            spool.remove()
        raise

    duration = stream.n_samples / sampling_rate
    if spool is not None:
        return SpooledMel(spool, n_mels, n_frames, duration, peak)
    raw = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
    parts.clear()
    floor = torch.tensor(peak, dtype=torch.float32) - 8.0
    mel = torch.maximum(raw, floor)
    del raw
    return InMemoryMel(mel.add_(4.0).div_(4.0), duration)
