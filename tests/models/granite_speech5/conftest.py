"""Fixtures of the Granite Speech 5 tests: a tiny random ``transformers.GraniteSpeech5ForCTC``
directory loaded by transformers and by oasr (float64 both), and a few real clips."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.models.granite_speech5 import _reference as ref
from tests.models.lasr import conftest as _lasr

# LASR's: one thread, its four clips of unequal lengths (jfk 11 s, 26 s, ~1 s, ~1.2 s) and
# ``loaded``, oasr's load of this package's ``hf_dir`` in float64.
_one_thread, clips, loaded = _lasr._one_thread, _lasr.clips, _lasr.loaded


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
