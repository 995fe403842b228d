"""Reading SALM's saved directory: every tensor accounted for, LoRA merged as PEFT merges it, and
what oasr does not implement refused naming the config key and its value."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from oasr.models.base import LoadError
from oasr.models.canary_qwen.convert import SalmConverter, merge_lora
from oasr.models.registry import detect_architecture


def _copy_with(src: Path, dst: Path, edit) -> Path:
    """The checkpoint directory with its config.json edited by ``edit(cfg)``."""
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    edit(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_directory_is_detected_and_every_tensor_is_accounted_for(salm):
    from oasr.models import load_pretrained

    assert detect_architecture(salm.path)[0] == "canary_qwen"
    lm = load_pretrained(salm.path)
    report = lm.report
    assert not report.missing
    assert report.dropped == {"perception.preprocessor.featurizer.fb", "perception.preprocessor.featurizer.window"}
    assert lm.model.config.text.tie_word_embeddings  # Qwen3-1.7B's: the file keeps the embedding only


def test_lora_is_merged_as_peft_merges_it(salm):
    peft = pytest.importorskip("peft")
    llm = salm.model.llm
    assert isinstance(llm, peft.PeftModel)
    q = llm.base_model.model.model.layers[0].self_attn.q_proj
    state = {
        "m.base_layer.weight": q.base_layer.weight.detach().clone(),
        "m.lora_A.default.weight": q.lora_A["default"].weight.detach().clone(),
        "m.lora_B.default.weight": q.lora_B["default"].weight.detach().clone(),
    }
    merge_lora(state, dict(salm.model.cfg.lora), "test")
    assert list(state) == ["m.weight"]
    assert torch.allclose(state["m.weight"], q.get_delta_weight("default") + q.base_layer.weight, atol=1e-6)
    assert not torch.allclose(state["m.weight"], q.base_layer.weight, atol=1e-3)  # the adapter is not zero


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.update(prompt_format="llama2"), "prompt_format='llama2'"),
        (lambda c: c["lora"].update(use_dora=True), "lora.use_dora=True"),
        (lambda c: c.update(encoder_chunk_size_seconds=40.0), "encoder_chunk_size_seconds=40.0"),
        (
            lambda c: c["perception"]["modality_adapter"].update(
                _target_="nemo.collections.speechlm2.modules.perception.IdentityConnector"
            ),
            "perception.modality_adapter._target_",
        ),
        (lambda c: c["perception"]["encoder"].update(self_attention_model="abs_pos"), "self_attention_model='abs_pos'"),
        (lambda c: c.update(pretrained_llm="Qwen/Qwen3-1.7B"), None),  # llm_backbone/ still serves
    ],
)
def test_unimplemented_config_is_refused_naming_key_and_value(salm, tmp_path, edit, message):
    path = _copy_with(salm.path, tmp_path / "ckpt", edit)
    if message is None:
        SalmConverter().load(path)
        return
    with pytest.raises(LoadError, match=message.replace("(", r"\(").replace(".", r"\.")):
        SalmConverter().load(path)


def test_llm_config_nowhere_is_a_clear_error(salm, tmp_path):
    path = _copy_with(salm.path, tmp_path / "ckpt", lambda c: c.update(pretrained_llm="Qwen/Qwen3-1.7B"))
    shutil.rmtree(path / "llm_backbone")
    with pytest.raises(LoadError, match="llm_backbone/config.json"):
        SalmConverter().load(path)


def test_llm_and_tokenizer_from_a_local_pretrained_llm(salm, tmp_path):
    """Without the files beside the checkpoint, ``pretrained_llm`` (a local directory) gives the
    LLM's config and tokenizer; the tokenizer lacks the audio tag, which takes the next id as
    SALM's ``add_special_tokens`` gives it."""
    llm_dir = salm.path.parent / "qwen3_tiny"
    path = _copy_with(salm.path, tmp_path / "ckpt", lambda c: c.update(pretrained_llm=str(llm_dir)))
    shutil.rmtree(path / "llm_backbone")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (path / name).unlink()
    bundle = SalmConverter().load(path)
    assert bundle.tokenizer.path == str(llm_dir / "tokenizer.json")
    assert bundle.config.audio_token_id == salm.model.audio_locator_tag_id
    assert bundle.config.eos_token_ids == (salm.model.text_eos_id,)
