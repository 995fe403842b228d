"""Session fixtures of the Qwen2-Audio parity tests: one tiny random transformers
Qwen2-Audio saved with ``save_pretrained`` (tiny trained tokenizer, real audio
geometry), loaded by transformers and by oasr, and three real clips of unequal length."""

from __future__ import annotations

import copy
import json
import os
import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import AUDIO_DIR
from tests.models.speech_llm import _reference as ref

# Unequal lengths under 30 s (11 s English, 5.5 s Mandarin, 2.7 s English); the first
# is also the batch-of-1 clip.
CLIPS = ("jfk.wav", "funasr_asr_example.wav", "roots_19_morris_0269.wav")


@pytest.fixture(scope="package", autouse=True)
def _one_thread():
    """The reference is tiny: intra-op threads buy nothing on a small shared machine.
    Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    if os.environ.get("OASR_PARITY_FIGURES"):
        Path(os.environ["OASR_PARITY_FIGURES"]).write_text(json.dumps(ref.FIGURES, indent=1), encoding="utf-8")


@pytest.fixture(scope="session")
def tok():
    pytest.importorskip("tokenizers")
    return ref.build_tokenizer()


@pytest.fixture(scope="session")
def proc(tok):
    pytest.importorskip("transformers")
    return ref.processor(tok)


@pytest.fixture(scope="session")
def hf_dir(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    return ref.build_tiny_qwen2_audio(tmp_path_factory.mktemp("tiny_qwen2_audio"))


@pytest.fixture(scope="session")
def hf_model(hf_dir):
    """The transformers reference, read back from the saved directory (float32, CPU)."""
    from transformers import Qwen2AudioForConditionalGeneration

    return Qwen2AudioForConditionalGeneration.from_pretrained(hf_dir).eval()


@pytest.fixture(scope="session")
def hf_model64(hf_model):
    return copy.deepcopy(hf_model).double()


@pytest.fixture(scope="session")
def loaded(hf_dir):
    """``oasr.load_pretrained`` of the transformers directory."""
    import oasr

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a clean checkpoint loads without dropped tensors
        return oasr.load_pretrained(hf_dir)


@pytest.fixture(scope="session")
def model64(loaded):
    return copy.deepcopy(loaded.model).double()


@pytest.fixture(scope="session")
def clips() -> list:
    from oasr.audio import load_audio

    if not all((AUDIO_DIR / name).is_file() for name in CLIPS):
        pytest.skip(f"data/audio not found at {AUDIO_DIR}")
    return [load_audio(str(AUDIO_DIR / name)) for name in CLIPS]


@pytest.fixture(scope="session")
def hf_batch1(proc, clips):
    """The processor's inputs for the first clip under the chat prompt."""
    return proc(text=ref.chat_prompt(proc), audio=clips[0], sampling_rate=16000, return_tensors="pt")


@pytest.fixture(scope="session")
def hf_batch3(proc, clips):
    """The processor's left-padded inputs for the three clips under the chat prompt."""
    text = [ref.chat_prompt(proc)] * len(clips)
    return proc(text=text, audio=clips, sampling_rate=16000, return_tensors="pt", padding=True)
