"""Fixtures of the wav2vec2-family tests: tiny random checkpoints saved by transformers' own
classes (one per variant), loaded by transformers and by oasr (float64 both), and real clips."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import AUDIO_DIR
from tests.models.wav2vec2 import _reference as ref

# Unequal lengths (~1 s, ~1.2 s, 3 s of jfk); few and short, for the test budget.
CLIPS = ("jaufry_03_lafon_0298.wav", "roots_38_morris_0130.wav", "jfk.wav")
CLIP_S = 3.0


@pytest.fixture(scope="package", autouse=True)
def _one_thread():
    """Tiny models: intra-op threads buy nothing on a small shared machine. Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="package", params=sorted(ref.VARIANTS))
def variant(request) -> str:
    return request.param


@pytest.fixture(scope="package")
def hf_dir(variant, tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    return ref.build_random(tmp_path_factory.mktemp(f"w2v_{variant}"), variant, seed=3)


@pytest.fixture(scope="package")
def hf_model(hf_dir, variant):
    import transformers

    return getattr(transformers, ref.VARIANTS[variant][0]).from_pretrained(hf_dir).to(torch.float64).eval()


@pytest.fixture(scope="package")
def processor(hf_dir):
    from transformers import Wav2Vec2Processor

    return Wav2Vec2Processor.from_pretrained(hf_dir)


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
    return [load_audio(str(AUDIO_DIR / name))[: int(CLIP_S * 16000)] for name in CLIPS]
