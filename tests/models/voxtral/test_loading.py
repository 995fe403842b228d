"""The released Voxtral layout: a directory whose tokenizer is only ``tekken.json`` loads
(through transformers' tekken converter, no mistral-common) and prompts with the same ids as
the ``tokenizer.json`` transformers saves; bad checkpoints are refused naming the problem."""

from __future__ import annotations

import json
import shutil

import pytest

from oasr.models.base import LoadError
from tests.models.voxtral import _reference as ref


@pytest.fixture(scope="module")
def tekken_dir(hf_dir, tok, tmp_path_factory):
    d = tmp_path_factory.mktemp("voxtral_tekken")
    for f in hf_dir.iterdir():
        if f.name != "tokenizer.json":
            shutil.copy(f, d / f.name)
    ref.write_tekken(tok, d / "tekken.json")
    return d


def test_tekken_json_prompts_as_tokenizer_json(tekken_dir, loaded, monkeypatch, tmp_path):
    import oasr

    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path))
    tekken = oasr.load_pretrained(tekken_dir).model
    assert str(tmp_path) in tekken.config.tokenizer_path  # converted into the cache, not the checkpoint
    for kwargs in ({}, {"language": "fr"}, {"context": "What is said in this audio? Summarize it, über alles."}):
        assert tekken.prompt_ids(7, **kwargs) == loaded.model.prompt_ids(7, **kwargs)
    ids = loaded.tokenizer.encode_text("It was the best of times, Bonjour à tous")
    assert tekken.tokenizer.decode(ids) == loaded.tokenizer.decode(ids)


def test_refusals_name_the_problem(hf_dir, tmp_path):
    from oasr.models.voxtral.convert import HFVoxtralConverter

    d = tmp_path / "bad"
    shutil.copytree(hf_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["audio_token_id"] = 25
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(LoadError, match="audio_token_id"):
        HFVoxtralConverter().load(d)
    cfg["audio_token_id"] = 24
    cfg["text_config"]["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(LoadError, match="yarn"):
        HFVoxtralConverter().load(d)
    (d / "tokenizer.json").unlink()
    with pytest.raises(LoadError, match="tekken.json"):
        HFVoxtralConverter().load(d)
