"""FunASR's ``WavFrontend`` without its CMVN: kaldi fbank of the int16-scaled waveform
(hamming window, dither 0), then low-frame-rate stacking (LFR: ``lfr_m`` frames every
``lfr_n``, 7 / 6 -> 560 features every 60 ms). The ``am.mvn`` shift / scale live in the
encoder as buffers (``ParaformerEncoder.cmvn_shift`` / ``cmvn_scale``), so a checkpoint
carries them and the front end has no side file."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from oasr.audio.fbank import kaldi_fbank
from oasr.audio.frontends import Frontend
from oasr.models.base import FeatureSpec

KIND = "funasr_fbank_lfr"

# FeatureSpec params (FunASR ``frontend_conf`` names) and their WavFrontend defaults.
PARAMS: dict[str, Any] = {
    "n_mels": 80,
    "frame_length": 25.0,
    "frame_shift": 10.0,
    "window": "hamming",
    "lfr_m": 7,
    "lfr_n": 6,
}


def apply_lfr(feats: torch.Tensor, lfr_m: int, lfr_n: int) -> torch.Tensor:
    """FunASR's ``apply_lfr``: ``ceil(T / lfr_n)`` rows of ``lfr_m`` stacked frames, the first
    frame repeated ``(lfr_m - 1) // 2`` times on the left and the last one as far as needed.

    Shapes:
        feats: (T, F) -> (ceil(T / lfr_n), lfr_m * F)
    """
    t, f = feats.shape
    if t == 0:
        return feats.new_zeros(0, lfr_m * f)
    left = (lfr_m - 1) // 2
    rows = math.ceil(t / lfr_n)
    right = max(0, (rows - 1) * lfr_n + lfr_m - (t + left))
    padded = torch.cat([feats[:1].expand(left, f), feats, feats[-1:].expand(right, f)])
    return padded.unfold(0, lfr_m, lfr_n)[:rows].transpose(1, 2).reshape(rows, lfr_m * f)


class ParaformerFrontend(Frontend):
    """Waveform -> LFR-stacked log-mel fbank (before CMVN), as FunASR's ``WavFrontend``.

    ``frame_shift_s`` is the LFR frame (``lfr_n`` fbank frames, 60 ms), the encoder's
    frame rate: the SANM encoder does not subsample.
    """

    def __init__(
        self,
        n_mels: int = 80,
        frame_length: float = 25.0,
        frame_shift: float = 10.0,
        window: str = "hamming",
        lfr_m: int = 7,
        lfr_n: int = 6,
        *,
        sampling_rate: int = 16000,
    ) -> None:
        if lfr_m < 1 or lfr_n < 1:
            raise ValueError(f"lfr_m / lfr_n must be positive, got {lfr_m} / {lfr_n}")
        self.n_mels = int(n_mels)
        self.frame_length = float(frame_length)
        self.frame_shift = float(frame_shift)
        self.window = str(window)
        self.lfr_m = int(lfr_m)
        self.lfr_n = int(lfr_n)
        self.sampling_rate = int(sampling_rate)
        self.n_features = self.n_mels * self.lfr_m
        shift = int(self.sampling_rate * self.frame_shift * 0.001)
        self.frame_shift_s = shift * self.lfr_n / self.sampling_rate

    @classmethod
    def from_spec(cls, spec: FeatureSpec) -> ParaformerFrontend:
        if spec.kind != KIND:
            raise ValueError(f"ParaformerFrontend reads FeatureSpec kind {KIND!r}, not {spec.kind!r}")
        unknown = sorted(set(spec.params) - set(PARAMS))
        if unknown:
            raise ValueError(f"{KIND}: unknown param(s) {unknown}; known: {sorted(PARAMS)}")
        return cls(sampling_rate=spec.sampling_rate, **dict(spec.params))

    def to_spec(self) -> FeatureSpec:
        params = {k: getattr(self, k) for k in PARAMS}
        return FeatureSpec(kind=KIND, sampling_rate=self.sampling_rate, params=params)

    def compute(self, waveform: np.ndarray | torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """LFR features in ``dtype`` (float64 for reference comparisons).

        Shapes:
            waveform: (samples,) in [-1, 1] -> (ceil(T_fbank / lfr_n), lfr_m * n_mels)
        """
        x = waveform if isinstance(waveform, torch.Tensor) else torch.from_numpy(np.asarray(waveform, np.float32))
        fbank = kaldi_fbank(
            x,
            sampling_rate=self.sampling_rate,
            num_mel_bins=self.n_mels,
            frame_length_ms=self.frame_length,
            frame_shift_ms=self.frame_shift,
            dither=0.0,
            window_type=self.window,
            waveform_scale=32768.0,  # FunASR's upsacle_samples: 1 << 15
            dtype=dtype,
        )
        return apply_lfr(fbank, self.lfr_m, self.lfr_n)

    def __call__(self, waveform: np.ndarray | torch.Tensor) -> torch.Tensor:
        return self.compute(waveform).float()

    def __repr__(self) -> str:
        return f"ParaformerFrontend(n_mels={self.n_mels}, window={self.window!r}, lfr={self.lfr_m}/{self.lfr_n})"
