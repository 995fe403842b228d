"""faster-whisper's ``audio`` module on oasr's decoder (``oasr.audio.io``, PyAV / FFmpeg)."""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from oasr.audio.io import SAMPLE_RATE, load_audio

__all__ = ["decode_audio", "pad_or_trim"]


def decode_audio(
    input_file: str | BinaryIO, sampling_rate: int = SAMPLE_RATE, split_stereo: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Decode an audio file (path or binary file object) to float32 samples at ``sampling_rate``.

    Args:
        input_file: a path, or a binary file object at the start of an audio file.
        sampling_rate: the output rate in Hz.
        split_stereo: return the (left, right) channels of a stereo file instead of their mean.

    Returns:
        ``(samples,)`` mono, or ``(left, right)`` with ``split_stereo``.

    Raises:
        ValueError: ``split_stereo`` on audio that is not two-channel.
        oasr.audio.AudioDecodeError: not decodable audio.
    """
    source = input_file.read() if hasattr(input_file, "read") else input_file
    if not split_stereo:
        return load_audio(source, sampling_rate)
    channels = _decode_channels(source, sampling_rate)
    if channels.shape[0] != 2:
        raise ValueError(f"split_stereo=True needs two-channel audio, got {channels.shape[0]} channel(s)")
    return channels[0], channels[1]


def _decode_channels(source: object, sampling_rate: int) -> np.ndarray:
    """Every channel of the first audio stream, ``(channels, samples)`` float32 at ``sampling_rate``
    (oasr's own decoder averages channels, so the split is done here with PyAV)."""
    import io

    import av

    f = io.BytesIO(bytes(source)) if isinstance(source, (bytes, bytearray, memoryview)) else source
    with av.open(f, mode="r") as container:
        stream = container.streams.audio[0]
        n = stream.codec_context.channels
        layout = "mono" if n == 1 else "stereo" if n == 2 else stream.layout.name
        resampler = av.AudioResampler(format="flt", layout=layout, rate=sampling_rate)
        parts = []
        for frame in container.decode(stream):
            parts += [f.to_ndarray().reshape(-1, n) for f in resampler.resample(frame)]
        parts += [f.to_ndarray().reshape(-1, n) for f in resampler.resample(None)]
    samples = np.concatenate(parts) if parts else np.zeros((0, n), np.float32)
    return np.ascontiguousarray(samples.T, dtype=np.float32)


def pad_or_trim(array: np.ndarray, length: int = 3000, *, axis: int = -1) -> np.ndarray:
    """Zero-pad or cut ``array`` along ``axis`` to ``length`` (3000 frames: a 30-s window)."""
    if array.shape[axis] > length:
        return np.take(array, np.arange(length), axis=axis)
    if array.shape[axis] < length:
        widths = [(0, 0)] * array.ndim
        widths[axis] = (0, length - array.shape[axis])
        return np.pad(array, widths)
    return array
