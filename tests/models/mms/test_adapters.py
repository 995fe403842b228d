"""MMS's adapter files and the resident languages: every file checked when the checkpoint loads,
languages read on demand and the least recently used ones let go, and rows of different head
widths searched by beam over their own language's columns."""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch

from oasr.models.base import LoadError
from oasr.models.wav2vec2.adapters import AdapterBank
from tests.models.mms._reference import VOCABS


def test_languages_are_read_on_demand_and_the_least_recent_let_go(loaded):
    model = loaded.model
    bank = AdapterBank(model.bank.files, model.bank.vocab_sizes, "eng", model.config.num_hidden_layers, capacity=1)
    cpu, f64 = torch.device("cpu"), torch.float64

    def resident() -> list[str]:
        return [key[0] for key in bank._resident]

    assert bank.adapters([None, None], cpu, f64) == [None, None] and bank.loads == 0  # the own weights
    fra = bank.adapters(["fra"], cpu, f64)[0]
    assert fra.language == "fra" and fra.vocab_size == len(VOCABS["fra"]) and bank.loads == 1
    assert bank.adapters(["fra"], cpu, f64)[0] is fra and bank.loads == 1
    bank.adapters(["deu"], cpu, f64)
    assert resident() == ["deu"] and bank.loads == 2
    both = bank.adapters(["fra", "deu", None], cpu, f64)  # a batch keeps all of its own, past the capacity
    assert [a.language for a in both[:2]] == ["fra", "deu"] and both[2] is None and len(resident()) == 2
    bank.adapters(["eng"], cpu, f64)  # the default named: its file, as load_adapter("eng")
    assert resident() == ["eng"]
    with pytest.raises(KeyError, match="no adapter for language 'spa'"):
        bank.adapters(["spa"], cpu, f64)


def test_a_bad_adapter_file_fails_the_load_naming_it(mms_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    import oasr

    bad = tmp_path / "mms"
    shutil.copytree(mms_dir, bad)
    state = load_file(bad / "adapter.fra.safetensors")
    state["wav2vec2.encoder.layers.1.adapter_layer.linear_1.weight"] = torch.zeros(3, 16)
    save_file(state, bad / "adapter.fra.safetensors")
    with pytest.raises(LoadError, match=r"adapter\.fra\.safetensors: wrong shapes: .*linear_1\.weight \(3, 16\)"):
        oasr.load_pretrained(bad)
    del state["lm_head.bias"]
    save_file(state, bad / "adapter.fra.safetensors")
    with pytest.raises(LoadError, match=r"adapter\.fra\.safetensors: not an adapter of this model: missing \['lm_head"):
        oasr.load_pretrained(bad)


def test_an_adapter_without_a_vocabulary_is_not_offered(mms_dir, tmp_path):
    import oasr

    extra = tmp_path / "mms"
    shutil.copytree(mms_dir, extra)
    shutil.copy(extra / "adapter.fra.safetensors", extra / "adapter.ita.safetensors")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = oasr.load_pretrained(extra)
    assert loaded.languages == ("deu", "eng", "fra")
    assert any("without a vocabulary in vocab.json are not offered: ['ita']" in str(w.message) for w in caught)


def test_beam_rows_search_their_own_languages_columns(mms_dir, clips, decode_together, monkeypatch):
    import oasr
    from oasr.engine.decode.ctc import strategy

    searched = []

    def search(log_probs, *args, **kwargs):
        searched.append(log_probs.shape[-1])
        return beam_search(log_probs, *args, **kwargs)

    beam_search = strategy.ctc_prefix_beam_search
    monkeypatch.setattr(strategy, "ctc_prefix_beam_search", search)
    engine = oasr.ASREngine(str(mms_dir), device="cpu")
    languages = ("deu", "fra", "eng")  # the narrowest head beside wider ones, in one batch
    outs = decode_together(engine, clips[:3], languages, beam_size=4)
    assert engine.strategy.stats()["batches"] == 1
    assert sorted(searched) == sorted(len(VOCABS[lang]) for lang in languages)  # each row its own head's columns
    for out, lang in zip(outs, languages):
        tokens = [t for s in out.segments for t in s.tokens]
        assert tokens and max(tokens) < len(VOCABS[lang]) and out.language == lang
