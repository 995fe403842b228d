"""The wav2vec2 family's front end: the waveform itself, one sample a frame, normalised per
utterance as transformers' ``Wav2Vec2FeatureExtractor`` does with ``do_normalize``:

    x = (x - mean(x)) / sqrt(var(x) + 1e-7)        # over the utterance's own samples

The encoder's convolutions do the rest. Each utterance (each CTC window) is normalised alone,
so a row of a padded batch sees exactly what it sees by itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from oasr.audio.frontends import Frontend
from oasr.models.base import FeatureSpec

NORM_EPS = 1e-7  # transformers' zero_mean_unit_var_norm


class Wav2Vec2Frontend(Frontend):
    """Waveform -> (samples, 1) float32 frames, zero-mean unit-variance when ``do_normalize``.

    Args:
        sampling_rate: input rate in Hz.
        do_normalize: normalise each utterance (the checkpoint's ``preprocessor_config.json``).

    Shapes:
        waveform: (samples,) -> (samples, 1)
    """

    n_features = 1

    def __init__(self, *, sampling_rate: int = 16000, do_normalize: bool = True) -> None:
        self.sampling_rate = int(sampling_rate)
        self.frame_shift_s = 1.0 / self.sampling_rate
        self.do_normalize = bool(do_normalize)

    @classmethod
    def from_spec(cls, spec: FeatureSpec) -> Wav2Vec2Frontend:
        params: Mapping[str, Any] = dict(spec.params)
        unknown = sorted(set(params) - {"do_normalize"})
        if unknown:
            raise ValueError(f"wav2vec2_waveform: unknown feature parameter(s) {unknown}; known: ['do_normalize']")
        return cls(sampling_rate=spec.sampling_rate, do_normalize=params.get("do_normalize", True))

    def __call__(self, waveform: np.ndarray | torch.Tensor) -> torch.Tensor:
        if np.ndim(waveform) != 1:
            raise ValueError(f"Wav2Vec2Frontend expects a mono waveform (samples,), got shape {np.shape(waveform)}")
        x = torch.as_tensor(waveform).to(torch.float32)
        if self.do_normalize and x.numel():
            # float64 statistics: the float32 ones of numpy drift on long inputs
            x64 = x.double()
            x = ((x64 - x64.mean()) / torch.sqrt(x64.var(unbiased=False) + NORM_EPS)).to(torch.float32)
        return x[:, None]
