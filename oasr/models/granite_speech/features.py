"""Granite Speech's log-mel front end (transformers' ``GraniteSpeechFeatureExtractor``, which
runs torchaudio's ``MelSpectrogram``), in torch.

    STFT (n_fft 512, periodic Hann of 400 centred in the frame, hop 160, center=True with
    reflect padding) -> |X|^2 -> HTK mel filters (unnormalised) -> log10(max(., 1e-10))
    -> floor at the utterance's maximum - 8 -> / 4 + 1
    -> an odd last frame dropped, pairs of frames stacked: (T / 2, 2 * n_mels)

An utterance of ``N`` samples gives ``N // hop + 1`` mel frames, ``(N // hop + 1) // 2``
stacked ones. The floor reads the whole utterance, so each clip is computed on its own
(a padded batch of clips gives each row what it gets alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from oasr.audio.fbank import htk_mel_filters
from oasr.audio.frontends import Frontend
from oasr.models.base import FeatureSpec

PARAM_KEYS = ("n_mels", "n_fft", "win_length", "hop_length")
LOG_FLOOR = 1e-10
DYNAMIC_RANGE = 8.0  # decades kept below the utterance's maximum


class GraniteSpeechFrontend(Frontend):
    """Waveform -> stacked log-mel frames for a Granite Speech checkpoint.

    Args:
        n_mels: mel bins per frame (80); the encoder reads two frames stacked.
        n_fft / win_length / hop_length: the STFT.
        dtype: float32 (serving) or float64 (reference checks).
    """

    def __init__(
        self,
        *,
        sampling_rate: int = 16000,
        n_mels: int = 80,
        n_fft: int = 512,
        win_length: int = 400,
        hop_length: int = 160,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if win_length > n_fft or min(n_mels, n_fft, win_length, hop_length, sampling_rate) <= 0:
            raise ValueError(f"granite_mel: bad STFT n_fft={n_fft}, win_length={win_length}, hop_length={hop_length}")
        self.sampling_rate = int(sampling_rate)
        self.n_mels, self.n_fft, self.win_length, self.hop_length = int(n_mels), int(n_fft), int(win_length), hop_length
        self.n_features = 2 * self.n_mels
        self.frame_shift_s = 2 * self.hop_length / self.sampling_rate
        self.dtype = dtype

    @classmethod
    def from_spec(cls, spec: FeatureSpec, dtype: torch.dtype = torch.float32) -> GraniteSpeechFrontend:
        if spec.kind != "granite_mel":
            raise ValueError(f"GraniteSpeechFrontend reads FeatureSpec kind 'granite_mel', not {spec.kind!r}")
        unknown = sorted(set(spec.params) - set(PARAM_KEYS))
        if unknown:
            raise ValueError(f"granite_mel: unknown feature param(s) {unknown}; known: {list(PARAM_KEYS)}")
        return cls(sampling_rate=spec.sampling_rate, dtype=dtype, **_ints(spec.params))

    def num_frames(self, num_samples: int) -> int:
        """Stacked frames of an utterance of ``num_samples`` samples."""
        return (num_samples // self.hop_length + 1) // 2

    def __call__(self, waveform: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Shapes: waveform (samples,) -> (samples // hop + 1) // 2 frames of 2 * n_mels."""
        x = waveform if isinstance(waveform, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(waveform))
        x = x.to(self.dtype)
        if x.ndim != 1:
            raise ValueError(f"expected a 1-D mono waveform, got shape {tuple(x.shape)}")
        if x.shape[0] <= self.n_fft // 2:
            raise ValueError(f"granite_mel needs more than {self.n_fft // 2} samples (the STFT's reflect padding)")
        window = torch.hann_window(self.win_length, periodic=True, dtype=x.dtype, device=x.device)
        spec = torch.stft(
            x,
            self.n_fft,
            self.hop_length,
            self.win_length,
            window,
            center=True,
            pad_mode="reflect",
            return_complex=True,
        )  # (F, frames)
        fb = htk_mel_filters(self.n_mels, self.n_fft, self.sampling_rate).to(x.device, x.dtype)
        logmel = (spec.abs().pow(2).T @ fb).clamp(min=LOG_FLOOR).log10()  # (frames, n_mels)
        logmel = torch.maximum(logmel, logmel.max() - DYNAMIC_RANGE) / 4 + 1
        n = logmel.shape[0] // 2
        return logmel[: 2 * n].reshape(n, 2 * self.n_mels)


def _ints(params: Mapping[str, Any]) -> dict[str, int]:
    return {k: int(v) for k, v in params.items()}
