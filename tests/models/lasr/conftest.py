"""Fixtures of the LASR tests: tiny random ``transformers.LasrForCTC`` directories loaded
by transformers and by oasr (float64 both), and a few real clips."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import AUDIO_DIR
from tests.models.lasr import _reference as ref

# Unequal lengths (11 s, 26 s, ~1 s, ~1.2 s); the first is also the single-clip input.
CLIPS = ("jfk.wav", "mfa_cold_corpus.wav", "jaufry_03_lafon_0298.wav", "roots_38_morris_0130.wav")

# The MedASR shape (no biases, even depthwise kernel) and a variant with every bias and an odd kernel.
VARIANTS = {
    "medasr": {},
    "biased_odd_kernel": {"attention_bias": True, "convolution_bias": True, "conv_kernel_size": 7},
}


@pytest.fixture(scope="package", autouse=True)
def _one_thread():
    """Tiny models: intra-op threads buy nothing, and one thread keeps training deterministic
    and the timing independent of other processes on a small shared machine. Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="package", params=sorted(VARIANTS))
def hf_dir(request, tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    name = request.param
    return ref.build_random_lasr(tmp_path_factory.mktemp(f"lasr_{name}"), seed=7, **VARIANTS[name])


@pytest.fixture(scope="package")
def hf_model(hf_dir):
    from transformers import LasrForCTC

    return LasrForCTC.from_pretrained(hf_dir).to(torch.float64).eval()


@pytest.fixture(scope="package")
def loaded(hf_dir):
    """``oasr.load_pretrained`` of the transformers directory, cast to float64."""
    import oasr

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a clean checkpoint loads without dropped tensors
        lm = oasr.load_pretrained(hf_dir)
    lm.model.to(torch.float64)
    return lm


@pytest.fixture(scope="session")
def clips() -> list:
    from oasr.audio import load_audio

    if not all((AUDIO_DIR / name).is_file() for name in CLIPS):
        pytest.skip(f"data/audio not found at {AUDIO_DIR}")
    return [load_audio(str(AUDIO_DIR / name)) for name in CLIPS]


@pytest.fixture(scope="session")
def hf_batch(clips):
    """transformers' LasrFeatureExtractor features of the clips, padded, with the frame mask."""
    from transformers import LasrFeatureExtractor

    out = LasrFeatureExtractor()(clips, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
    return out.input_features, out.attention_mask
