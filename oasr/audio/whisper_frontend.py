"""The ``whisper_mel`` front end: Whisper's log-mel (``oasr.audio.features``) as a
``Frontend``, the one Whisper log-mel front end of every family that reads it: Whisper's
long-form matrix (:meth:`WhisperMelFrontend.long_form`, served a 30-s window at a time by
``oasr.audio.stream``) and the speech-LLM families' per-clip features.

Two padding conventions of the transformers feature extractors, chosen by
``pad_to_chunk``:

* ``True`` (``WhisperFeatureExtractor`` as the Qwen2-Audio processor calls it): the
  clip is cut to ``chunk_length`` seconds and zero-padded to it, the log-mel is taken
  over the whole padded window (its clamp-to-max reads the padding too) and the
  valid frames are ``ceil(samples / hop_length)`` (the extractor's attention mask);
* ``False`` (the Qwen3-ASR extractor on one clip): the log-mel of the clip alone,
  ``samples // hop_length`` frames, all valid.

``pad_to_multiple`` (the Voxtral processor: ``pad_to_multiple_of`` one window, no
truncation) zero-pads the clip to a whole number of ``chunk_length`` windows (at least
one) and takes the log-mel over the padded clip; every frame counts as valid.

Each utterance is featurised alone, so a request's features do not depend on what
it is batched with (on a batch of one this equals the reference extractor).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from oasr.audio.features import CHUNK_LENGTH, HOP_LENGTH, N_FFT, log_mel_batch, log_mel_spectrogram
from oasr.audio.frontends import Frontend
from oasr.audio.io import AudioSource
from oasr.audio.stream import FeatureSource, features_from
from oasr.specs import FeatureSpec

_PARAMS = ("n_mels", "n_fft", "hop_length", "chunk_length", "pad_to_chunk", "pad_to_multiple", "min_length")


class WhisperMelFrontend(Frontend):
    """Waveform -> Whisper log-mel frames ``(T, n_mels)``.

    Args:
        n_mels: mel bands (80 or 128).
        n_fft, hop_length: STFT size and hop, in samples.
        chunk_length: seconds in one window (``pad_to_chunk``).
        sampling_rate: input rate in Hz.
        pad_to_chunk: cut / zero-pad every clip to one ``chunk_length`` window.
        pad_to_multiple: zero-pad every clip to a whole number of windows (never cut).
        min_length: clips shorter than this many samples are zero-padded to it first
            (the Qwen3-ASR extractor's 8000); the padding counts as valid frames.
    """

    def __init__(
        self,
        n_mels: int = 80,
        n_fft: int = N_FFT,
        hop_length: int = HOP_LENGTH,
        chunk_length: int = CHUNK_LENGTH,
        sampling_rate: int = 16000,
        pad_to_chunk: bool = False,
        min_length: int = 0,
        pad_to_multiple: bool = False,
    ) -> None:
        if n_mels < 1 or n_fft < 2 or hop_length < 1 or chunk_length < 1 or min_length < 0:
            raise ValueError(
                f"whisper_mel: bad parameters n_mels={n_mels}, n_fft={n_fft}, hop_length={hop_length}, "
                f"chunk_length={chunk_length}, min_length={min_length}"
            )
        self.n_mels = self.n_features = int(n_mels)
        self.n_fft = int(n_fft)
        self.hop_length = int(hop_length)
        self.chunk_length = int(chunk_length)
        self.sampling_rate = int(sampling_rate)
        self.frame_shift_s = self.hop_length / self.sampling_rate
        self.pad_to_chunk = bool(pad_to_chunk)
        self.pad_to_multiple = bool(pad_to_multiple)
        if self.pad_to_chunk and self.pad_to_multiple:
            raise ValueError("whisper_mel: pad_to_chunk and pad_to_multiple exclude each other")
        self.min_length = int(min_length)

    @classmethod
    def from_spec(cls, spec: FeatureSpec) -> WhisperMelFrontend:
        params = dict(spec.params)
        unknown = sorted(set(params) - set(_PARAMS))
        if unknown:
            raise ValueError(f"whisper_mel: unknown parameter(s) {unknown}; known: {list(_PARAMS)}")
        return cls(sampling_rate=spec.sampling_rate, **params)

    @property
    def n_samples(self) -> int:
        """Samples in one ``chunk_length`` window."""
        return self.chunk_length * self.sampling_rate

    @property
    def max_duration_s(self) -> float | None:
        """The longest clip the front end represents whole (``pad_to_chunk``), else None."""
        return float(self.chunk_length) if self.pad_to_chunk else None

    def _prepared(self, waveform: np.ndarray | torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(
            np.asarray(waveform, dtype=np.float32) if not isinstance(waveform, torch.Tensor) else waveform
        )
        if x.dim() != 1:
            raise ValueError(f"whisper_mel expects a 1-D waveform, got shape {tuple(x.shape)}")
        if x.shape[0] < self.min_length:
            x = torch.nn.functional.pad(x, (0, self.min_length - x.shape[0]))
        return x

    def _padded_length(self, n_samples: int) -> int:
        """``pad_to_multiple``: the samples of the whole windows that hold the clip."""
        return max(1, math.ceil(n_samples / self.n_samples)) * self.n_samples

    def valid_frames(self, n_samples: int) -> int:
        """Valid feature frames of a clip of ``n_samples`` samples (the reference's attention mask)."""
        n = max(int(n_samples), self.min_length)
        if self.pad_to_multiple:
            return self._padded_length(n) // self.hop_length
        if self.pad_to_chunk:
            return min(math.ceil(n / self.hop_length), self.n_samples // self.hop_length)
        return n // self.hop_length

    def __call__(self, waveform: np.ndarray) -> torch.Tensor:
        """Features of one clip: (T, n_mels) float32 (T = the whole window with ``pad_to_chunk``)."""
        x = self._prepared(waveform).to(torch.float32)
        common = dict(n_fft=self.n_fft, hop_length=self.hop_length, sampling_rate=self.sampling_rate)
        if self.pad_to_chunk:
            mel = log_mel_batch([x], self.n_mels, self.n_samples, **common)[0]
        elif self.pad_to_multiple:
            mel = log_mel_batch([x], self.n_mels, self._padded_length(x.shape[0]), **common)[0]
        else:
            mel = log_mel_spectrogram(x, self.n_mels, **common)
        return mel.T.contiguous()

    def long_form(
        self,
        source: AudioSource,
        *,
        device: torch.device | str = "cpu",
        max_duration_s: float | None = None,
        **kwargs,
    ) -> FeatureSource:
        """Whisper's long-form features of a whole recording (faster-whisper's matrix: the
        log-mel of the audio plus one hop of zeros, clamped with the recording's own maximum),
        read a window at a time; see ``oasr.audio.stream.features_from`` (``kwargs``: its
        spooling options).

        Raises:
            ValueError: an STFT other than Whisper's (n_fft 400, hop 160), which the streamed
                computation is built on.
        """
        if (self.n_fft, self.hop_length) != (N_FFT, HOP_LENGTH):
            raise ValueError(
                f"whisper_mel: long-form features need n_fft={N_FFT}, hop_length={HOP_LENGTH}; "
                f"this front end has n_fft={self.n_fft}, hop_length={self.hop_length}"
            )
        return features_from(
            source,
            self.n_mels,
            sampling_rate=self.sampling_rate,
            device=device,
            max_duration_s=max_duration_s,
            **kwargs,
        )

    def compute_batch(self, waveforms: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero-padded features and their valid frames.

        Shapes:
            -> feats (B, T_max, n_mels), lens (B,) int64
        """
        if not waveforms:
            raise ValueError("compute_batch needs at least one waveform")
        feats = [self(w) for w in waveforms]
        lens = torch.tensor([self.valid_frames(len(w)) for w in waveforms], dtype=torch.long)
        out = feats[0].new_zeros(len(feats), max(f.shape[0] for f in feats), self.n_mels)
        for i, f in enumerate(feats):
            out[i, : f.shape[0]] = f
        return out, lens


__all__ = ["WhisperMelFrontend"]
