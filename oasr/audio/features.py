"""Whisper log-mel features in torch, on whatever device the input lives on.

Numerically this is the openai-whisper / faster-whisper / Hugging Face
``WhisperFeatureExtractor`` recipe:

    periodic Hann window (n_fft=400), hop 160, ``torch.stft(center=True, pad_mode="reflect")``
    -> |X|^2, last frame dropped -> Slaney mel filters -> log10(clamp(1e-10))
    -> max(x, x.max() - 8) -> (x + 4) / 4

where ``x.max()`` is taken over everything the waveform contributes, padding included:
the whole padded input for :func:`log_mel_spectrogram`, each padded 30-s row for
:func:`log_mel_batch`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import torch

__all__ = [
    "HOP_LENGTH",
    "N_FFT",
    "N_SAMPLES",
    "log_mel_batch",
    "log_mel_spectrogram",
    "mel_filters",
]

N_FFT = 400
HOP_LENGTH = 160
CHUNK_LENGTH = 30
N_SAMPLES = CHUNK_LENGTH * 16000  # 480000 samples: one 30-s Whisper window at 16 kHz

Waveform = np.ndarray | torch.Tensor


# ---------------------------------------------------------------------------
# Mel filters


def _hz_to_mel(hz: torch.Tensor) -> torch.Tensor:
    """Slaney mel scale: linear (3 mels / 200 Hz) below 1 kHz, logarithmic above."""
    min_log_hz, min_log_mel, logstep = 1000.0, 15.0, 27.0 / np.log(6.4)
    return torch.where(
        hz >= min_log_hz,
        min_log_mel + torch.log(hz.clamp(min=min_log_hz) / min_log_hz) * logstep,
        hz * 3.0 / 200.0,
    )


def _mel_to_hz(mel: torch.Tensor) -> torch.Tensor:
    min_log_hz, min_log_mel, logstep = 1000.0, 15.0, np.log(6.4) / 27.0
    return torch.where(
        mel >= min_log_mel,
        min_log_hz * torch.exp(logstep * (mel - min_log_mel)),
        mel * 200.0 / 3.0,
    )


@functools.lru_cache(maxsize=32)
def _mel_filters_cached(
    n_mels: int, n_fft: int, sampling_rate: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    f64 = torch.float64
    n_freqs = n_fft // 2 + 1
    fft_freqs = torch.linspace(0.0, sampling_rate / 2, n_freqs, dtype=f64)
    mel_edges = torch.linspace(
        0.0, float(_hz_to_mel(torch.tensor(sampling_rate / 2, dtype=f64))), n_mels + 2, dtype=f64
    )
    hz_edges = _mel_to_hz(mel_edges)  # (n_mels + 2,): lower edge, centre, upper edge per filter
    widths = hz_edges[1:] - hz_edges[:-1]
    offsets = hz_edges[:, None] - fft_freqs[None, :]  # (n_mels + 2, n_freqs)
    rising = -offsets[:-2] / widths[:-1, None]
    falling = offsets[2:] / widths[1:, None]
    weights = torch.clamp(torch.minimum(rising, falling), min=0.0)
    # Slaney normalisation: each triangle has unit area over its width in Hz.
    weights = weights * (2.0 / (hz_edges[2:] - hz_edges[:-2]))[:, None]
    return weights.to(device=device, dtype=dtype)


def mel_filters(
    n_mels: int,
    n_fft: int = N_FFT,
    sampling_rate: int = 16000,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Slaney-scale, Slaney-normalised triangular mel filters from 0 Hz to Nyquist.

    The same bank as ``librosa.filters.mel(sr, n_fft, n_mels)`` and transformers'
    ``mel_filter_bank(n_fft // 2 + 1, n_mels, 0, sampling_rate / 2, sampling_rate,
    norm="slaney", mel_scale="slaney")`` (transposed). Computed in float64, then cast.
    Cached per (n_mels, n_fft, sampling_rate, device, dtype): do not modify in place.

    Args:
        n_mels: Number of mel bands (80 or 128 for Whisper).
        n_fft: FFT size; the bank covers its ``n_fft // 2 + 1`` one-sided bins.
        sampling_rate: Audio rate in Hz; the top band ends at ``sampling_rate / 2``.
        device: Device of the result (default CPU).
        dtype: Dtype of the result.

    Returns:
        Tensor of shape ``(n_mels, n_fft // 2 + 1)``.
    """
    return _mel_filters_cached(n_mels, n_fft, sampling_rate, torch.device(device or "cpu"), dtype)


