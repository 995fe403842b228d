"""Kaldi-compatible log-mel filterbank features, as WeNet computes them.

WeNet calls ``torchaudio.compliance.kaldi.fbank`` on the waveform scaled to the
int16 range; this is the same recipe in plain torch (no torchaudio):

    frames of ``frame_length`` ms every ``frame_shift`` ms, the last partial frame
    dropped (kaldi's ``snip_edges``) -> remove each frame's DC offset -> pre-emphasis
    (0.97, the first sample against itself) -> window (povey = Hann ** 0.85) ->
    zero-pad to a power of two -> |rFFT|^2 -> triangular filters on kaldi's mel scale
    (1127 ln(1 + f / 700)) between ``low_freq`` and ``high_freq`` -> ln(max(e, eps))

with ``eps`` the float32 machine epsilon whatever the compute dtype, as torchaudio has it.
Filters and window are built in float64 and cast to the compute dtype.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from oasr.audio.frontends import Frontend
from oasr.audio.streaming import Framing
from oasr.specs import FeatureSpec

__all__ = ["KaldiFbank", "kaldi_fbank", "kaldi_mel_banks"]

_EPS = float(torch.finfo(torch.float32).eps)  # torchaudio's floor before the log, in any dtype
_WINDOWS = ("povey", "hanning", "hamming", "rectangular", "blackman")


def _mel(freq: torch.Tensor | float) -> torch.Tensor | float:
    """Kaldi's mel scale."""
    if isinstance(freq, torch.Tensor):
        return 1127.0 * torch.log1p(freq / 700.0)
    return 1127.0 * math.log1p(freq / 700.0)


@functools.lru_cache(maxsize=16)
def _mel_banks_f64(
    num_bins: int, padded_window: int, sampling_rate: float, low_freq: float, high_freq: float
) -> torch.Tensor:
    nyquist = 0.5 * sampling_rate
    if high_freq <= 0.0:
        high_freq += nyquist
    if not (0.0 <= low_freq < nyquist and 0.0 < high_freq <= nyquist and low_freq < high_freq):
        raise ValueError(
            f"bad mel range: low_freq={low_freq}, high_freq={high_freq} for a sampling rate of {sampling_rate}"
        )
    n_fft_bins = padded_window // 2
    mel_low, mel_high = _mel(low_freq), _mel(high_freq)
    delta = (mel_high - mel_low) / (num_bins + 1)
    b = torch.arange(num_bins, dtype=torch.float64)[:, None]
    left, center, right = mel_low + b * delta, mel_low + (b + 1) * delta, mel_low + (b + 2) * delta
    mel = _mel(torch.arange(n_fft_bins, dtype=torch.float64) * (sampling_rate / padded_window))[None, :]
    up = (mel - left) / (center - left)
    down = (right - mel) / (right - center)
    banks = torch.clamp(torch.minimum(up, down), min=0.0)  # (num_bins, n_fft_bins)
    # The Nyquist bin gets no weight (kaldi's filters stop one bin short of it).
    return torch.nn.functional.pad(banks, (0, 1))


