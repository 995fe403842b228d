"""LASR's log-mel front end, as Hugging Face's ``LasrFeatureExtractor`` derives it.

    frames = unfold(waveform, win_length, hop_length)         # not centred, no padding:
                                                              # T = (samples - win) // hop + 1
    power = |rfft(symmetric_hann(win_length) * frames, n_fft)|^2   # each frame zero-padded to n_fft
    log_mel = log(clamp(power @ M, min=1e-5))

``M`` is the (n_fft // 2 + 1, n_mels) triangular bank on the Kaldi mel scale
(``1127 ln(1 + f / 700)``) from 125 Hz to 7500 Hz, with the DC bin left out (HTK style)
and no area normalisation. The reference runs in float64; ``dtype=torch.float32``
is the faster path (the bank is still built in float64, then cast).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from oasr.audio.frontends import Frontend
from oasr.models.base import FeatureSpec

_DTYPES = {"float64": torch.float64, "float32": torch.float32}


def _kaldi_mel(hz: np.ndarray | float) -> np.ndarray | float:
    return 1127.0 * np.log(1.0 + np.asarray(hz, dtype=np.float64) / 700.0)


def lasr_mel_filters(n_mels: int, n_fft: int, sampling_rate: int, f_min: float, f_max: float) -> torch.Tensor:
    """The LASR mel bank, float64.

    Triangles are built in mel space over the one-sided FFT bins, the DC bin excluded
    (its row stays zero), unnormalised.

    Shapes:
        -> (n_fft // 2 + 1, n_mels)
    """
    n_bins = n_fft // 2 + 1
    freqs = np.linspace(0.0, sampling_rate / 2.0, n_bins, dtype=np.float64)[1:]
    bin_mels = _kaldi_mel(freqs)[:, None]  # (n_bins - 1, 1)
    edges = np.linspace(_kaldi_mel(f_min), _kaldi_mel(f_max), n_mels + 2, dtype=np.float64)
    lower, centre, upper = edges[None, :-2], edges[None, 1:-1], edges[None, 2:]
    rising = (bin_mels - lower) / (centre - lower)
    falling = (upper - bin_mels) / (upper - centre)
    bank = np.maximum(0.0, np.minimum(rising, falling))
    return torch.from_numpy(np.concatenate([np.zeros((1, n_mels)), bank], axis=0))


class LasrFrontend(Frontend):
    """Waveform -> LASR log-mel frames.

    Args:
        sampling_rate: input rate in Hz.
        n_mels: mel bands (``feature_size`` of the preprocessor config).
        n_fft: FFT size (each windowed frame is zero-padded to it).
        hop_length: samples between frames.
        win_length: samples per frame (and Hann window length).
        f_min, f_max: band edges of the mel bank in Hz.
        dtype: compute dtype (float64 = the reference; float32 = the fast path).

    Shapes:
        waveform: (samples,) -> (T, n_mels) with T = (samples - win_length) // hop_length + 1
    """

    def __init__(
        self,
        *,
        sampling_rate: int = 16000,
        n_mels: int = 128,
        n_fft: int = 512,
        hop_length: int = 160,
        win_length: int = 400,
        f_min: float = 125.0,
        f_max: float = 7500.0,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        if win_length > n_fft:
            raise ValueError(f"win_length={win_length} exceeds n_fft={n_fft}")
        if not 0.0 <= f_min < f_max <= sampling_rate / 2:
            raise ValueError(f"mel band edges ({f_min}, {f_max}) Hz must lie within (0, {sampling_rate / 2}) Hz")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"LasrFrontend computes in float32 or float64, not {dtype}")
        self.sampling_rate = int(sampling_rate)
        self.n_features = int(n_mels)
        self.n_fft = int(n_fft)
        self.hop_length = int(hop_length)
        self.win_length = int(win_length)
        self.frame_shift_s = hop_length / sampling_rate
        self.dtype = dtype
        self._filters64 = lasr_mel_filters(n_mels, n_fft, sampling_rate, f_min, f_max)
        self._window64 = torch.hann_window(win_length, periodic=False, dtype=torch.float64)
        self._cache: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    @classmethod
    def from_spec(cls, spec: FeatureSpec) -> LasrFrontend:
        params: Mapping[str, Any] = dict(spec.params)
        known = {"n_mels", "n_fft", "hop_length", "win_length", "f_min", "f_max", "dtype"}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"lasr_mel: unknown feature parameter(s) {unknown}; known: {sorted(known)}")
        kwargs = {k: params[k] for k in known - {"dtype"} if k in params}
        dtype_name = params.get("dtype", "float64")
        if dtype_name not in _DTYPES:
            raise ValueError(f"lasr_mel: dtype={dtype_name!r} is not one of {sorted(_DTYPES)}")
        return cls(sampling_rate=spec.sampling_rate, dtype=_DTYPES[dtype_name], **kwargs)

    def _constants(self, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        key = (device, dtype)
        if key not in self._cache:
            self._cache[key] = (self._window64.to(device, dtype), self._filters64.to(device, dtype))
        return self._cache[key]

    def num_frames(self, num_samples: int) -> int:
        """Frames of a waveform of ``num_samples`` samples."""
        return max((num_samples - self.win_length) // self.hop_length + 1, 0)

    def log_mel(self, waveform: np.ndarray | torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Log-mel frames in the compute dtype (``dtype`` overrides the front end's).

        The waveform is read as float32 first, as the reference does.

        Shapes:
            waveform: (..., samples) -> (..., T, n_mels)
        """
        dtype = self.dtype if dtype is None else dtype
        x = torch.as_tensor(waveform).to(torch.float32).to(dtype)
        window, filters = self._constants(x.device, dtype)
        if x.shape[-1] < self.win_length:
            return x.new_zeros(*x.shape[:-1], 0, self.n_features)
        frames = x.unfold(-1, self.win_length, self.hop_length)  # (..., T, win)
        power = torch.fft.rfft(frames * window, n=self.n_fft).abs().square()  # (..., T, n_fft // 2 + 1)
        return torch.clamp(power @ filters, min=1e-5).log()

    def __call__(self, waveform: np.ndarray) -> torch.Tensor:
        if np.ndim(waveform) != 1:
            raise ValueError(f"LasrFrontend expects a mono waveform (samples,), got shape {np.shape(waveform)}")
        return self.log_mel(waveform).to(torch.float32)
