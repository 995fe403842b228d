"""Audio decoding: any container PyAV reads, or an in-memory array, to float32 mono.

Decoding is streamed: PyAV frames are converted to float32, downmixed to mono by
averaging channels and pushed through a ``soxr.ResampleStream`` a fraction of a second
at a time, so the whole source is never held at its original rate and channel count.
``iter_audio`` exposes the stream as fixed-size chunks; ``load_audio`` concatenates them.

Resampling uses soxr quality ``"HQ"`` (20-bit precision), the same as librosa's default
``res_type="soxr_hq"``; it keeps a 7 kHz tone within 1e-3 and suppresses a 12 kHz one
(above the 8 kHz output Nyquist) below 1e-4.

Damage is detected three ways:

* decode errors: a packet the decoder rejects is skipped, with a logged warning, when
  decoding recovers after it (as FFmpeg's command line does: a glitch, or the second
  header of concatenated MP3s); the decode fails if the stream *ends* on rejected
  packets (a cut-off FLAC), and on any other FFmpeg error;
* truncation: for containers that declare an exact duration (WAV's data-chunk size,
  FLAC's sample count, MP4 / Matroska / Ogg headers, MP3 with a Xing/Info/VBRI frame),
  the decode fails if it falls short of that duration by more than
  ``max(TRUNCATION_TOLERANCE_S, TRUNCATION_TOLERANCE_REL * declared)``. Bitrate-estimated
  durations (ADTS AAC, MP3 without such a frame) are not checked, so a truncated file
  of that kind loads as the part that is there;
* empty, non-audio and non-finite input, and ``max_duration_s``;
* float samples far outside [-1, 1] (:func:`check_samples`).

Float samples (float arrays, float containers such as 32-bit float WAV) are nominally in
[-1, 1] but may go past it: a mix's overs, a float file with headroom. They are taken as
they are up to ``MAX_SAMPLE_MAGNITUDE`` (100, +40 dBFS: Whisper-base transcribes speech
scaled that hot as it does at full scale) and refused beyond it, as integer PCM handed
over as floats without scaling, or damaged data: such samples are not audio any model was
trained on, and from about 1e17 up they overflow the float32 spectra of most front ends
(Whisper's log-mel, kaldi fbank, FunASR's, NeMo's) into NaN / inf features.
(openai-whisper and faster-whisper convert decoded files to int16, which clips them to
full scale instead; their array input is not checked at all.)
Integer PCM cannot go past full scale and is never refused for its level.

Every problem with the *input* raises :class:`AudioDecodeError` (a ``ValueError``)
whose message names the problem and the input. Invalid *arguments* (a negative
rate, ``input_sampling_rate`` given for a file) raise plain ``ValueError`` /
``TypeError``; a path that cannot be opened raises the usual ``OSError``
(``FileNotFoundError``, ``IsADirectoryError``, ``PermissionError``).

PyAV and soxr are imported when first needed (a container to decode, a rate to
convert), so 16 kHz arrays load, and the engine imports, where they are not installed.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
import torch

if TYPE_CHECKING:
    import av
    import soxr

__all__ = [
    "MAX_SAMPLE_MAGNITUDE",
    "SAMPLE_RATE",
    "AudioDecodeError",
    "AudioSource",
    "check_samples",
    "iter_audio",
    "load_audio",
    "probe_duration",
]

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
"""The rate every model in oasr consumes, in Hz."""

AudioSource = str | os.PathLike | bytes | bytearray | memoryview | BinaryIO | np.ndarray | torch.Tensor

RESAMPLE_QUALITY = "HQ"

MAX_SAMPLE_MAGNITUDE = 100.0
"""The largest |sample| of float audio that is decoded (+40 dBFS); see the module notes."""

# A 2-D array is (channels, samples) when its first dim is at most this and smaller
# than the second, (samples, channels) in the mirrored case; anything else is refused.
MAX_ARRAY_CHANNELS = 8

# Truncation rule: the decode is "clearly short" when it falls below the duration
# the container declares by more than max(TRUNCATION_TOLERANCE_S, TRUNCATION_TOLERANCE_REL
# x declared). The absolute term absorbs codec delay / priming trimmed by the decoder
# (Opus pre-skip 6.5 ms, AAC priming 21-46 ms, MP3 encoder delay 25-50 ms) and a
# skipped glitch packet or two; the relative one rounding in long files' headers.
TRUNCATION_TOLERANCE_S = 0.2
TRUNCATION_TOLERANCE_REL = 0.01

# Container formats whose declared duration is exact (sample or frame counts in a
# header, or a last-page granule), so a short decode means lost data. Raw bitstreams
# such as ADTS AAC, or MP3 without a Xing/Info/VBRI header, only have a bitrate
# estimate, which is legitimately off for VBR files; they are not checked.
_EXACT_DURATION_FORMATS = frozenset(
    {
        "wav",
        "w64",
        "flac",
        "ogg",
        "aiff",
        "caf",
        "wv",
        "mov,mp4,m4a,3gp,3g2,mj2",
        "matroska,webm",
    }
)

# WAV data-chunk sizes that writers use as "length unknown" placeholders when streaming.
_WAV_SIZE_PLACEHOLDERS = frozenset({0, 0x7FFFFFFF, 0xFFFFFFFF})
# WAVE_FORMAT_PCM, _IEEE_FLOAT, _EXTENSIBLE: the codes whose block_align is one sample frame.
_WAV_PCM_FORMAT_TAGS = frozenset({0x0001, 0x0003, 0xFFFE})

# How much of a seekable source is read up front to inspect its header.
_HEAD_BYTES = 1 << 16
# Array input is pushed through the resampler in pieces of this many samples.
_ARRAY_PIECE = 1 << 16
# Decoded frames are grouped up to this many samples before resampling: one soxr call
# per few tenths of a second instead of per packet keeps hour-long files fast.
_GROUP_SAMPLES = 1 << 14
# Containers at a lower rate are refused: no speech fits under 2 kHz of bandwidth, and a
# header that claims 1 Hz makes a 20-kB file 10,000 s of audio to resample and decode.
MIN_INPUT_SAMPLE_RATE = 4000
# The resampler may round the output length up by a sample; allow 1 ms on max_duration_s.
_MAX_DURATION_SLACK_S = 1e-3

_INT_SCALE = {
    np.dtype(np.int16): 1.0 / 32768.0,
    np.dtype(np.int32): 1.0 / 2147483648.0,
}


class AudioDecodeError(ValueError):
    """The input is not decodable audio: empty, not audio, truncated, corrupt,
    non-finite, or longer than allowed. The message names the problem and the input."""


def check_samples(samples: np.ndarray, name: str = "audio") -> None:
    """Refuse float samples that are NaN / infinite or beyond ``MAX_SAMPLE_MAGNITUDE``.

    Args:
        samples: float samples of any shape and float dtype (checked before any cast to
            float32, so a float64 1e300 is "too large", not "infinite").
        name: how the message names the input.

    Raises:
        AudioDecodeError: naming the problem (``"NaN or infinite"`` / the peak found).
    """
    if samples.size == 0:
        return
    lo, hi = float(samples.min()), float(samples.max())  # NaN compares false below
    if -MAX_SAMPLE_MAGNITUDE <= lo and hi <= MAX_SAMPLE_MAGNITUDE:
        return
    if not (np.isfinite(lo) and np.isfinite(hi)) or not np.isfinite(samples).all():
        raise AudioDecodeError(f"audio contains NaN or infinite samples: {name}")
    peak = max(-lo, hi)
    raise AudioDecodeError(
        f"audio samples reach {peak:.6g}, far outside the [-1, 1] of float audio (at most "
        f"{MAX_SAMPLE_MAGNITUDE:g} is decoded): integer PCM stored as floats without scaling "
        f"(divide int16 by 32768), or damaged data: {name}"
    )


class AudioTooLong(AudioDecodeError):
    """The audio is longer than the caller's ``max_duration_s`` (from the container's
    header before decoding, or counted while decoding when the header lies)."""


@functools.cache
def _av():
    """PyAV, imported on the first container to decode, with ffmpeg's logging off."""
    import av
    import av.logging

    # ffmpeg logs one line per damaged packet; on a bad file that floods stderr.
    # PyAV's default (None) already drops them; undo any earlier import turning it on.
    if av.logging.get_level() is not None:
        av.logging.set_level(None)
    return av


