"""The CTranslate2 path: the reference converted by CTranslate2's own converter, read
by oasr from one ``model.bin`` and from ``model.bin.part1`` / ``part2`` split across
two pip-package-shaped directories."""

from __future__ import annotations

import shutil

import pytest
import torch

import oasr
from tests.models.whisper import _reference as ref

PROMPT, FORCED = ref.TF_PROMPT, ref.TF_FORCED


@pytest.fixture(scope="module")
def oasr_ct2(ct2_dir):
    return oasr.load_pretrained(ct2_dir)


def _assert_same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) == set(sb)
    different = [k for k in sa if sa[k].dtype != sb[k].dtype or not torch.equal(sa[k], sb[k])]
    assert not different, f"tensors that differ: {different}"


def test_ct2_weights_equal_hf_loaded(oasr_ct2, oasr_hf):
    assert oasr_ct2.format == "ctranslate2"
    assert oasr_ct2.report.ok and not oasr_ct2.report.missing, oasr_ct2.report.summary()
    assert oasr_ct2.model.config == oasr_hf.model.config
    _assert_same_weights(oasr_ct2.model, oasr_hf.model)
    # CTranslate2's config.json carries the generation config's lists.
    a, b = oasr_ct2.decoding_spec.params, oasr_hf.decoding_spec.params
    for key in (
        "suppress_tokens",
        "begin_suppress_tokens",
        "alignment_heads",
        "lang_ids",
        "max_initial_timestamp_index",
    ):
        assert a[key] == b[key], key
    assert oasr_ct2.tokenizer.encode_text(" And so my fellow Americans") == oasr_hf.tokenizer.encode_text(
        " And so my fellow Americans"
    )


@torch.no_grad()
def test_ct2_outputs_equal(oasr_ct2, oasr_hf, hf_model, hf_features):
    feats = hf_features
    enc, _ = oasr_ct2.model.encode_offline(feats)
    assert torch.equal(enc, oasr_hf.model.encode_offline(feats)[0])
    hf_enc = hf_model.model.encoder(feats).last_hidden_state
    ref.assert_parity(enc, hf_enc, "ct2-loaded encoder vs transformers")

    full = torch.tensor([PROMPT + FORCED])
    hf_logits = hf_model(encoder_outputs=(hf_enc[:1],), decoder_input_ids=full).logits[0]
    pool = oasr_ct2.model.decoder.new_pool(1, 1)
    logits, state = oasr_ct2.model.decoder.prefill(
        pool, full[:, : len(PROMPT)], torch.tensor([len(PROMPT)]), memory=enc[:1]
    )
    got = [logits[0]] + [oasr_ct2.model.decoder.step(state, torch.tensor([t]))[0] for t in FORCED[:-1]]
    ref.assert_parity(torch.stack(got), hf_logits[len(PROMPT) - 1 : -1], "ct2-loaded logits vs transformers")

    prompt = ref.hf_prompt("en", "transcribe", timestamps=True)
    params = oasr_ct2.decoding_spec.params
    tokens = ref.oasr_greedy(
        oasr_ct2.model,
        feats,
        prompt,
        suppress=params["suppress_tokens"],
        begin_suppress=params["begin_suppress_tokens"],
        timestamps=True,
    )
    expected = ref.hf_greedy(hf_model, feats, "en", "transcribe", True)
    ref.assert_same_tokens(tokens, expected, "ct2-loaded model greedy vs generate, en-transcribe-ts1-b4")


def test_ctranslate2_runtime_agrees(oasr_ct2, ct2_runtime, hf_features):
    """CTranslate2's own encoder on the file oasr read: the same encoder output."""
    import ctranslate2
    import numpy as np

    sv = ctranslate2.StorageView.from_array(np.ascontiguousarray(hf_features.numpy()))
    theirs = torch.from_numpy(np.array(ct2_runtime.encode(sv)))
    with torch.no_grad():
        ours, _ = oasr_ct2.model.encode_offline(hf_features)
    ref.assert_parity(ours, theirs, "ct2-loaded encoder vs CTranslate2 runtime")


def _split_packages(root, ct2_dir, n_parts):
    """``pkg_part1/data/{model.bin.part1, config.json, tokenizer.json}``,
    ``pkg_part2/data/model.bin.part2``, ...: how per-part pip packages install."""
    dirs = [root / f"pkg_part{i}" / "data" for i in range(1, n_parts + 1)]
    ref.split_file(ct2_dir / "model.bin", [d / f"model.bin.part{i}" for i, d in enumerate(dirs, 1)])
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(ct2_dir / name, dirs[0] / name)
    return dirs


@pytest.mark.parametrize("n_parts", [2, 3])
def test_split_model_bin_loads_identically(tmp_path, ct2_dir, oasr_hf, n_parts):
    dirs = _split_packages(tmp_path, ct2_dir, n_parts)
    loaded = oasr.load_pretrained(dirs[0])
    assert loaded.format == "ctranslate2"
    _assert_same_weights(loaded.model, oasr_hf.model)


@pytest.mark.parametrize("n_parts,missing", [(2, 2), (3, 2), (3, 3)])
def test_split_model_bin_missing_part_is_named(tmp_path, ct2_dir, n_parts, missing):
    """A missing piece is a FileNotFoundError that names it -- the last piece of a
    three-way split included, although no file count says it should exist: the other
    pieces then end in the middle of a tensor."""
    dirs = _split_packages(tmp_path, ct2_dir, n_parts)
    shutil.rmtree(dirs[missing - 1].parent)
    with pytest.raises(FileNotFoundError, match=rf"part\(s\) \[{missing}\]|model\.bin\.part{missing}\b"):
        oasr.load_pretrained(dirs[0])
