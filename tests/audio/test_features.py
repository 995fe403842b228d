"""oasr.audio.features against the reference implementations: transformers'
``WhisperFeatureExtractor`` and ``mel_filter_bank``, and faster-whisper's numpy
``FeatureExtractor``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.audio import (
    N_SAMPLES,
    load_audio,
    log_mel_batch,
    log_mel_spectrogram,
    mel_filters,
)
from oasr.audio.frontends import build_frontend
from oasr.specs import FeatureSpec

transformers = pytest.importorskip("transformers")

# Different rates, codecs and channel counts; the 52-s clip exercises trimming to 30 s.
CLIPS = [
    "jfk.wav",  # 16 kHz wav
    "jfk_openai.flac",  # 44.1 kHz stereo flac
    "1272-128104-0004-8k.wav",  # 8 kHz wav
    "mfa_13697_11991_000000.opus",  # 48 kHz opus in ogg
    "mfa_common_voice_ja_24511055.mp3",  # 32 kHz mp3
    "cosyvoice_zero_shot_prompt.wav",  # 24 kHz float wav
    "mfa_michaelandsickmichael.wav",  # 16 kHz stereo, 52 s
    "1272-141231-0002.flac",  # 16 kHz flac
]


@pytest.fixture(scope="module")
def clips(manifest) -> list[np.ndarray]:
    by_name = {row["audio"]: row["path"] for row in manifest}
    return [load_audio(by_name[name]) for name in CLIPS]


@pytest.fixture(scope="module")
def batch(clips) -> list[np.ndarray]:
    """The clips plus a near-silent and an all-zero one, where the 1e-10 floor and the
    max - 8 clamp decide the values."""
    return [*clips, clips[0] * np.float32(1e-4), np.zeros(16000, np.float32)]


@pytest.mark.parametrize("n_mels", [80, 128])
def test_mel_filters_match_transformers(n_mels):
    from transformers.audio_utils import mel_filter_bank

    ref = mel_filter_bank(
        num_frequency_bins=201,
        num_mel_filters=n_mels,
        min_frequency=0.0,
        max_frequency=8000.0,
        sampling_rate=16000,
        norm="slaney",
        mel_scale="slaney",
    ).T  # transformers is (freq, mel)
    ours = mel_filters(n_mels)
    assert ours.shape == (n_mels, 201) and ours.dtype == torch.float32
    np.testing.assert_allclose(ours.numpy(), ref, rtol=0, atol=1e-6)
    np.testing.assert_allclose(mel_filters(n_mels, dtype=torch.float64).numpy(), ref, atol=1e-12)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_log_mel_batch_matches_whisper_feature_extractor(batch, n_mels):
    extractor = transformers.WhisperFeatureExtractor(feature_size=n_mels)
    ref = extractor(batch, sampling_rate=16000, return_tensors="pt").input_features
    ours = log_mel_batch(batch, n_mels)
    assert ours.shape == ref.shape == (len(batch), n_mels, 3000)
    assert ours.dtype == torch.float32
    # Same ops in the same order as transformers' torch path: expect ~0; allow 1e-4.
    per_row = (ours - ref).abs().amax(dim=(1, 2))
    assert per_row.max() <= 1e-4, per_row.tolist()


@pytest.mark.parametrize("n_mels", [80, 128])
def test_float64_matches_the_float64_numpy_reference(batch, n_mels):
    extractor = transformers.WhisperFeatureExtractor(feature_size=n_mels)
    if not hasattr(extractor, "_np_extract_fbank_features"):
        pytest.skip("this transformers has no numpy feature path")
    padded = np.stack([np.pad(c[:N_SAMPLES], (0, max(0, N_SAMPLES - c.size))) for c in batch])
    ref = extractor._np_extract_fbank_features(padded.astype(np.float64), "cpu")
    ours = log_mel_batch(batch, n_mels, dtype=torch.float64)
    assert ours.dtype == torch.float64
    # Two float64 computations (numpy FFT vs torch.stft): agreement to ~1e-7.
    np.testing.assert_allclose(ours.numpy(), ref, rtol=0, atol=1e-6)


def test_long_form_matches_faster_whisper(manifest):
    from faster_whisper.feature_extractor import FeatureExtractor

    path = next(r["path"] for r in manifest if r["audio"] == "moonshine_a_tale_of_two_cities.wav")
    audio = load_audio(path)
    assert audio.size > 80 * 16000
    ref = FeatureExtractor(feature_size=80)(audio, padding=N_SAMPLES)
    ours = log_mel_spectrogram(audio, 80, padding=N_SAMPLES)
    assert ours.shape == ref.shape == (80, (audio.size + N_SAMPLES) // 160)
    # faster-whisper runs its STFT in numpy float32 (pocketfft) and builds its own mel
    # bank, so the rounding differs from torch.stft float32: measured 1.6e-5 max-abs.
    np.testing.assert_allclose(ours.numpy(), ref, rtol=0, atol=1e-4)


def test_whisper_mel_frontend_serves_windows_and_long_form(clips):
    """The one Whisper front end (``whisper_mel``), set up from a transformers extractor config:
    30-s windows as the extractor computes them, and Whisper's long-form matrix."""
    extractor = transformers.WhisperFeatureExtractor(feature_size=128)
    cfg = extractor.to_dict()
    params = {"n_mels": cfg["feature_size"], "n_fft": cfg["n_fft"], "hop_length": cfg["hop_length"]}
    windows = build_frontend(FeatureSpec("whisper_mel", 16000, {**params, "pad_to_chunk": True}))
    feats, _ = windows.compute_batch(clips[:3])
    ref = extractor(clips[:3], sampling_rate=16000, return_tensors="pt").input_features
    assert feats.shape == (3, extractor.nb_max_frames, 128)
    assert (feats.transpose(1, 2) - ref).abs().max() <= 1e-4
    long_form = build_frontend(FeatureSpec("whisper_mel", 16000, params)).long_form(clips[0])
    assert long_form.n_frames == clips[0].size // 160 + 1
    assert torch.equal(long_form.window(0, long_form.n_frames), log_mel_spectrogram(clips[0], 128, padding=160))
    with pytest.raises(ValueError, match="n_fft=400"):
        build_frontend(FeatureSpec("whisper_mel", 16000, {"n_mels": 80, "n_fft": 512})).long_form(clips[0])


def test_inputs_as_tensors_and_errors(clips):
    extractor = transformers.WhisperFeatureExtractor(feature_size=80)
    ref = extractor(clips[:2], sampling_rate=16000, return_tensors="pt").input_features
    ours = log_mel_batch([torch.from_numpy(c) for c in clips[:2]], 80)
    assert (ours - ref).abs().max() <= 1e-4
    with pytest.raises(ValueError, match="too short"):
        log_mel_spectrogram(np.zeros(100, np.float32))
    with pytest.raises(ValueError, match="1-D waveform"):
        log_mel_spectrogram(np.zeros((2, 16000), np.float32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_transformers(clips):
    extractor = transformers.WhisperFeatureExtractor(feature_size=128)
    ref = extractor(clips, sampling_rate=16000, return_tensors="pt").input_features
    gpu = log_mel_batch([torch.from_numpy(c).cuda() for c in clips], 128)
    assert gpu.device.type == "cuda"
    # cuFFT rounds differently from the CPU FFT.
    assert (gpu.cpu() - ref).abs().max() <= 1e-4
    long_form = log_mel_spectrogram(torch.from_numpy(clips[0]).cuda(), 128, padding=N_SAMPLES)
    assert long_form.device.type == "cuda"
