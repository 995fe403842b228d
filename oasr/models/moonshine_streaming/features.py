"""Moonshine Streaming's front end: the waveform itself, one sample a frame (the encoder cuts
and normalises its 5-ms frames), so it streams sample for sample (``framing``)."""

from __future__ import annotations

import numpy as np
import torch

from oasr.audio.frontends import Frontend
from oasr.audio.streaming import Framing
from oasr.models.base import FeatureSpec


class MoonshineWaveformFrontend(Frontend):
    """Waveform -> (samples, 1) float32, unchanged.

    Shapes:
        waveform: (samples,) -> (samples, 1)
    """

    n_features = 1
    framing = Framing(length=1, hop=1)

    def __init__(self, *, sampling_rate: int = 16000) -> None:
        self.sampling_rate = int(sampling_rate)
        self.frame_shift_s = 1.0 / self.sampling_rate

    @classmethod
    def from_spec(cls, spec: FeatureSpec) -> MoonshineWaveformFrontend:
        if spec.params:
            raise ValueError(f"moonshine_waveform takes no feature parameters, got {sorted(spec.params)}")
        return cls(sampling_rate=spec.sampling_rate)

    def num_frames(self, n_samples: int) -> int:
        return int(n_samples)

    def __call__(self, waveform: np.ndarray | torch.Tensor) -> torch.Tensor:
        if np.ndim(waveform) != 1:
            raise ValueError(f"a mono waveform (samples,) is expected, got shape {np.shape(waveform)}")
        return torch.as_tensor(waveform).to(torch.float32)[:, None]