def kaldi_mel_banks(
    num_bins: int,
    padded_window: int,
    sampling_rate: float,
    low_freq: float = 20.0,
    high_freq: float = 0.0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Kaldi's triangular mel filters over the rFFT bins.

    Args:
        high_freq: upper edge in Hz; ``<= 0`` counts down from the Nyquist frequency.

    Shapes:
        -> (num_bins, padded_window // 2 + 1)
    """
    banks = _mel_banks_f64(num_bins, padded_window, float(sampling_rate), float(low_freq), float(high_freq))
    return banks.to(device=device, dtype=dtype)


@functools.lru_cache(maxsize=8)
def htk_mel_filters(n_mels: int, n_fft: int, sampling_rate: int) -> torch.Tensor:
    """Triangular filters on the HTK mel scale (``2595 log10(1 + f / 700)``) from 0 Hz to
    Nyquist, unnormalised, in float64 (torchaudio's ``melscale_fbanks`` default): both Granite
    Speech front ends'.

    Shapes:
        -> (n_fft // 2 + 1, n_mels)
    """
    f64 = torch.float64
    freqs = torch.linspace(0, sampling_rate // 2, n_fft // 2 + 1, dtype=f64)
    top = 2595.0 * math.log10(1.0 + (sampling_rate / 2) / 700.0)
    hz = 700.0 * (10.0 ** (torch.linspace(0.0, top, n_mels + 2, dtype=f64) / 2595.0) - 1.0)
    widths = hz[1:] - hz[:-1]
    slopes = hz[None, :] - freqs[:, None]  # (n_freqs, n_mels + 2)
    rising = -slopes[:, :-2] / widths[:-1]
    falling = slopes[:, 2:] / widths[1:]
    return torch.clamp(torch.minimum(rising, falling), min=0.0)


@functools.lru_cache(maxsize=16)
def _window_f64(kind: str, length: int, blackman_coeff: float) -> torch.Tensor:
    n = torch.arange(length, dtype=torch.float64)
    a = 2 * math.pi / (length - 1) if length > 1 else 0.0
    if kind == "povey":
        return (0.5 - 0.5 * torch.cos(a * n)).pow(0.85)
    if kind == "hanning":
        return 0.5 - 0.5 * torch.cos(a * n)
    if kind == "hamming":
        return 0.54 - 0.46 * torch.cos(a * n)
    if kind == "rectangular":
        return torch.ones(length, dtype=torch.float64)
    if kind == "blackman":
        return blackman_coeff - 0.5 * torch.cos(a * n) + (0.5 - blackman_coeff) * torch.cos(2 * a * n)
    raise ValueError(f"unknown window_type {kind!r}; expected one of {_WINDOWS}")


def kaldi_fbank(
    waveform: torch.Tensor,
    *,
    sampling_rate: int = 16000,
    num_mel_bins: int = 80,
    frame_length_ms: float = 25.0,
    frame_shift_ms: float = 10.0,
    dither: float = 0.0,
    preemphasis: float = 0.97,
    remove_dc_offset: bool = True,
    window_type: str = "povey",
    blackman_coeff: float = 0.42,
    round_to_power_of_two: bool = True,
    low_freq: float = 20.0,
    high_freq: float = 0.0,
    waveform_scale: float = 32768.0,
    snip_edges: bool = True,
    dtype: torch.dtype = torch.float32,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Log mel filterbank energies of one mono waveform.

    Args:
        waveform: samples in [-1, 1] (scaled by ``waveform_scale`` first: WeNet's int16 range).
        dither: standard deviation of Gaussian noise added to each frame (0 for inference).
        snip_edges: kaldi's framing: True keeps whole windows only; False centres frame t on
            sample t * shift + shift // 2 and mirrors the signal past both ends (icefall / lhotse).
        dtype: compute dtype (float64 for reference comparisons).

    Shapes:
        waveform: (samples,) -> (frames, num_mel_bins) in ``dtype``; frames = 1 + (samples - window)
        // shift (0 when shorter than a window) with ``snip_edges``, else (samples + shift // 2) // shift.
    """
    if waveform.dim() != 1:
        raise ValueError(f"kaldi_fbank expects a mono (samples,) waveform, got shape {tuple(waveform.shape)}")
    window = int(sampling_rate * frame_length_ms * 0.001)
    shift = int(sampling_rate * frame_shift_ms * 0.001)
    if window < 2 or shift < 1:
        raise ValueError(f"frame_length {frame_length_ms} ms / frame_shift {frame_shift_ms} ms are too short")
    padded = 1 << (window - 1).bit_length() if round_to_power_of_two else window
    x = waveform.to(dtype) * waveform_scale
    if snip_edges:
        if x.shape[0] < window:
            return x.new_zeros(0, num_mel_bins)
        frames = x.unfold(0, window, shift)  # (T, window)
    else:
        frames = _centred_frames(x, window, shift)
        if frames.shape[0] == 0:
            return x.new_zeros(0, num_mel_bins)
    if dither != 0.0:
        noise = torch.randn(frames.shape, generator=generator, dtype=dtype, device=frames.device)
        frames = frames + dither * noise
    if remove_dc_offset:
        frames = frames - frames.mean(dim=1, keepdim=True)
    if preemphasis != 0.0:
        previous = torch.cat([frames[:, :1], frames[:, :-1]], dim=1)  # the first sample is its own predecessor
        frames = frames - preemphasis * previous
    frames = frames * _window_f64(window_type, window, float(blackman_coeff)).to(device=frames.device, dtype=dtype)
    spectrum = torch.fft.rfft(frames, n=padded).abs().pow(2)  # (T, padded // 2 + 1)
    banks = kaldi_mel_banks(num_mel_bins, padded, sampling_rate, low_freq, high_freq, dtype=dtype, device=x.device)
    energies = spectrum @ banks.T  # (T, num_mel_bins)
    return energies.clamp(min=_EPS).log()


def _centred_frames(x: torch.Tensor, window: int, shift: int) -> torch.Tensor:
    """Kaldi's ``snip_edges=false`` frames: frame t starts at t * shift + shift // 2 - window // 2;
    samples before 0 or past the end are mirrored (-1 -> 0, n -> n - 1), repeatedly for a
    signal shorter than the overhang. -> (T, window)"""
    n = x.shape[0]
    t = (n + shift // 2) // shift if n else 0
    if t == 0:
        return x.new_zeros(0, window)
    idx = (torch.arange(t, device=x.device) * shift + (shift // 2 - window // 2))[:, None] + torch.arange(
        window, device=x.device
    )
    while bool(((idx < 0) | (idx >= n)).any()):
        idx = torch.where(idx < 0, -idx - 1, idx)
        idx = torch.where(idx >= n, 2 * n - 1 - idx, idx)
    return x[idx]


# FeatureSpec params this front end reads (WeNet's ``dataset_conf.fbank_conf`` names), with defaults.
_PARAMS: dict[str, Any] = {
    "num_mel_bins": 80,
    "frame_length": 25.0,
    "frame_shift": 10.0,
    "dither": 0.0,
    "window_type": "povey",
    "preemphasis": 0.97,
    "remove_dc_offset": True,
    "low_freq": 20.0,
    "high_freq": 0.0,
    "blackman_coeff": 0.42,
    "round_to_power_of_two": True,
    "energy_floor": 0.0,
    "snip_edges": True,
    "waveform_scale": 32768.0,
}

# Kaldi options with a single supported value (anything else is another feature).
_FIXED = {"energy_floor": 0.0}


class KaldiFbank(Frontend):
    """WeNet's front end: kaldi fbank of the int16-scaled waveform.

    Args:
        num_mel_bins: filters (features per frame).
        frame_length / frame_shift: in milliseconds.
        dither: Gaussian dither (WeNet decodes with 0).
        dtype: compute dtype of ``compute``; ``__call__`` always returns float32.
        others: kaldi's options of the same names.
    """

    def __init__(
        self,
        num_mel_bins: int = 80,
        frame_length: float = 25.0,
        frame_shift: float = 10.0,
        dither: float = 0.0,
        *,
        sampling_rate: int = 16000,
        window_type: str = "povey",
        preemphasis: float = 0.97,
        remove_dc_offset: bool = True,
        low_freq: float = 20.0,
        high_freq: float = 0.0,
        blackman_coeff: float = 0.42,
        round_to_power_of_two: bool = True,
        waveform_scale: float = 32768.0,
        snip_edges: bool = True,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        if window_type not in _WINDOWS:
            raise ValueError(f"unknown window_type {window_type!r}; expected one of {_WINDOWS}")
        self.num_mel_bins = int(num_mel_bins)
        self.frame_length = float(frame_length)
        self.frame_shift = float(frame_shift)
        self.dither = float(dither)
        self.sampling_rate = int(sampling_rate)
        self.window_type = window_type
        self.preemphasis = float(preemphasis)
        self.remove_dc_offset = bool(remove_dc_offset)
        self.low_freq = float(low_freq)
        self.high_freq = float(high_freq)
        self.blackman_coeff = float(blackman_coeff)
        self.round_to_power_of_two = bool(round_to_power_of_two)
        self.waveform_scale = float(waveform_scale)
        self.snip_edges = bool(snip_edges)
        self.dtype = dtype
        self.device = device
        self.n_features = self.num_mel_bins
        self.frame_shift_s = int(self.sampling_rate * self.frame_shift * 0.001) / self.sampling_rate
        window = int(self.sampling_rate * self.frame_length * 0.001)
        shift = int(self.sampling_rate * self.frame_shift * 0.001)
        self._window, self._shift = window, shift
        # Kaldi's pre-emphasis and DC removal stay inside each frame: a frame reads its window only.
        self.framing = Framing(length=window, hop=shift, left_pad=0 if self.snip_edges else window // 2 - shift // 2)

    def num_frames(self, n_samples: int) -> int:
        """Frames ``n_samples`` samples give (kaldi's count, with or without ``snip_edges``)."""
        if self.snip_edges:
            return 0 if n_samples < self._window else 1 + (n_samples - self._window) // self._shift
        return (n_samples + self._shift // 2) // self._shift if n_samples else 0

    @classmethod
    def from_spec(cls, spec: FeatureSpec) -> KaldiFbank:
        """Build from ``FeatureSpec(kind="kaldi_fbank", params=...)`` (WeNet ``fbank_conf`` names).

        Raises:
            ValueError: another kind, an unknown param, or a kaldi option this front end does not implement.
        """
        if spec.kind != "kaldi_fbank":
            raise ValueError(f"KaldiFbank reads FeatureSpec kind 'kaldi_fbank', not {spec.kind!r}")
        params = dict(spec.params)
        unknown = sorted(set(params) - set(_PARAMS))
        if unknown:
            raise ValueError(f"kaldi_fbank: unknown param(s) {unknown}; known: {sorted(_PARAMS)}")
        for key, want in _FIXED.items():
            if key in params and params.pop(key) != want:
                raise ValueError(f"kaldi_fbank: {key}={spec.params[key]!r} is not supported (only {want!r})")
        return cls(sampling_rate=spec.sampling_rate, **params)

    def to_spec(self) -> FeatureSpec:
        """The ``FeatureSpec`` this front end reproduces."""
        params: Mapping[str, Any] = {
            "num_mel_bins": self.num_mel_bins,
            "frame_length": self.frame_length,
            "frame_shift": self.frame_shift,
            "dither": self.dither,
            "window_type": self.window_type,
            "preemphasis": self.preemphasis,
            "remove_dc_offset": self.remove_dc_offset,
            "low_freq": self.low_freq,
            "high_freq": self.high_freq,
            "blackman_coeff": self.blackman_coeff,
            "round_to_power_of_two": self.round_to_power_of_two,
            "waveform_scale": self.waveform_scale,
            "snip_edges": self.snip_edges,
        }
        return FeatureSpec(kind="kaldi_fbank", sampling_rate=self.sampling_rate, params=dict(params))

    def compute(self, waveform: np.ndarray | torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Features in ``dtype`` (default: the front end's compute dtype).

        Shapes:
            waveform: (samples,) in [-1, 1] -> (T, num_mel_bins)
        """
        x = torch.as_tensor(np.asarray(waveform) if not isinstance(waveform, torch.Tensor) else waveform)
        if self.device is not None:
            x = x.to(self.device)
        return kaldi_fbank(
            x,
            sampling_rate=self.sampling_rate,
            num_mel_bins=self.num_mel_bins,
            frame_length_ms=self.frame_length,
            frame_shift_ms=self.frame_shift,
            dither=self.dither,
            preemphasis=self.preemphasis,
            remove_dc_offset=self.remove_dc_offset,
            window_type=self.window_type,
            blackman_coeff=self.blackman_coeff,
            round_to_power_of_two=self.round_to_power_of_two,
            low_freq=self.low_freq,
            high_freq=self.high_freq,
            waveform_scale=self.waveform_scale,
            snip_edges=self.snip_edges,
            dtype=self.dtype if dtype is None else dtype,
        )

    def __call__(self, waveform: np.ndarray) -> torch.Tensor:
        return self.compute(waveform).float()

    def __repr__(self) -> str:
        return (
            f"KaldiFbank(num_mel_bins={self.num_mel_bins}, frame_length={self.frame_length}, "
            f"frame_shift={self.frame_shift}, window_type={self.window_type!r}, dither={self.dither})"
        )