# ---------------------------------------------------------------------------
# Public API


def load_audio(
    source: AudioSource,
    sampling_rate: int = SAMPLE_RATE,
    *,
    input_sampling_rate: int | None = None,
    max_duration_s: float | None = None,
) -> np.ndarray:
    """Decode ``source`` to float32 mono at ``sampling_rate``.

    Args:
        source: One of
            * a path (``str`` / ``os.PathLike``) to any file PyAV (FFmpeg) reads:
              wav, flac, mp3, ogg/opus, m4a/aac, webm, ...;
            * the bytes of such a file (``bytes`` / ``bytearray`` / ``memoryview``);
            * a binary file object positioned at the start of such a file;
            * samples (``np.ndarray`` / ``torch.Tensor``) at ``input_sampling_rate``:
              1-D ``(samples,)``, or 2-D, read as ``(channels, samples)`` when the
              first dim is <= 8 and smaller than the second, as ``(samples, channels)``
              in the mirrored case, and refused otherwise (e.g. ``(4, 4)``,
              ``(16, 16000)``). Float arrays are taken as they are (up to
              ``MAX_SAMPLE_MAGNITUDE``); int16 / int32 PCM is scaled to [-1, 1]. Other
              dtypes are refused.
            The first audio stream of a container is used. Channels are averaged.
        sampling_rate: Output rate in Hz.
        input_sampling_rate: Rate of an array ``source`` (default: ``sampling_rate``,
            i.e. no resampling). Must be ``None`` for encoded sources.
        max_duration_s: Refuse audio longer than this many seconds (checked from the
            container's declared duration when it is exact, else while decoding).

    Returns:
        ``np.ndarray`` of shape ``(samples,)``, dtype float32, mono, at ``sampling_rate``.

    Raises:
        AudioDecodeError: Empty input, not audio, no audio stream, truncated or corrupt
            data, NaN / inf samples, float samples beyond ``MAX_SAMPLE_MAGNITUDE``, zero
            samples, or longer than ``max_duration_s``.
        ValueError: Invalid arguments.
        TypeError: ``source`` is of an unsupported type.
        OSError: A path that cannot be opened.
    """
    chunks = list(
        iter_audio(
            source,
            sampling_rate,
            chunk_s=30.0,
            input_sampling_rate=input_sampling_rate,
            max_duration_s=max_duration_s,
        )
    )
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def iter_audio(
    source: AudioSource,
    sampling_rate: int = SAMPLE_RATE,
    chunk_s: float = 30.0,
    *,
    input_sampling_rate: int | None = None,
    max_duration_s: float | None = None,
) -> Iterator[np.ndarray]:
    """Decode ``source`` as a stream of float32 mono chunks at ``sampling_rate``.

    Memory stays bounded by ``chunk_s`` plus one decoded packet, whatever the length
    of the source. Their concatenation equals ``load_audio(source, sampling_rate, ...)``.

    Args:
        source: As for :func:`load_audio`.
        sampling_rate: Output rate in Hz.
        chunk_s: Chunk length in seconds; every chunk but the last has exactly
            ``round(chunk_s * sampling_rate)`` samples.
        input_sampling_rate: As for :func:`load_audio`.
        max_duration_s: As for :func:`load_audio`.

    Returns:
        An iterator of ``np.ndarray`` chunks of shape ``(n,)``, float32, ``n >= 1``.

    Raises:
        As :func:`load_audio`. Invalid arguments raise at the call; problems with the
        input raise on iteration, and one found mid-stream (corrupt packet, truncation,
        length limit) after the chunks decoded before it have been yielded.
    """
    _check_rate("sampling_rate", sampling_rate)
    if not chunk_s > 0:
        raise ValueError(f"chunk_s must be > 0, got {chunk_s}")
    if max_duration_s is not None and not max_duration_s > 0:
        raise ValueError(f"max_duration_s must be > 0, got {max_duration_s}")
    chunk_samples = max(1, round(chunk_s * sampling_rate))

    if isinstance(source, (np.ndarray, torch.Tensor)):
        in_rate = sampling_rate if input_sampling_rate is None else input_sampling_rate
        _check_rate("input_sampling_rate", in_rate)
        pieces = _array_pieces(source, in_rate, max_duration_s)
        name = f"<{type(source).__name__} {tuple(source.shape)}>"
    else:
        if input_sampling_rate is not None:
            raise ValueError("input_sampling_rate applies only to array sources")
        name = _describe(source)
        pieces = _container_pieces(source, name, max_duration_s)

    return _resample_and_chunk(pieces, sampling_rate, chunk_samples, name, max_duration_s)


