"""The ``voxtral_realtime_mel`` front end: a clip padded as ``mistral_common`` pads an offline
transcription request, then ``VoxtralRealtimeFeatureExtractor``'s log-mel (``log_mel``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from oasr.audio.features import mel_filters
from oasr.audio.frontends import Frontend, pad_features
from oasr.specs import FeatureSpec

LOG_MEL_MAX = 1.5  # the feature extractor's global_log_mel_max

_PARAMS = ("n_mels", "n_fft", "hop_length", "token_samples", "left_pad_tokens", "right_pad_tokens")


def log_mel(wave: torch.Tensor, n_mels: int, *, center: bool, hop: int = 160, n_fft: int = 400) -> torch.Tensor:
    """The feature extractor's log-mel: (samples,) -> (n_mels, frames), the last STFT frame dropped.

    ``center`` reflects ``n_fft // 2`` samples at both ends (the first chunk and a whole clip);
    later streaming chunks carry their own left context and are not centred."""
    window = torch.hann_window(n_fft, dtype=wave.dtype, device=wave.device)
    spec = torch.stft(wave, n_fft, hop, window=window, return_complex=True, center=center)
    power = spec[..., :-1].abs() ** 2
    filters = mel_filters(n_mels, n_fft, device=wave.device, dtype=wave.dtype)
    mel = torch.clamp(filters @ power, min=1e-10).log10()
    mel = torch.maximum(mel, torch.tensor(LOG_MEL_MAX - 8.0, dtype=mel.dtype, device=mel.device))
    return (mel + 4.0) / 4.0


class VoxtralRealtimeMelFrontend(Frontend):
    """Waveform -> log-mel frames ``(T, n_mels)``, ``T`` a whole number of audio tokens.

    Args:
        token_samples: samples per audio token (1280: 80 ms).
        left_pad_tokens: tokens of silence before the clip.
        right_pad_tokens: tokens of silence after it (``n_delay + 1 + 10``), after the clip is
            first padded to a whole token.
    """

    def __init__(
        self,
        n_mels: int = 128,
        n_fft: int = 400,
        hop_length: int = 160,
        token_samples: int = 1280,
        left_pad_tokens: int = 32,
        right_pad_tokens: int = 17,
        sampling_rate: int = 16000,
    ) -> None:
        if min(n_mels, n_fft, hop_length, token_samples) < 1 or min(left_pad_tokens, right_pad_tokens) < 0:
            raise ValueError("voxtral_realtime_mel: bad parameters")
        self.n_mels = self.n_features = int(n_mels)
        self.n_fft, self.hop_length = int(n_fft), int(hop_length)
        self.token_samples = int(token_samples)
        self.left, self.right = int(left_pad_tokens), int(right_pad_tokens)
        self.sampling_rate = int(sampling_rate)
        self.frame_shift_s = self.hop_length / self.sampling_rate

    @classmethod
    def from_spec(cls, spec: FeatureSpec) -> VoxtralRealtimeMelFrontend:
        params = dict(spec.params)
        unknown = sorted(set(params) - set(_PARAMS))
        if unknown:
            raise ValueError(f"voxtral_realtime_mel: unknown parameter(s) {unknown}; known: {list(_PARAMS)}")
        return cls(sampling_rate=spec.sampling_rate, **params)

    def _padded(self, waveform: np.ndarray | torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(
            np.asarray(waveform, dtype=np.float32) if not isinstance(waveform, torch.Tensor) else waveform
        )
        if x.dim() != 1:
            raise ValueError(f"voxtral_realtime_mel expects a 1-D waveform, got shape {tuple(x.shape)}")
        per = self.token_samples
        right = (per - x.shape[0] % per) % per + per * self.right
        return torch.nn.functional.pad(x.to(torch.float32), (per * self.left, right))

    def __call__(self, waveform: np.ndarray | torch.Tensor) -> torch.Tensor:
        mel = log_mel(self._padded(waveform), self.n_mels, center=True, hop=self.hop_length, n_fft=self.n_fft)
        return mel.T.contiguous()

    def compute_batch(self, waveforms: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        if not waveforms:
            raise ValueError("compute_batch needs at least one waveform")
        return pad_features([self(w) for w in waveforms])
