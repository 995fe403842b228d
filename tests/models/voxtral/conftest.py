"""Fixtures of the Voxtral tests: one tiny random transformers Voxtral saved with
``save_pretrained`` (tiny trained tokenizer, real audio geometry), loaded by transformers
and by oasr, and three real clips of unequal length, one longer than a 30-s window."""

from __future__ import annotations

import copy
import os
import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import AUDIO_DIR
from tests.models.voxtral import _reference as ref

# 44.4 s (two windows), 11 s, 2.7 s.
CLIPS = ("moonshine_two_cities_16k.wav", "jfk.wav", "roots_19_morris_0269.wav")


@pytest.fixture(scope="package", autouse=True)
def _one_thread():
    """The reference is tiny: intra-op threads buy nothing on a small shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    if os.environ.get("OASR_PARITY_FIGURES"):
        ref.write_figures(os.environ["OASR_PARITY_FIGURES"])


@pytest.fixture(scope="package")
def tok():
    pytest.importorskip("tokenizers")
    return ref.build_tokenizer()


@pytest.fixture(scope="package")
def hf_dir(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    return ref.build_tiny_voxtral(tmp_path_factory.mktemp("tiny_voxtral"))


@pytest.fixture(scope="package")
def hf_model(hf_dir):
    """The transformers reference, read back from the saved directory (float32, CPU)."""
    from transformers import VoxtralForConditionalGeneration

    return VoxtralForConditionalGeneration.from_pretrained(hf_dir).eval()


@pytest.fixture(scope="package")
def hf_model64(hf_model):
    return copy.deepcopy(hf_model).double()


@pytest.fixture(scope="package")
def loaded(hf_dir):
    import oasr

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a clean checkpoint loads without dropped tensors
        return oasr.load_pretrained(hf_dir)


@pytest.fixture(scope="package")
def model64(loaded):
    return copy.deepcopy(loaded.model).double()


@pytest.fixture(scope="package")
def clips() -> list:
    from oasr.audio import load_audio

    if not all((AUDIO_DIR / name).is_file() for name in CLIPS):
        pytest.skip(f"data/audio not found at {AUDIO_DIR}")
    return [load_audio(str(AUDIO_DIR / name)) for name in CLIPS]


@pytest.fixture(scope="package")
def engine(hf_dir):
    import oasr

    return oasr.ASREngine(hf_dir, max_batch_size=4)