def probe_duration(source: AudioSource, sampling_rate: int = SAMPLE_RATE) -> float | None:
    """Seconds of audio in ``source``, read from its shape or its container's header
    without decoding a sample (what a server can know of a request before spending work
    on it).

    Exact where the container declares its length (WAV, FLAC, MP4, ...); FFmpeg's
    bitrate estimate for the others (MP3 without a Xing / Info frame, ADTS AAC).

    Args:
        source: As for :func:`load_audio`; an array is taken to be at ``sampling_rate``.
        sampling_rate: The rate of an array source.

    Returns:
        The duration, or None when the header declares none, or cannot be read (decoding
        the source then says what is wrong with it). A file object is left at the
        position it had.
    """
    if isinstance(source, (np.ndarray, torch.Tensor)):
        shape = tuple(source.shape)
        if len(shape) not in (1, 2) or not shape[-1]:
            return None
        return max(shape) / sampling_rate  # (samples,), (channels, samples) or (samples, channels)
    tell = getattr(source, "tell", None)
    start = tell() if callable(tell) and _seekable(source) else None
    try:
        target, head = _open_source(source, _describe(source))
        if head is None:  # a pipe: its bytes are for the decoder
            return None
        av = _av()
        with av.open(target, mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                return None
            stream = container.streams.audio[0]
            declared = _declared_seconds(container, stream, head)
            if declared is None and stream.duration is not None and stream.time_base is not None:
                declared = float(stream.duration * stream.time_base)
            if declared is None and container.duration is not None:
                declared = container.duration / av.time_base
            return declared if declared is not None and declared > 0 else None
    except (OSError, ValueError, TypeError, _av().error.FFmpegError):
        return None
    finally:
        if start is not None:
            source.seek(start)  # type: ignore[union-attr]


_PRINT_HEAD = 1 << 20  # bytes of a source a fingerprint reads from its start ...
_PRINT_TAIL = 1 << 16  # ... and from its end


def fingerprint(source: AudioSource) -> str | None:
    """A short digest identifying ``source``'s content: the same audio posted again has the
    same one (what lets a server keep a refused client's place when it retries). It reads
    the size and at most the first MiB and the last 64 KiB, so it is cheap on any upload.

    Returns:
        The digest, or None for a source that cannot be read twice (a pipe) or cannot be read.
        A file object is left at the position it had.
    """
    digest = hashlib.blake2b(digest_size=16)
    if isinstance(source, torch.Tensor):
        source = source.detach().cpu().numpy()
    if isinstance(source, np.ndarray):
        data = memoryview(np.ascontiguousarray(source)).cast("B")
        digest.update(f"{source.dtype}{source.shape}".encode())
        digest.update(data[:_PRINT_HEAD])
        digest.update(data[-_PRINT_TAIL:])
        return digest.hexdigest()
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = memoryview(source).cast("B")
        digest.update(str(len(data)).encode())
        digest.update(data[:_PRINT_HEAD])
        digest.update(data[-_PRINT_TAIL:])
        return digest.hexdigest()
    try:
        if isinstance(source, (str, os.PathLike)):
            with open(source, "rb") as f:
                return _fingerprint_file(f, digest)
        if not _seekable(source):
            return None
        start = source.tell()  # type: ignore[union-attr]
        try:
            return _fingerprint_file(source, digest)  # type: ignore[arg-type]
        finally:
            source.seek(start)  # type: ignore[union-attr]
    except (OSError, ValueError, TypeError):
        return None


def _fingerprint_file(f: BinaryIO, digest) -> str:
    size = f.seek(0, os.SEEK_END)
    digest.update(str(size).encode())
    f.seek(0)
    digest.update(f.read(_PRINT_HEAD))
    f.seek(max(0, size - _PRINT_TAIL))
    digest.update(f.read(_PRINT_TAIL))
    return digest.hexdigest()


def _seekable(source: object) -> bool:
    seekable = getattr(source, "seekable", None)
    return callable(seekable) and bool(seekable())


# ---------------------------------------------------------------------------
# Resampling and chunking (shared by arrays and containers)


def _resample_and_chunk(
    pieces: Iterator[tuple[np.ndarray, int]],
    out_rate: int,
    chunk_samples: int,
    name: str,
    max_duration_s: float | None,
) -> Iterator[np.ndarray]:
    """Resample ``(mono float32, rate)`` pieces to ``out_rate`` and re-cut them into
    chunks of ``chunk_samples``; enforce the output-side length limit and non-emptiness."""
    limit = None if max_duration_s is None else (max_duration_s + _MAX_DURATION_SLACK_S) * out_rate
    buffered: list[np.ndarray] = []
    n_buffered = 0
    n_total = 0
    resampler: soxr.ResampleStream | None = None
    rate: int | None = None

    def emit(y: np.ndarray) -> Iterator[np.ndarray]:
        nonlocal n_buffered, n_total, buffered
        if y.size == 0:
            return
        n_total += y.size
        if limit is not None and n_total > limit:
            raise AudioTooLong(
                f"audio is longer than max_duration_s={max_duration_s:g} "
                f"(stopped decoding at {n_total / out_rate:.1f} s): {name}"
            )
        buffered.append(y)
        n_buffered += y.size
        if n_buffered >= chunk_samples:
            joined = np.concatenate(buffered)
            n_full = (joined.size // chunk_samples) * chunk_samples
            for start in range(0, n_full, chunk_samples):
                yield joined[start : start + chunk_samples]
            buffered = [joined[n_full:]] if n_full < joined.size else []
            n_buffered = joined.size - n_full

    def flush() -> np.ndarray:
        if resampler is None:
            return np.zeros(0, np.float32)
        return resampler.resample_chunk(np.zeros(0, np.float32), last=True)

    for x, piece_rate in pieces:
        if piece_rate != rate:
            # A stream may change rate mid-way (rare, e.g. concatenated MP3s): drain the
            # old resampler and start a new one.
            yield from emit(flush())
            rate = piece_rate
            resampler = None
            if rate != out_rate:
                import soxr

                resampler = soxr.ResampleStream(rate, out_rate, 1, dtype="float32", quality=RESAMPLE_QUALITY)
        yield from emit(x if resampler is None else resampler.resample_chunk(x, last=False))
    yield from emit(flush())

    if n_total == 0:
        raise AudioDecodeError(f"empty audio: 0 samples decoded from {name}")
    if buffered:
        yield np.concatenate(buffered) if len(buffered) > 1 else buffered[0]


def _check_rate(what: str, rate: int) -> None:
    if not isinstance(rate, (int, np.integer)) or isinstance(rate, bool) or rate <= 0:
        raise ValueError(f"{what} must be a positive integer (Hz), got {rate!r}")


def _check_declared_length(declared_s: float, max_duration_s: float | None, name: str) -> None:
    if max_duration_s is not None and declared_s > max_duration_s:
        raise AudioTooLong(f"audio is {declared_s:.1f} s, longer than max_duration_s={max_duration_s:g}: {name}")


# ---------------------------------------------------------------------------
# Arrays


def _array_pieces(
    source: np.ndarray | torch.Tensor, rate: int, max_duration_s: float | None
) -> Iterator[tuple[np.ndarray, int]]:
    mono = _array_to_mono(source)
    _check_declared_length(mono.size / rate, max_duration_s, f"<array of {mono.size} samples>")
    for start in range(0, mono.size, _ARRAY_PIECE):
        yield mono[start : start + _ARRAY_PIECE], rate


def _array_to_mono(source: np.ndarray | torch.Tensor) -> np.ndarray:
    """Validate an array source and return it as float32 mono ``(samples,)``."""
    if isinstance(source, torch.Tensor):
        t = source.detach()
        if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64):
            t = t.float()  # bfloat16 / float16 have no numpy bridge (bfloat16) or are too coarse
        arr = t.cpu().numpy()
    else:
        arr = source
    kind = arr.dtype
    if kind.kind == "f":
        check_samples(arr, f"<array of shape {arr.shape}>")
        samples = arr
    elif kind in _INT_SCALE:
        samples = arr.astype(np.float32) * np.float32(_INT_SCALE[kind])
    else:
        raise AudioDecodeError(f"unsupported sample dtype {kind}: arrays must be float, int16 or int32 PCM")

    if samples.ndim == 2:
        rows, cols = samples.shape
        if rows <= MAX_ARRAY_CHANNELS and rows < cols:
            samples = samples.mean(axis=0) if rows > 1 else samples[0]
        elif cols <= MAX_ARRAY_CHANNELS and cols < rows:
            samples = samples.mean(axis=1) if cols > 1 else samples[:, 0]
        else:
            raise AudioDecodeError(
                f"ambiguous 2-D audio shape {arr.shape}: expected (channels, samples) or "
                f"(samples, channels) with at most {MAX_ARRAY_CHANNELS} channels, "
                "fewer than samples"
            )
    elif samples.ndim != 1:
        raise AudioDecodeError(f"audio arrays must be 1-D or 2-D, got shape {arr.shape}")

    if samples.size == 0:
        raise AudioDecodeError(f"empty audio: 0 samples in array of shape {arr.shape}")
    return np.array(samples, dtype=np.float32)  # a copy: the result must not alias the input


# ---------------------------------------------------------------------------
# Containers


def _describe(source: object) -> str:
    """How error messages name an encoded source."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return f"<{type(source).__name__} of {memoryview(source).nbytes} bytes>"
    name = getattr(source, "name", None)
    return f"<file object {name!r}>" if isinstance(name, str) else f"<{type(source).__name__}>"


def _open_source(source: object, name: str) -> tuple[object, bytes | None]:
    """Return what to hand to ``av.open`` and the first bytes of the source (for header
    checks; ``None`` when the source is not seekable). Raises on empty input."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        with open(path, "rb") as f:  # OSError for a missing path surfaces unchanged
            head = f.read(_HEAD_BYTES)
            size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise AudioDecodeError(f"empty file: {name} (0 bytes)")
        return path, head
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = memoryview(source).cast("B")
        if data.nbytes == 0:
            raise AudioDecodeError(f"empty input: {name}")
        return io.BytesIO(data), bytes(data[:_HEAD_BYTES])
    if not (hasattr(source, "read") and callable(source.read)):
        raise TypeError(
            "audio source must be a path, bytes, a binary file object, np.ndarray or "
            f"torch.Tensor, got {type(source).__name__}"
        )
    seekable = getattr(source, "seekable", None)
    if not (callable(seekable) and seekable()):
        return source, None
    start = source.tell()
    head = source.read(_HEAD_BYTES)
    source.seek(start)
    if isinstance(head, str):
        raise TypeError(f"file object must be opened in binary mode: {name}")
    if not head:
        raise AudioDecodeError(f"empty input: {name} (0 bytes from the current position)")
    return source, head


def _container_pieces(source: object, name: str, max_duration_s: float | None) -> Iterator[tuple[np.ndarray, int]]:
    """Decode a container and yield ``(float32 mono, rate)`` groups of frames."""
    target, head = _open_source(source, name)
    av = _av()
    try:
        container = av.open(target, mode="r", metadata_errors="ignore")
    except av.error.EOFError as e:
        raise AudioDecodeError(f"truncated or corrupt audio: {name}: data ends inside the header") from e
    except av.error.FFmpegError as e:
        # strerror: FFmpeg's reason without its errno and its own copy of the file name
        raise AudioDecodeError(f"not an audio file (unrecognised or corrupt data): {name}: {e.strerror or e}") from e

    with container:
        if not container.streams.audio:
            kinds = ", ".join(s.type for s in container.streams) or "none"
            raise AudioDecodeError(f"not an audio file (no audio stream; streams: {kinds}): {name}")
        stream = container.streams.audio[0]
        rate = stream.codec_context.sample_rate or stream.rate
        if rate and rate < MIN_INPUT_SAMPLE_RATE:
            raise AudioDecodeError(
                f"the audio's sample rate is {rate} Hz, below the {MIN_INPUT_SAMPLE_RATE} Hz oasr decodes "
                f"(not speech audio, or a corrupt header): {name}"
            )
        declared_s = _declared_seconds(container, stream, head)
        if declared_s is not None:
            _check_declared_length(declared_s, max_duration_s, name)

        decoded_s = 0.0
        group: list[np.ndarray] = []
        n_group = 0
        group_rate = None
        n_packets = n_invalid = 0
        # The last invalid-data error, cleared once a later packet decodes again.
        unrecovered: tuple[av.error.FFmpegError, float] | None = None
        try:
            for packet in container.demux(stream):
                n_packets += 1
                try:
                    frames = packet.decode()
                except av.error.InvalidDataError as e:
                    n_invalid += 1
                    unrecovered = (e, decoded_s)
                    continue
                for frame in frames:
                    if frame.samples == 0:
                        continue
                    unrecovered = None
                    if frame.sample_rate < MIN_INPUT_SAMPLE_RATE:
                        raise AudioDecodeError(
                            f"the audio's sample rate is {frame.sample_rate} Hz, below the "
                            f"{MIN_INPUT_SAMPLE_RATE} Hz oasr decodes: {name}"
                        )
                    if frame.sample_rate != group_rate and group:
                        yield _join(group), group_rate
                        group, n_group = [], 0
                    group_rate = frame.sample_rate
                    group.append(_frame_to_mono(frame, name))
                    n_group += frame.samples
                    decoded_s += frame.samples / frame.sample_rate
                    if n_group >= _GROUP_SAMPLES:
                        yield _join(group), group_rate
                        group, n_group = [], 0
        except av.error.FFmpegError as e:
            raise AudioDecodeError(
                f"truncated or corrupt audio: {name}: decoded {decoded_s:.1f} s before error: {e}"
            ) from e
        if group:
            yield _join(group), group_rate

        if unrecovered is not None:
            error, at_s = unrecovered
            raise AudioDecodeError(
                f"truncated or corrupt audio: {name}: decoded {at_s:.1f} s before error: {error}"
            ) from error
        if n_invalid:
            logger.warning(
                "skipped %d of %d audio packets the decoder rejected in %s",
                n_invalid,
                n_packets,
                name,
            )
        if declared_s is not None and decoded_s < declared_s - max(
            TRUNCATION_TOLERANCE_S, TRUNCATION_TOLERANCE_REL * declared_s
        ):
            raise AudioDecodeError(
                f"truncated or corrupt audio: {name}: the {container.format.name} header "
                f"declares {declared_s:.2f} s but only {decoded_s:.2f} s decoded"
            )


def _join(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _frame_to_mono(frame: av.AudioFrame, name: str) -> np.ndarray:
    """One decoded frame as float32 mono ``(samples,)``: scale integer PCM, average channels."""
    raw = frame.to_ndarray()
    fmt = frame.format.name.rstrip("p")
    if fmt in ("flt", "dbl"):
        # Only float sample formats can carry NaN / inf or go far past full scale.
        check_samples(raw, name)
        x = raw
    elif fmt == "u8":
        x = (raw.astype(np.float32) - 128.0) * np.float32(1.0 / 128.0)
    else:  # s16 / s32 / s64: full-scale is 2 ** (bits - 1)
        x = raw.astype(np.float32) * np.float32(2.0 ** (1 - 8 * frame.format.bytes))
    channels = frame.layout.nb_channels
    if channels == 1:
        return np.ascontiguousarray(x.reshape(-1), dtype=np.float32)
    # Planar arrays are (channels, samples); packed ones are (1, samples * channels).
    x = x if frame.format.is_planar else x.reshape(-1, channels).T
    # A per-channel sum is several times faster than ndarray.mean on the strided view.
    mono = x[0].astype(np.float32)
    for c in range(1, channels):
        mono += x[c]
    mono *= np.float32(1.0 / channels)
    return mono


def _declared_seconds(
    container: av.container.InputContainer, stream: av.AudioStream, head: bytes | None
) -> float | None:
    """The duration the container declares, when it is exact; ``None`` when unknown or
    only a bitrate estimate (see ``_EXACT_DURATION_FORMATS``)."""
    fmt = container.format.name
    if fmt == "wav":
        # FFmpeg clamps a PCM WAV's duration to the bytes present, hiding truncation;
        # the header's data-chunk size is what the writer meant.
        declared = _wav_declared_seconds(head) if head else None
        if declared is not None:
            return declared
    elif fmt == "mp3":
        if not (head and _mp3_has_frame_count(head)):
            return None
    elif fmt not in _EXACT_DURATION_FORMATS:
        return None
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / _av().time_base
    return None


def _wav_declared_seconds(head: bytes) -> float | None:
    """Duration a RIFF/WAVE header declares (data-chunk bytes / block_align / rate), or
    ``None`` if the header is not plain PCM / float, not in ``head``, or a placeholder."""
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    pos = 12
    rate = block_align = 0
    while pos + 8 <= len(head):
        chunk_id = head[pos : pos + 4]
        size = int.from_bytes(head[pos + 4 : pos + 8], "little")
        if chunk_id == b"fmt " and pos + 24 <= len(head):
            tag = int.from_bytes(head[pos + 8 : pos + 10], "little")
            if tag not in _WAV_PCM_FORMAT_TAGS:
                return None
            rate = int.from_bytes(head[pos + 12 : pos + 16], "little")
            block_align = int.from_bytes(head[pos + 20 : pos + 22], "little")
        elif chunk_id == b"data":
            if rate <= 0 or block_align <= 0 or size in _WAV_SIZE_PLACEHOLDERS:
                return None
            return size / block_align / rate
        pos += 8 + size + (size & 1)  # chunks are word-aligned
    return None


def _mp3_has_frame_count(head: bytes) -> bool:
    """Whether an MP3's first frame carries a Xing / Info / VBRI header, from which
    FFmpeg takes an exact duration (without one it estimates from the bitrate)."""
    start = 0
    if head[:3] == b"ID3" and len(head) >= 10:
        tag_size = (head[6] << 21) | (head[7] << 14) | (head[8] << 7) | head[9]
        start = 10 + tag_size + (10 if head[5] & 0x10 else 0)
    # The tag sits at most 36 bytes into the first frame; allow for padding before it.
    window = head[start : start + 512]
    return any(tag in window for tag in (b"Xing", b"Info", b"VBRI"))
