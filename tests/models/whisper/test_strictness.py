"""Loading is strict: a mis-shaped or missing tensor is a ``LoadError`` naming it, an
unexpected one a ``UserWarning`` naming it (the model still loads)."""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch
from safetensors.torch import load_file, save_file

import oasr
from oasr.models.base import LoadError
from tests.models.whisper import _reference as ref

SIDE_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json")


def _hf_variant(hf_dir, out, edit):
    """A copy of the reference directory with ``edit`` applied to its tensors."""
    out.mkdir()
    for name in SIDE_FILES:
        shutil.copy(hf_dir / name, out / name)
    tensors = load_file(str(hf_dir / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _pt_variant(hf_model, out, vocab_dir, edit, *, ffn_explicit=True):
    out.mkdir()
    state = ref.hf_to_openai_state_dict(hf_model.state_dict())
    edit(state)
    torch.save({"dims": ref.openai_dims(ffn_explicit), "model_state_dict": state}, out / "tiny.pt")
    shutil.copy(vocab_dir / "tokenizer.json", out / "tokenizer.json")
    return out / "tiny.pt"


def test_hf_wrong_shape_is_a_load_error(hf_dir, tmp_path):
    def edit(t):
        t["model.decoder.layers.1.fc1.weight"] = t["model.decoder.layers.1.fc1.weight"][:127].clone()

    with pytest.raises(
        LoadError, match=r"decoder\.layers\.1\.fc1\.weight: checkpoint \(127, 64\) vs model \(128, 64\)"
    ):
        oasr.load_pretrained(_hf_variant(hf_dir, tmp_path / "m", edit))


def test_hf_missing_tensor_is_a_load_error(hf_dir, tmp_path):
    def edit(t):
        del t["model.encoder.layers.0.self_attn.v_proj.bias"]

    with pytest.raises(LoadError, match=r"missing.*encoder\.layers\.0\.self_attn\.v_proj\.bias"):
        oasr.load_pretrained(_hf_variant(hf_dir, tmp_path / "m", edit))


def test_hf_unexpected_tensor_warns_and_loads(hf_dir, tmp_path, oasr_hf):
    def edit(t):
        # Whisper's key projection has no bias: a checkpoint that carries one has a tensor oasr does not use.
        t["model.encoder.layers.0.self_attn.k_proj.bias"] = torch.ones(ref.D_MODEL)

    with pytest.warns(UserWarning, match=r"encoder\.layers\.0\.self_attn\.k_proj\.bias"):
        loaded = oasr.load_pretrained(_hf_variant(hf_dir, tmp_path / "m", edit))
    assert "encoder.layers.0.self_attn.k_proj.bias" in loaded.report.dropped
    a, b = loaded.model.state_dict(), oasr_hf.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_hf_untied_output_projection_is_a_load_error(hf_dir, tmp_path):
    def edit(t):
        t["proj_out.weight"] = t["model.decoder.embed_tokens.weight"] + 1.0

    with pytest.raises(LoadError, match=r"proj_out\.weight"):
        oasr.load_pretrained(_hf_variant(hf_dir, tmp_path / "m", edit))


def test_hf_tied_output_projection_stored_twice_is_fine(hf_dir, tmp_path):
    def edit(t):
        t["proj_out.weight"] = t["model.decoder.embed_tokens.weight"].clone()

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        loaded = oasr.load_pretrained(_hf_variant(hf_dir, tmp_path / "m", edit))
    assert loaded.report.ok


def test_openai_wrong_shape_missing_and_unexpected(hf_model, tmp_path, vocab_dir, oasr_hf):
    """oasr reports its own (transformers-layout) name of the tensor at fault."""

    def wrong(s):
        s["decoder.blocks.0.cross_attn.query.weight"] = s["decoder.blocks.0.cross_attn.query.weight"][:, :63].clone()

    with pytest.raises(LoadError, match=r"decoder\.layers\.0\.encoder_attn\.q_proj\.weight: checkpoint \(64, 63\)"):
        oasr.load_pretrained(_pt_variant(hf_model, tmp_path / "a", vocab_dir, wrong))

    def missing(s):
        del s["decoder.blocks.1.cross_attn_ln.bias"]

    with pytest.raises(LoadError, match=r"missing.*decoder\.layers\.1\.encoder_attn_layer_norm\.bias"):
        oasr.load_pretrained(_pt_variant(hf_model, tmp_path / "b", vocab_dir, missing))

    def extra(s):
        s["decoder.blocks.0.attn.key.bias"] = torch.zeros(ref.D_MODEL)

    with pytest.warns(UserWarning, match=r"decoder\.layers\.0\.self_attn\.k_proj\.bias"):
        loaded = oasr.load_pretrained(_pt_variant(hf_model, tmp_path / "c", vocab_dir, extra))
    a, b = loaded.model.state_dict(), oasr_hf.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_openai_dims_without_ffn_imply_four_times_width(hf_model, tmp_path, vocab_dir):
    """openai's dims carry no MLP width: a 2x-wide MLP under standard dims is a shape error."""
    path = _pt_variant(hf_model, tmp_path / "m", vocab_dir, lambda s: None, ffn_explicit=False)
    with pytest.raises(
        LoadError, match=r"encoder\.layers\.0\.fc1\.weight: checkpoint \(128, 64\) vs model \(256, 64\)"
    ):
        oasr.load_pretrained(path)
