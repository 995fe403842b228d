"""The wav2vec2-family converter: detection, the released directory layouts (flat
preprocessor_config.json, pytorch_model.bin, weight_g / weight_v), the specs it reads, and
strictness."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from oasr.models.base import DecodeType, LoadError
from oasr.models.registry import build_model_from_checkpoint, detect_architecture
from oasr.models.wav2vec2.convert import HFWav2Vec2Converter, fold_weight_norm
from tests.models.wav2vec2 import _reference as ref


@pytest.fixture(scope="module")
def group_dir(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    return ref.build_random(tmp_path_factory.mktemp("w2v_convert"), "wav2vec2_group", seed=5)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit_json(path: Path, edit) -> None:
    cfg = json.loads(path.read_text())
    edit(cfg)
    path.write_text(json.dumps(cfg))


def test_detected_with_its_specs(group_dir):
    name, conv = detect_architecture(group_dir)
    assert name == "wav2vec2" and isinstance(conv, HFWav2Vec2Converter)
    bundle = conv.load(group_dir)
    cfg = bundle.config
    assert (cfg.model_type, cfg.blank_id, cfg.vocab_size, cfg.feat_extract_norm) == ("wav2vec2", 0, 28, "group")
    assert (cfg.pos_conv_kernel, cfg.pos_conv_groups, cfg.subsampling_rate) == (8, 4, 320)
    assert bundle.tokenizer.kind == "chars" and bundle.tokenizer.special_ids == (0,)
    assert bundle.features.kind == "wav2vec2_waveform" and dict(bundle.features.params) == {"do_normalize": True}
    assert bundle.decoding.decode_type == DecodeType.CTC
    # the weight norm arrives folded, the pre-training mask embedding is declared unused
    assert "encoder.pos_conv_embed.conv.weight" in bundle.state_dict
    assert not any("original" in n or n.endswith(("weight_g", "weight_v")) for n in bundle.state_dict)


def test_released_layout_loads_the_same_weights(group_dir, tmp_path):
    """preprocessor_config.json beside the model (hub releases), pytorch_model.bin with the
    older weight_g / weight_v names: the same model."""
    from safetensors.torch import load_file

    path = _copy(group_dir, tmp_path / "released")
    fe = json.loads((path / "processor_config.json").read_text())["feature_extractor"]
    (path / "processor_config.json").unlink()
    (path / "preprocessor_config.json").write_text(json.dumps({**fe, "do_normalize": False}))
    state = load_file(str(path / "model.safetensors"))
    old = {
        n.replace("parametrizations.weight.original0", "weight_g").replace(
            "parametrizations.weight.original1", "weight_v"
        ): t
        for n, t in state.items()
    }
    torch.save(old, path / "pytorch_model.bin")
    (path / "model.safetensors").unlink()
    model, bundle, report = build_model_from_checkpoint(path)
    assert report.ok and bundle.features.params["do_normalize"] is False
    reference, _, _ = build_model_from_checkpoint(group_dir)
    theirs = dict(reference.state_dict())
    for name, t in model.state_dict().items():
        assert torch.equal(t, theirs[name]), name


def test_weight_norm_fold_equals_torch():
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(8, 8, 5, groups=2), name="weight", dim=2)
    with torch.no_grad():
        conv.parametrizations.weight.original0.uniform_(0.5, 2.0)
    state = {f"c.{n}": t.detach() for n, t in conv.state_dict().items()}
    folded = fold_weight_norm(state, "test")
    torch.testing.assert_close(folded["c.weight"], conv.weight.detach(), rtol=0, atol=1e-6)
    del state["c.parametrizations.weight.original0"]
    with pytest.raises(LoadError, match="original1 has no"):
        fold_weight_norm(state, "test")


@pytest.mark.parametrize(
    "edit,message",
    [
        (dict(add_adapter=True), "add_adapter"),
        (dict(feat_extract_norm="batch"), "feat_extract_norm='batch'"),
        (dict(hidden_act="mish"), "hidden_act='mish'"),
        (dict(num_attention_heads=3), "not divisible"),
    ],
)
def test_unsupported_configs_are_refused(group_dir, tmp_path, edit, message):
    path = _copy(group_dir, tmp_path / "edited")
    _edit_json(path / "config.json", lambda c: c.update(edit))
    with pytest.raises(LoadError, match=message):
        HFWav2Vec2Converter().load(path)


def test_missing_pieces_fail_clearly(group_dir, tmp_path):
    path = _copy(group_dir, tmp_path / "novocab")
    (path / "vocab.json").unlink()
    assert not HFWav2Vec2Converter().can_load(path)
    (path / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(ref.CHARS * 2)} | {"x": 99}))
    with pytest.raises(LoadError, match="100 tokens, but the CTC head has 28"):
        HFWav2Vec2Converter().load(path)


def test_hubert_batch_norm_position_conv(tmp_path):
    """HuBERT's conv_pos_batch_norm variant: a BatchNorm ahead of a plain position convolution."""
    transformers = pytest.importorskip("transformers")
    from tests.models.wav2vec2._reference import max_abs

    path = ref.build_random(tmp_path / "bn", "hubert", seed=2, conv_pos_batch_norm=True)
    hf = transformers.HubertForCTC.from_pretrained(path).double().eval()
    with torch.no_grad():  # running statistics away from their inits
        bn = hf.hubert.encoder.pos_conv_embed.batch_norm
        bn.running_mean.normal_(std=0.3)
        bn.running_var.uniform_(0.5, 2.0)
    hf.save_pretrained(path)
    model, _, report = build_model_from_checkpoint(path)
    model.double()
    x = torch.randn(1, 8000, dtype=torch.float64)
    with torch.no_grad():
        lp, _ = model.forward_offline(x[..., None], torch.tensor([8000]))
        theirs = hf(x).logits.log_softmax(-1)
    assert report.ok and max_abs(lp, theirs) <= 1e-5
