"""Fixtures of the Granite Speech 5 tests: a tiny random ``transformers.GraniteSpeech5ForCTC``
directory loaded by transformers and by oasr (float64 both), and a few real clips."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import AUDIO_DIR
from tests.models.granite_speech5 import _reference as ref

# Unequal lengths (11 s, ~1 s, ~1.2 s, 26 s); the first is also the single-clip input.
CLIPS = ("jfk.wav", "jaufry_03_lafon_0298.wav", "roots_38_morris_0130.wav", "mfa_cold_corpus.wav")


@pytest.fixture(scope="package", autouse=True)
def _one_thread():
    """Tiny models: one thread is enough and keeps the timing independent of other processes."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="package")
def hf_dir(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    return ref.build_random_granite_speech5(tmp_path_factory.mktemp("granite_speech5"), seed=7)


@pytest.fixture(scope="package")
def hf_model(hf_dir):
    from transformers import GraniteSpeech5ForCTC

    return GraniteSpeech5ForCTC.from_pretrained(hf_dir).to(torch.float64).eval()


@pytest.fixture(scope="package")
def processor(hf_dir):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(hf_dir)


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


@pytest.fixture(scope="package")
def hf_alone(hf_model, processor, clips):
    """transformers on each clip alone, as the model card runs it: the processor's features,
    the forward's block outputs and logits, ``generate``'s frame ids and the decoded text."""
    rows = []
    for wav in clips:
        inputs = processor(wav, sampling_rate=16000, return_tensors="pt")
        x = inputs.input_features.to(torch.float64)
        with torch.no_grad():
            out = hf_model(x, attention_mask=inputs.attention_mask, output_hidden_states=True)
            ids = hf_model.generate(x, attention_mask=inputs.attention_mask)
        text = processor.batch_decode(ids, skip_special_tokens=True)[0]
        rows.append(
            {"feats": x[0], "hidden": out.hidden_states[1:], "logits": out.logits[0], "ids": ids[0], "text": text}
        )
    return rows
