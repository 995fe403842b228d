"""Fixtures of the Granite Speech tests: one tiny random transformers Granite Speech with a
LoRA adapter, saved as released (``_reference.py``), loaded by transformers and by oasr, and
three real clips of unequal length (11 s, 5.5 s, 2.7 s: 6, 3 and 2 attention blocks)."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import AUDIO_DIR
from tests.models.granite_speech import _reference as ref

CLIPS = ("jfk.wav", "funasr_asr_example.wav", "roots_19_morris_0269.wav")


@pytest.fixture(scope="package", autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="package")
def hf_dir(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    pytest.importorskip("torchaudio")
    return ref.build_tiny_granite_speech(tmp_path_factory.mktemp("tiny_granite_speech"))


@pytest.fixture(scope="package")
def hf_model(hf_dir):
    return ref.load_reference(hf_dir)


@pytest.fixture(scope="package")
def proc(hf_dir):
    from transformers import GraniteSpeechProcessor

    p = GraniteSpeechProcessor.from_pretrained(hf_dir)
    p.tokenizer.padding_side = "left"
    return p


@pytest.fixture(scope="package")
def loaded(hf_dir):
    import oasr

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # every tensor is used
        return oasr.load_pretrained(hf_dir)


@pytest.fixture(scope="package")
def engine(hf_dir):
    import oasr

    return oasr.ASREngine(str(hf_dir), device="cpu")


@pytest.fixture(scope="package")
def clips() -> list:
    from oasr.audio import load_audio

    if not all((AUDIO_DIR / name).is_file() for name in CLIPS):
        pytest.skip(f"data/audio not found at {AUDIO_DIR}")
    return [load_audio(str(AUDIO_DIR / name)) for name in CLIPS]


@pytest.fixture(scope="package")
def model64(loaded):
    return copy.deepcopy(loaded.model).double()


@pytest.fixture(scope="package")
def hf_model64(hf_model):
    return copy.deepcopy(hf_model).double()