@functools.lru_cache(maxsize=8)
def _hann_window(n_fft: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.hann_window(n_fft, periodic=True, device=device, dtype=dtype)


# ---------------------------------------------------------------------------
# Log-mel


def _log_mel(x: torch.Tensor, n_mels: int, n_fft: int, hop_length: int, sampling_rate: int) -> torch.Tensor:
    """Whisper log-mel of ``(..., samples)`` -> ``(..., n_mels, samples // hop_length)``;
    the clamp-to-max-minus-8 is per leading index (per waveform)."""
    if x.shape[-1] <= n_fft // 2:
        # Reflect padding needs more than n_fft // 2 samples.
        raise ValueError(
            f"audio too short for a log-mel spectrogram: {x.shape[-1]} samples "
            f"(need more than {n_fft // 2}; pass padding= to extend it)"
        )
    window = _hann_window(n_fft, x.device, x.dtype)
    stft = torch.stft(
        x,
        n_fft,
        hop_length,
        window=window,
        center=True,
        pad_mode="reflect",
        return_complex=True,
    )
    # Whisper drops the last STFT frame, so n_frames = samples // hop_length.
    power = stft[..., :-1].abs() ** 2
    mel = mel_filters(n_mels, n_fft, sampling_rate, x.device, x.dtype) @ power
    log_spec = torch.clamp(mel, min=1e-10).log10()
    peak = log_spec.amax(dim=(-2, -1), keepdim=True)
    log_spec = torch.maximum(log_spec, peak - 8.0)
    return (log_spec + 4.0) / 4.0


def _to_tensor(audio: Waveform, device: torch.device | str | None, dtype: torch.dtype) -> torch.Tensor:
    t = torch.from_numpy(np.asarray(audio)) if not isinstance(audio, torch.Tensor) else audio
    if t.ndim != 1:
        raise ValueError(f"expected a 1-D waveform, got shape {tuple(t.shape)}")
    return t.to(device=device if device is not None else t.device, dtype=dtype)


def log_mel_spectrogram(
    audio: Waveform,
    n_mels: int = 80,
    *,
    padding: int = 0,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    n_fft: int = N_FFT,
    hop_length: int = HOP_LENGTH,
    sampling_rate: int = 16000,
) -> torch.Tensor:
    """Whisper log-mel spectrogram of one waveform of any length.

    With ``padding=480000`` this is openai-whisper's / faster-whisper's long-form
    feature: the clamp to ``max - 8`` uses the max over the whole padded input.

    Args:
        audio: Waveform of shape ``(samples,)`` at ``sampling_rate`` (np array or tensor).
        n_mels: Number of mel bands.
        padding: Zero samples appended before the STFT.
        device: Where to compute (default: the tensor's device, CPU for numpy).
        dtype: Computation dtype: float32 (default) or float64 for reference checks.
        n_fft: FFT / window size.
        hop_length: Hop between frames, in samples.
        sampling_rate: Rate of ``audio`` in Hz (sets the mel bank's frequency axis).

    Returns:
        Tensor of shape ``(n_mels, (samples + padding) // hop_length)``, ``dtype``, on
        ``device``.
    """
    x = _to_tensor(audio, device, dtype)
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    if padding:
        x = torch.nn.functional.pad(x, (0, padding))
    return _log_mel(x, n_mels, n_fft, hop_length, sampling_rate)


def log_mel_batch(
    waveforms: Sequence[Waveform],
    n_mels: int = 80,
    n_samples: int = N_SAMPLES,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    *,
    n_fft: int = N_FFT,
    hop_length: int = HOP_LENGTH,
    sampling_rate: int = 16000,
) -> torch.Tensor:
    """Whisper encoder input for a batch: each waveform zero-padded or trimmed to
    ``n_samples``, then log-mel in one batched STFT, clamped per row.

    Equals ``WhisperFeatureExtractor(feature_size=n_mels)(waveforms, sampling_rate=16000,
    return_tensors="pt").input_features`` (its default ``padding="max_length"``).

    Args:
        waveforms: Non-empty sequence of ``(samples,)`` waveforms (np arrays or tensors).
        n_mels: Number of mel bands.
        n_samples: Length every waveform is padded / trimmed to (30 s at 16 kHz).
        device: Where to compute (default: the first tensor's device, else CPU).
        dtype: Computation dtype: float32 (default) or float64.
        n_fft: FFT / window size.
        hop_length: Hop between frames, in samples.
        sampling_rate: Rate of the waveforms in Hz.

    Returns:
        Tensor of shape ``(len(waveforms), n_mels, n_samples // hop_length)``.
    """
    if len(waveforms) == 0:
        raise ValueError("log_mel_batch needs at least one waveform")
    if device is None:
        device = next((w.device for w in waveforms if isinstance(w, torch.Tensor)), "cpu")
    batch = torch.zeros(len(waveforms), n_samples, device=device, dtype=dtype)
    for row, audio in zip(batch, waveforms, strict=True):
        x = _to_tensor(audio, device, dtype)[:n_samples]
        row[: x.shape[0]] = x
    return _log_mel(batch, n_mels, n_fft, hop_length, sampling_rate)
