"""HFParakeetConverter: what it reads from a Hugging Face directory, and what it refuses."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import oasr
from oasr.models.base import LoadError
from oasr.models.parakeet.convert import HFParakeetConverter
from oasr.models.registry import detect_architecture
from tests.models.parakeet.conftest import TINY_ENCODER

TINY_TRANSDUCER_ENCODER = dict(
    hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, subsampling_conv_channels=4
)


def test_detected_and_loaded_without_leftovers(reference):
    name, converter = detect_architecture(reference.path)
    assert name == "parakeet" and isinstance(converter, HFParakeetConverter)
    bundle = converter.load(reference.path)
    assert bundle.config.encoder.hidden_size == TINY_ENCODER["hidden_size"]
    assert bundle.config.vocab_size == len(reference.tokenizer)
    assert bundle.state_dict["ctc_head.weight"].shape == (len(reference.tokenizer), TINY_ENCODER["hidden_size"])
    assert "encoder.layers.0.self_attn.linear_pos.weight" in bundle.state_dict
    assert not any("q_proj" in k or "relative_k_proj" in k for k in bundle.state_dict)
    # transformers 5 keeps the extractor settings in processor_config.json.
    assert dict(bundle.features.params) == dict(
        feature_size=80, hop_length=160, n_fft=512, win_length=400, preemphasis=0.97
    )
    loaded = oasr.load_pretrained(reference.path)
    assert loaded.report.ok and not loaded.report.dropped
    # The (V, D) head is padded to the GEMM width; the padding rows never win.
    head = loaded.model.ctc_head
    assert head.padded_size % 8 == 0 and head.padded_size >= head.vocab_size
    assert torch.equal(head.weight[: head.vocab_size], bundle.state_dict["ctc_head.weight"])


def test_preprocessor_config_json_is_read_first(reference, tmp_path):
    path = tmp_path / "ckpt"
    shutil.copytree(reference.path, path)
    settings = {**reference.feature_extractor.to_dict(), "win_length": 320, "preemphasis": None}
    (path / "preprocessor_config.json").write_text(json.dumps(settings))
    bundle = HFParakeetConverter().load(path)
    assert bundle.features.params["win_length"] == 320 and bundle.features.params["preemphasis"] is None
    settings["feature_size"] = 128
    (path / "preprocessor_config.json").write_text(json.dumps(settings))
    with pytest.raises(LoadError, match="feature_size=128"):
        HFParakeetConverter().load(path)


@pytest.mark.parametrize("kind", ["rnnt", "tdt"])
def test_transducer_directories_load_as_parakeet_transducer(kind, tmp_path):
    from safetensors.torch import load_file, save_file
    from transformers import ParakeetForRNNT, ParakeetForTDT, ParakeetRNNTConfig, ParakeetTDTConfig

    from tests.models.parakeet.conftest import train_tokenizer

    config_cls, model_cls = {"rnnt": (ParakeetRNNTConfig, ParakeetForRNNT), "tdt": (ParakeetTDTConfig, ParakeetForTDT)}[
        kind
    ]
    config = config_cls(encoder_config=TINY_TRANSDUCER_ENCODER, vocab_size=9, decoder_hidden_size=8, blank_token_id=8)
    model_cls(config).save_pretrained(tmp_path)
    with pytest.raises(LoadError, match="no tokenizer.json"):
        oasr.from_pretrained(tmp_path)
    train_tokenizer().save_pretrained(tmp_path)
    bundle = HFParakeetConverter().load(tmp_path)
    assert bundle.architecture == "parakeet_transducer"
    assert bundle.config.durations == ((0, 1, 2, 3, 4) if kind == "tdt" else ())
    assert bundle.state_dict["joiner.head.weight"].shape[0] == 9 + len(bundle.config.durations)
    assert "predictor.lstm.weight_ih_l0" in bundle.state_dict and "joiner.encoder_proj.weight" in bundle.state_dict
    loaded = oasr.load_pretrained(tmp_path)
    assert loaded.report.ok and not loaded.report.dropped
    # A head that is not vocab_size (+ durations) wide is refused, naming the widths.
    weights = load_file(str(tmp_path / "model.safetensors"))
    weights["joint.head.weight"] = weights["joint.head.weight"][:-1].clone()
    weights["joint.head.bias"] = weights["joint.head.bias"][:-1].clone()
    save_file(weights, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(LoadError, match="joint.head has"):
        HFParakeetConverter().load(tmp_path)


def test_bare_encoder_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "parakeet_encoder", **TINY_ENCODER}))
    with pytest.raises(LoadError, match="without a decoding head"):
        HFParakeetConverter().load(tmp_path)


def test_other_directories_are_not_claimed(tmp_path):
    converter = HFParakeetConverter()
    assert not converter.can_load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "whisper"}))
    assert not converter.can_load(tmp_path)


def _edited_config(reference, tmp_path, edit):
    path = tmp_path / "ckpt"
    shutil.copytree(reference.path, path)
    config = json.loads((path / "config.json").read_text())
    edit(config)
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_unsupported_settings_are_refused(reference, tmp_path):
    def gqa(c):
        c["encoder_config"]["num_key_value_heads"] = 2

    with pytest.raises(LoadError, match="num_key_value_heads"):
        HFParakeetConverter().load(_edited_config(reference, tmp_path / "a", gqa))

    def act(c):
        c["encoder_config"]["hidden_act"] = "mish"

    with pytest.raises(LoadError, match="hidden_act='mish'"):
        HFParakeetConverter().load(_edited_config(reference, tmp_path / "b", act))

    def vocab(c):
        c["vocab_size"] += 1

    with pytest.raises(LoadError, match="CTC head has"):
        HFParakeetConverter().load(_edited_config(reference, tmp_path / "c", vocab))


def test_missing_tokenizer_is_named(reference, tmp_path):
    path = tmp_path / "ckpt"
    shutil.copytree(reference.path, path)
    (path / "tokenizer.json").unlink()
    with pytest.raises(LoadError, match="tokenizer.json"):
        HFParakeetConverter().load(path)


def test_config_round_trips_and_checks():
    from oasr.models.parakeet import ParakeetConfig, ParakeetEncoderConfig

    config = ParakeetConfig(encoder=ParakeetEncoderConfig(hidden_size=64, subsampling_factor=4), vocab_size=33)
    assert config.blank_id == 32 and config.encoder.num_subsampling_layers == 2
    assert ParakeetConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="subsampling_factor=6"):
        ParakeetEncoderConfig(subsampling_factor=6)
    with pytest.raises(ValueError, match="blank_id=40"):
        ParakeetConfig(vocab_size=33, blank_id=40)
