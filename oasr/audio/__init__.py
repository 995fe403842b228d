"""Audio front end: decoding any container or array to 16 kHz float32 mono
(:mod:`oasr.audio.io`) and Whisper log-mel features in torch (:mod:`oasr.audio.features`)."""

from oasr.audio.features import (
    HOP_LENGTH,
    N_FFT,
    N_SAMPLES,
    log_mel_batch,
    log_mel_spectrogram,
    mel_filters,
)
from oasr.audio.io import SAMPLE_RATE, AudioDecodeError, AudioSource, AudioTooLong, iter_audio, load_audio
from oasr.audio.stream import FeatureSource, InMemoryMel, SpooledMel, features_from

__all__ = [
    "HOP_LENGTH",
    "N_FFT",
    "N_SAMPLES",
    "SAMPLE_RATE",
    "AudioDecodeError",
    "AudioTooLong",
    "AudioSource",
    "FeatureSource",
    "InMemoryMel",
    "SpooledMel",
    "features_from",
    "iter_audio",
    "load_audio",
    "log_mel_batch",
    "log_mel_spectrogram",
    "mel_filters",
]
