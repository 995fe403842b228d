"""Parakeet's log-mel front end (NeMo ``AudioToMelSpectrogramPreprocessor`` as the
Hugging Face ``ParakeetFeatureExtractor`` computes it), in torch.

    preemphasis (x[t] - 0.97 x[t-1], first sample kept) -> STFT (n_fft 512, hop 160,
    symmetric Hann of 400 centred in the frame, center=True with zero padding)
    -> |X|^2 -> Slaney mel filters -> log(mel + 2^-24)
    -> per utterance and per mel bin: (x - mean) / (std + 1e-5) over the valid frames,
       std with the n - 1 denominator

An utterance of ``N`` samples has ``(N + 2 * (n_fft // 2) - n_fft) // hop_length`` valid
frames (``N // hop`` for an even ``n_fft``): the final centred STFT frame is not one of
them. Statistics and outputs cover the valid frames only, so a padded batch gives each
row exactly what it gets alone.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from oasr.audio.features import mel_filters
from oasr.audio.frontends import Frontend
from oasr.audio.streaming import Framing
from oasr.models.base import FeatureSpec

LOG_GUARD = 2.0**-24  # added to the mel energies before the log
NORM_EPS = 1e-5  # added to the per-bin standard deviation

# FeatureSpec.params keys this front end reads (Hugging Face preprocessor_config.json names).
PARAM_KEYS = ("feature_size", "hop_length", "n_fft", "win_length", "preemphasis")
# Keys a spec may add: ``normalize`` False skips the per-utterance normalisation (the
# Nemotron streaming front end, which transformers never normalises).
OPTIONAL_PARAM_KEYS = ("normalize",)


@functools.lru_cache(maxsize=8)
def _window(win_length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.hann_window(win_length, periodic=False, device=device, dtype=dtype)


class ParakeetFrontend(Frontend):
    """Waveform -> normalised log-mel frames for a Parakeet checkpoint.

    Args:
        feature_size: mel bins (80, or 128 on some releases).
        sampling_rate: input rate in Hz.
        hop_length: samples between frames.
        n_fft: FFT size.
        win_length: Hann window length, centred in the ``n_fft`` frame.
        preemphasis: preemphasis coefficient, or None for none.
        normalize: per-utterance, per-bin mean / std normalisation (False: raw log-mel,
            zero past each row's frames).
        dtype: computation and output dtype: float32 (serving) or float64 (reference checks).
    """

    def __init__(
        self,
        *,
        feature_size: int = 80,
        sampling_rate: int = 16000,
        hop_length: int = 160,
        n_fft: int = 512,
        win_length: int = 400,
        preemphasis: float | None = 0.97,
        normalize: bool = True,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if win_length > n_fft:
            raise ValueError(f"win_length={win_length} is longer than n_fft={n_fft}")
        if min(feature_size, sampling_rate, hop_length, n_fft, win_length) <= 0:
            raise ValueError("feature_size, sampling_rate, hop_length, n_fft and win_length must be positive")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
        self.n_features = int(feature_size)
        self.sampling_rate = int(sampling_rate)
        self.hop_length = int(hop_length)
        self.n_fft = int(n_fft)
        self.win_length = int(win_length)
        self.preemphasis = None if preemphasis is None else float(preemphasis)
        self.normalize = bool(normalize)
        self.frame_shift_s = self.hop_length / self.sampling_rate
        self.dtype = dtype
        # Without the whole-utterance normalisation a frame reads only its centred n_fft samples
        # (and the one before them, for the preemphasis): the front end can run on a live stream.
        self.framing = (
            None
            if self.normalize
            else Framing(
                length=self.n_fft,
                hop=self.hop_length,
                left_pad=self.n_fft // 2,
                history=int(self.preemphasis is not None),
            )
        )

    @classmethod
    def from_spec(cls, spec: FeatureSpec, dtype: torch.dtype = torch.float32) -> ParakeetFrontend:
        """Build from a ``FeatureSpec(kind="parakeet_mel")`` whose params use the
        ``preprocessor_config.json`` names (``feature_size``, ``hop_length``, ``n_fft``,
        ``win_length``, ``preemphasis``).

        Raises:
            ValueError: another kind, an unknown param or a bad value.
        """
        if spec.kind != "parakeet_mel":
            raise ValueError(f"ParakeetFrontend reads FeatureSpec kind 'parakeet_mel', not {spec.kind!r}")
        return cls(sampling_rate=spec.sampling_rate, dtype=dtype, **_checked_params(spec.params))

    def num_frames(self, num_samples: int | torch.Tensor) -> int | torch.Tensor:
        """Valid feature frames of an utterance of ``num_samples`` samples."""
        return (num_samples + 2 * (self.n_fft // 2) - self.n_fft) // self.hop_length

    def __call__(self, waveform: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Features of one utterance.

        Shapes:
            waveform: (samples,) mono at ``sampling_rate`` -> (frames, feature_size) in ``dtype``
        """
        x = _as_tensor(waveform, self.dtype)
        if x.ndim != 1:
            raise ValueError(f"expected a 1-D mono waveform, got shape {tuple(x.shape)}")
        feats, _ = self.features(x[None], torch.tensor([x.shape[0]], device=x.device))
        return feats[0]

    def compute_batch(self, waveforms: Sequence[np.ndarray | torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero-padded features of several utterances, computed as one padded batch.

        Shapes:
            -> feats (B, T_max, feature_size), lens (B,) int64
        """
        if not waveforms:
            raise ValueError("compute_batch needs at least one waveform")
        rows = [_as_tensor(w, self.dtype) for w in waveforms]
        for r in rows:
            if r.ndim != 1:
                raise ValueError(f"expected 1-D mono waveforms, got shape {tuple(r.shape)}")
        lengths = torch.tensor([r.shape[0] for r in rows], device=rows[0].device)
        batch = rows[0].new_zeros(len(rows), int(lengths.max()))
        for i, r in enumerate(rows):
            batch[i, : r.shape[0]] = r
        return self.features(batch, lengths)

    def features(self, waveforms: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features of a zero-padded batch of waveforms.

        Shapes:
            waveforms: (B, N), lengths: (B,) samples per row
            -> feats (B, T, feature_size) with T = max valid frames (zero past each row's
               count), frame counts (B,) int64
        """
        x = waveforms.to(self.dtype)
        lengths = lengths.to(device=x.device, dtype=torch.long)
        n_frames = self.num_frames(lengths).clamp(min=0)
        t_out = int(n_frames.max()) if n_frames.numel() else 0
        if x.shape[-1] == 0 or t_out == 0:
            return x.new_zeros(x.shape[0], t_out, self.n_features), n_frames
        in_row = torch.arange(x.shape[-1], device=x.device)[None, :] < lengths[:, None]
        if self.preemphasis is not None:
            x = torch.cat((x[:, :1], x[:, 1:] - self.preemphasis * x[:, :-1]), dim=1)
        x = x * in_row  # nothing past a row's end reaches its frames (preemphasis included)
        spec = torch.stft(
            x,
            self.n_fft,
            hop_length=self.hop_length,
            win_length=self.win_length,
            window=_window(self.win_length, x.device, x.dtype),
            center=True,
            pad_mode="constant",
            return_complex=True,
        )  # (B, n_fft // 2 + 1, frames)
        power = spec[..., :t_out].abs().pow(2)
        fb = mel_filters(self.n_features, self.n_fft, self.sampling_rate, x.device, x.dtype)  # (F, n_fft // 2 + 1)
        logmel = torch.log(torch.matmul(fb, power) + LOG_GUARD).transpose(1, 2)  # (B, T, F)
        valid = (torch.arange(t_out, device=x.device)[None, :] < n_frames[:, None])[..., None]  # (B, T, 1)
        if not self.normalize:
            return logmel * valid, n_frames
        count = n_frames.to(x.dtype)[:, None, None]
        mean = (logmel * valid).sum(dim=1, keepdim=True) / count.clamp(min=1)
        centred = (logmel - mean) * valid
        # A single valid frame has no spread: NeMo's n - 1 denominator is clamped to 1 there.
        std = ((centred**2).sum(dim=1, keepdim=True) / (count - 1).clamp(min=1)).sqrt()
        return centred / (std + NORM_EPS), n_frames


def _as_tensor(waveform: np.ndarray | torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    t = waveform if isinstance(waveform, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(waveform))
    return t.to(dtype)


def _checked_params(params: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(params) - set(PARAM_KEYS) - set(OPTIONAL_PARAM_KEYS))
    if unknown:
        known = [*PARAM_KEYS, *OPTIONAL_PARAM_KEYS]
        raise ValueError(f"parakeet_mel: unknown feature param(s) {unknown}; known: {known}")
    return dict(params)


__all__ = ["ParakeetFrontend"]
