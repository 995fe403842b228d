"""The ``whisper_mel`` front end against the transformers extractors it stands for:
``WhisperFeatureExtractor`` padded to 30 s (the Qwen2-Audio processor) and the
Qwen3-ASR extractor on one clip; valid frames equal their attention masks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.audio.frontends import build_frontend
from oasr.audio.whisper_frontend import WhisperMelFrontend
from oasr.models.base import FeatureSpec

transformers = pytest.importorskip("transformers")


def _clip(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    return (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    x, y = a.double().flatten(), b.double().flatten()
    assert float(torch.nn.functional.cosine_similarity(x, y, dim=0)) >= 0.99999
    assert float((x - y).abs().max()) <= 1e-4


@pytest.mark.parametrize("n_samples", [16000 * 3 + 37, 16000 * 7 + 80, 480000 + 3200])
def test_pad_to_chunk_equals_whisper_feature_extractor(n_samples):
    fe = transformers.WhisperFeatureExtractor(feature_size=128)
    front = build_frontend(FeatureSpec("whisper_mel", 16000, {"n_mels": 128, "pad_to_chunk": True}))
    assert isinstance(front, WhisperMelFrontend) and front.max_duration_s == 30.0
    wave = _clip(n_samples, 0)
    ref = fe(wave, sampling_rate=16000, return_tensors="pt", return_attention_mask=True, padding="max_length")
    feats, lens = front.compute_batch([wave])
    assert feats.shape == (1, 3000, 128)
    _close(feats[0].T, ref["input_features"][0])
    assert int(lens[0]) == int(ref["attention_mask"][0].sum())


@pytest.mark.parametrize("n_samples", [4000, 16000 * 2 + 123, 16000 * 5])
def test_unpadded_equals_qwen3_asr_extractor_on_one_clip(n_samples):
    fe = transformers.Qwen3ASRFeatureExtractor()
    front = build_frontend(FeatureSpec("whisper_mel", 16000, {"n_mels": 128, "min_length": 8000}))
    wave = _clip(n_samples, 1)
    ref = fe(wave, sampling_rate=16000, return_tensors="pt", padding=True, n_window=0, return_attention_mask=True)
    feats, lens = front.compute_batch([wave])
    n_valid = int(ref["attention_mask"][0].sum())
    assert int(lens[0]) == n_valid == feats.shape[1]
    _close(feats[0].T, ref["input_features"][0][:, :n_valid])


def test_batches_are_per_clip_and_params_are_checked():
    front = WhisperMelFrontend(n_mels=80)
    a, b = _clip(16000, 2), _clip(24000, 3)
    feats, lens = front.compute_batch([a, b])
    assert lens.tolist() == [100, 150] and feats.shape == (2, 150, 80)
    assert torch.equal(feats[0, :100], front(a)) and torch.equal(feats[1], front(b))
    assert torch.count_nonzero(feats[0, 100:]) == 0
    with pytest.raises(ValueError, match="unknown parameter"):
        build_frontend(FeatureSpec("whisper_mel", 16000, {"n_mels": 80, "dither": 0.1}))
