"""Granite Speech 5's front end, as Hugging Face's ``GraniteSpeech5FeatureExtractor`` derives it
(torchaudio's ``MelSpectrogram`` defaults, rebuilt in plain torch):

    M = mel_frames rounded up to even, mel_frames = samples // hop     # the waveform is
                                                                       # zero-extended to fill M
    power = |stft(x, n_fft, hop, periodic_hann(win), center, reflect)|^2, first M frames
    mel = log10(clamp(power @ htk_triangles(0 .. sr/2), 1e-10))         # no area normalisation
    mel = max(mel, mel.max() - floor_db) / 4 + 1                       # max over the utterance
    feats = [mel, delta(mel)] per frame, two consecutive frames stacked -> (M / 2, 4 n_mels)

``delta`` is torchaudio's ``compute_deltas`` at window 3: ``(c[t+1] - c[t-1]) / 2`` with the
edge frames repeated. The utterance-wide max makes every clip's features its own: a batch is
computed clip by clip (``compute_batch``), so a padded row equals the clip alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from oasr.audio.fbank import htk_mel_filters
from oasr.audio.frontends import Frontend
from oasr.models.base import FeatureSpec

_DTYPES = {"float64": torch.float64, "float32": torch.float32}
FRAME_STACKING = 2  # mel frames per feature frame
PARAM_KEYS = ("n_mels", "n_fft", "win_length", "hop_length", "delta_win_length", "logmel_floor_db", "dtype")


class GraniteSpeech5Frontend(Frontend):
    """Waveform -> stacked log-mel + delta frames for a Granite Speech 5 checkpoint.

    Args:
        sampling_rate: input rate in Hz.
        n_mels: mel bands (a feature frame holds ``4 * n_mels`` values).
        n_fft, win_length, hop_length: the STFT (periodic Hann window centred in ``n_fft``).
        delta_win_length: window of the delta features (odd, >= 3).
        logmel_floor_db: how far below the utterance's max the log-mel is floored.
        dtype: compute dtype: float32 (the reference's) or float64 (reference checks).

    Shapes:
        waveform: (samples,) -> (ceil((samples // hop_length) / 2), 4 * n_mels)
    """

    def __init__(
        self,
        *,
        sampling_rate: int = 16000,
        n_mels: int = 80,
        n_fft: int = 512,
        win_length: int = 400,
        hop_length: int = 160,
        delta_win_length: int = 3,
        logmel_floor_db: float = 8.0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if win_length > n_fft:
            raise ValueError(f"win_length={win_length} exceeds n_fft={n_fft}")
        if delta_win_length < 3 or delta_win_length % 2 == 0:
            raise ValueError(f"delta_win_length={delta_win_length} must be odd and >= 3")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"GraniteSpeech5Frontend computes in float32 or float64, not {dtype}")
        self.sampling_rate = int(sampling_rate)
        self.n_mels = int(n_mels)
        self.n_features = 2 * FRAME_STACKING * self.n_mels
        self.n_fft, self.win_length, self.hop_length = int(n_fft), int(win_length), int(hop_length)
        self.delta_win_length = int(delta_win_length)
        self.logmel_floor_db = float(logmel_floor_db)
        self.frame_shift_s = FRAME_STACKING * hop_length / sampling_rate
        self.dtype = dtype

    @classmethod
    def from_spec(cls, spec: FeatureSpec) -> GraniteSpeech5Frontend:
        params: Mapping[str, Any] = dict(spec.params)
        unknown = sorted(set(params) - set(PARAM_KEYS))
        if unknown:
            raise ValueError(f"granite_speech5_mel: unknown feature parameter(s) {unknown}; known: {list(PARAM_KEYS)}")
        dtype_name = params.get("dtype", "float32")
        if dtype_name not in _DTYPES:
            raise ValueError(f"granite_speech5_mel: dtype={dtype_name!r} is not one of {sorted(_DTYPES)}")
        kwargs = {k: params[k] for k in PARAM_KEYS if k in params and k != "dtype"}
        return cls(sampling_rate=spec.sampling_rate, dtype=_DTYPES[dtype_name], **kwargs)

    def num_frames(self, num_samples: int) -> int:
        """Feature frames of a waveform of ``num_samples`` samples."""
        return -(-(num_samples // self.hop_length) // FRAME_STACKING)

    def log_mel(self, waveform: np.ndarray | torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The floored, scaled log-mel frames (before deltas and stacking).

        Shapes:
            waveform: (samples,) -> (M, n_mels), M = samples // hop rounded up to even
        """
        dtype = self.dtype if dtype is None else dtype
        x = torch.as_tensor(waveform).to(torch.float32).to(dtype)
        if x.ndim != 1:
            raise ValueError(f"GraniteSpeech5Frontend expects a mono waveform (samples,), got shape {tuple(x.shape)}")
        m = FRAME_STACKING * self.num_frames(x.shape[0])
        if m == 0:
            return x.new_zeros(0, self.n_mels)
        need = (m - 1) * self.hop_length + 1  # samples whose centred frames reach frame m - 1
        if x.shape[0] < need:
            x = F.pad(x, (0, need - x.shape[0]))
        window = torch.hann_window(self.win_length, periodic=True, dtype=dtype, device=x.device)
        spec = torch.stft(
            x,
            self.n_fft,
            hop_length=self.hop_length,
            win_length=self.win_length,
            window=window,
            center=True,
            pad_mode="reflect",
            return_complex=True,
        )  # (n_fft // 2 + 1, frames)
        power = spec[:, :m].abs().square().transpose(0, 1)  # (M, n_freqs)
        filters = htk_mel_filters(self.n_mels, self.n_fft, self.sampling_rate).to(x.device, dtype)
        mel = (power @ filters).clamp_min(1e-10).log10()  # (M, n_mels)
        return torch.maximum(mel, mel.max() - self.logmel_floor_db) / 4 + 1

    def deltas(self, mel: torch.Tensor) -> torch.Tensor:
        """Regression deltas along time, edge frames repeated (torchaudio's ``compute_deltas``).

        Shapes:
            mel: (M, n_mels) -> (M, n_mels)
        """
        n = (self.delta_win_length - 1) // 2
        padded = F.pad(mel.T[None], (n, n), mode="replicate")[0]  # (n_mels, M + 2n)
        m = mel.shape[0]
        out = sum(i * (padded[:, n + i : n + i + m] - padded[:, n - i : n - i + m]) for i in range(1, n + 1))
        return (out / (2 * sum(i * i for i in range(1, n + 1)))).T

    def features(self, waveform: np.ndarray | torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The encoder's input in the compute dtype (``dtype`` overrides the front end's).

        Shapes:
            waveform: (samples,) -> (M / 2, 4 * n_mels)
        """
        mel = self.log_mel(waveform, dtype)
        feats = torch.cat((mel, self.deltas(mel)), dim=-1)  # (M, 2 n_mels)
        return feats.reshape(-1, self.n_features)  # two consecutive frames side by side

    def __call__(self, waveform: np.ndarray | torch.Tensor) -> torch.Tensor:
        return self.features(waveform).to(torch.float32)


__all__ = ["GraniteSpeech5Frontend"]
