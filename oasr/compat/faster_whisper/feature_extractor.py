"""faster-whisper's ``FeatureExtractor`` on oasr's Whisper log-mel (``oasr.audio.features``)."""

from __future__ import annotations

import numpy as np

__all__ = ["FeatureExtractor"]


class FeatureExtractor:
    """Whisper's log-mel features, with faster-whisper's attributes.

    Args:
        feature_size: mel bands (80; 128 for large-v3).
        sampling_rate, hop_length, chunk_length, n_fft: Whisper's framing.
    """

    def __init__(
        self,
        feature_size: int = 80,
        sampling_rate: int = 16000,
        hop_length: int = 160,
        chunk_length: int = 30,
        n_fft: int = 400,
    ) -> None:
        self.n_fft = n_fft
        self.hop_length = hop_length
        self.chunk_length = chunk_length
        self.n_samples = chunk_length * sampling_rate
        self.nb_max_frames = self.n_samples // hop_length
        self.time_per_frame = hop_length / sampling_rate
        self.sampling_rate = sampling_rate
        self.feature_size = feature_size

    def __call__(self, waveform: np.ndarray, padding: int = 160, chunk_length: int | None = None) -> np.ndarray:
        """``(feature_size, frames)`` float32 log-mel of ``waveform`` with ``padding`` zero samples appended.

        Shapes:
            waveform: (n,) -> (feature_size, (n + padding) // hop_length)
        """
        from oasr.audio.features import log_mel_spectrogram

        if chunk_length is not None:
            self.n_samples = chunk_length * self.sampling_rate
            self.nb_max_frames = self.n_samples // self.hop_length
        mel = log_mel_spectrogram(
            np.asarray(waveform, dtype=np.float32),
            self.feature_size,
            padding=padding,
            n_fft=self.n_fft,
            hop_length=self.hop_length,
            sampling_rate=self.sampling_rate,
        )
        return mel.numpy()
