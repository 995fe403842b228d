"""The HF lasr converter: detection, the specs it reads, and strictness."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from oasr.models.base import DecodeType, LoadError
from oasr.models.lasr.convert import HFLasrConverter
from oasr.models.registry import build_model_from_checkpoint, detect_architecture
from tests.models.lasr._reference import TOKENIZER_SENTENCES


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit_config(path: Path, edit) -> None:
    cfg = json.loads((path / "config.json").read_text())
    edit(cfg)
    (path / "config.json").write_text(json.dumps(cfg))


def test_registered_as_a_builtin_across_reloads():
    from oasr.models.registry import get_model_info, reload_registry

    reload_registry()
    reload_registry()
    info = get_model_info("lasr")
    assert info.model_class().architecture == "lasr"
    assert [type(c) for c in info.converter_objects()] == [HFLasrConverter]


def test_detected_as_lasr(hf_dir):
    name, conv = detect_architecture(hf_dir)
    assert name == "lasr" and isinstance(conv, HFLasrConverter)


def test_other_model_types_are_not_claimed(hf_dir, tmp_path):
    other = _copy(hf_dir, tmp_path / "encoder_only")
    _edit_config(other, lambda c: c.update(model_type="lasr_encoder"))
    assert not HFLasrConverter().can_load(other)
    assert not HFLasrConverter().can_load(tmp_path / "absent")


def test_bundle_specs(hf_dir):
    bundle = HFLasrConverter().load(hf_dir)
    hf = json.loads((hf_dir / "config.json").read_text())
    enc = hf["encoder_config"]
    cfg = bundle.config
    assert (cfg.vocab_size, cfg.blank_id) == (hf["vocab_size"], hf["pad_token_id"]) == (cfg.vocab_size, 0)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.conv_kernel_size) == (
        enc["hidden_size"],
        enc["num_hidden_layers"],
        enc["conv_kernel_size"],
    )
    assert cfg.layer_norm_eps == enc["layer_norm_eps"] and cfg.rope_theta == enc["rope_parameters"]["rope_theta"]
    # The k=1 convolution head arrives as a (V, D) projection.
    assert bundle.state_dict["ctc_head.weight"].shape == (cfg.vocab_size, cfg.hidden_size)
    tok = bundle.tokenizer
    assert tok.kind == "huggingface" and tok.path.endswith("tokenizer.json")
    assert tok.special_ids == (0, 1, 2, 3)  # <epsilon> (blank), <s>, </s>, <unk>
    feats = bundle.features
    assert feats.kind == "lasr_mel" and feats.sampling_rate == 16000
    assert dict(feats.params) == {
        "n_mels": 128,
        "n_fft": 512,
        "hop_length": 160,
        "win_length": 400,
        "f_min": 125.0,
        "f_max": 7500.0,
    }
    assert bundle.decoding.decode_type == DecodeType.CTC and bundle.decoding.params["blank_id"] == 0


def test_loaded_model_declares_ctc(loaded):
    from oasr.models.interfaces import validate_capabilities

    model = loaded.model
    validate_capabilities(model)
    assert model.capabilities == frozenset({DecodeType.CTC}) and model.decode_type == DecodeType.CTC
    assert model.encoder.streaming_kind == "none" and model.cache_spec is None
    assert model.blank_id == 0 and loaded.report.ok and not loaded.report.dropped
    # The head is padded to the GEMM width; padding never shows in the log-probs.
    assert model.ctc_head.padded_size % 8 == 0 and model.ctc_head.vocab_size == model.config.vocab_size


def test_pytorch_bin_weights_and_activation_alias(hf_dir, tmp_path, loaded):
    from safetensors.torch import load_file

    path = _copy(hf_dir, tmp_path / "bin")
    torch.save(load_file(str(path / "model.safetensors")), path / "pytorch_model.bin")
    (path / "model.safetensors").unlink()
    _edit_config(path, lambda c: c["encoder_config"].update(hidden_act="swish"))  # transformers' alias of silu
    model, bundle, report = build_model_from_checkpoint(path)
    assert bundle.config.hidden_act == "silu" and report.ok and not report.dropped
    theirs = dict(loaded.model.state_dict())
    for name, t in model.state_dict().items():
        assert torch.equal(t.double(), theirs[name].double()), name


def test_flat_preprocessor_config_is_read(hf_dir, tmp_path):
    path = _copy(hf_dir, tmp_path / "flat")
    proc = json.loads((path / "processor_config.json").read_text())
    fe = {**proc["feature_extractor"], "hop_length": 80}
    (path / "processor_config.json").unlink()
    (path / "preprocessor_config.json").write_text(json.dumps(fe))
    assert HFLasrConverter().load(path).features.params["hop_length"] == 80


def test_mismatched_mel_bins_fail(hf_dir, tmp_path):
    path = _copy(hf_dir, tmp_path / "mels")
    proc = json.loads((path / "processor_config.json").read_text())
    proc["feature_extractor"]["feature_size"] = 80
    (path / "processor_config.json").write_text(json.dumps(proc))
    with pytest.raises(LoadError, match="80 mel bins"):
        HFLasrConverter().load(path)


def test_scaled_rope_is_refused(hf_dir, tmp_path):
    path = _copy(hf_dir, tmp_path / "rope")
    _edit_config(path, lambda c: c["encoder_config"].update(rope_parameters={"rope_type": "linear", "factor": 2.0}))
    with pytest.raises(LoadError, match="rope_type='linear'"):
        HFLasrConverter().load(path)


def test_missing_tensor_fails_and_extra_tensor_warns(hf_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    path = _copy(hf_dir, tmp_path / "broken")
    state = load_file(str(path / "model.safetensors"))
    state["encoder.extra.weight"] = torch.zeros(2)
    save_file(state, str(path / "model.safetensors"))
    with pytest.warns(UserWarning, match="encoder.extra.weight"):
        build_model_from_checkpoint(path)
    del state["encoder.extra.weight"], state["encoder.layers.1.conv.norm.running_var"]
    save_file(state, str(path / "model.safetensors"))
    with pytest.raises(LoadError, match="running_var"):
        build_model_from_checkpoint(path)


def test_specials_named_only_in_tokenizer_config(hf_dir, tmp_path):
    """Specials that tokenizer.json does not list as added tokens are still found by name."""
    path = _copy(hf_dir, tmp_path / "named")
    tok = json.loads((path / "tokenizer.json").read_text())
    tok["added_tokens"] = [t for t in tok["added_tokens"] if t["content"] == "<epsilon>"]
    (path / "tokenizer.json").write_text(json.dumps(tok))
    assert HFLasrConverter().load(path).tokenizer.special_ids == (0, 1, 2, 3)
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    del cfg["bos_token"]
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert HFLasrConverter().load(path).tokenizer.special_ids == (0, 2, 3)


def test_sentencepiece_vocabulary(hf_dir, tmp_path):
    spm = pytest.importorskip("sentencepiece")
    path = _copy(hf_dir, tmp_path / "spm")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (path / name).unlink()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TOKENIZER_SENTENCES),
        model_prefix=str(path / "spiece"),
        vocab_size=40,
        model_type="unigram",
        pad_id=0,
        pad_piece="<epsilon>",
        bos_id=1,
        eos_id=2,
        unk_id=3,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    tok = HFLasrConverter().load(path).tokenizer
    assert tok.kind == "sentencepiece" and tok.path.endswith("spiece.model")
    assert tok.special_ids == (0, 1, 2, 3)
    from oasr.tokenizers import load_tokenizer

    try:
        tokenizer = load_tokenizer(tok)
    except ValueError as e:
        pytest.skip(f"oasr.tokenizers has no sentencepiece kind yet: {e}")
    ids = tokenizer.encode_text("ask what you can do")
    assert ids and not set(ids) & set(tok.special_ids)
    assert tokenizer.decode(ids) == "ask what you can do"


def test_no_vocabulary_fails(hf_dir, tmp_path):
    path = _copy(hf_dir, tmp_path / "novocab")
    (path / "tokenizer.json").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(LoadError, match="no LASR vocabulary"):
            HFLasrConverter().load(path)
