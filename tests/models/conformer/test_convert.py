"""WenetConverter: what it refuses (by name), what it drops with a warning, and what it reads."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

import oasr
from oasr.models.base import DecodeType, LoadError
from oasr.models.conformer.convert import WenetConverter
from oasr.models.registry import detect_architecture


def _set(path: str, value):
    """An edit setting ``a.b.c`` of the parsed train.yaml."""

    def edit(cfg):
        *parents, leaf = path.split(".")
        node = cfg
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value

    return edit


def _edits(*edits):
    def edit(cfg):
        for e in edits:
            e(cfg)

    return edit


# (edit, the key and value the error must name)
REFUSED = {
    "model": (_set("model", "transducer"), r"model='transducer'"),
    "encoder": (_set("encoder", "e_branchformer"), r"encoder='e_branchformer'"),
    "ctc_weight_0": (_set("model_conf.ctc_weight", 0.0), r"model_conf\.ctc_weight=0\.0"),
    "ctc_type": (_set("ctc", "ctc_k2"), r"ctc='ctc_k2'"),
    "abs_pos": (_set("encoder_conf.pos_enc_layer_type", "abs_pos"), r"encoder_conf\.pos_enc_layer_type='abs_pos'"),
    "rope_pos": (_set("encoder_conf.pos_enc_layer_type", "rope_pos"), r"pos_enc_layer_type='rope_pos'"),
    "selfattn": (
        _set("encoder_conf.selfattention_layer_type", "selfattn"),
        r"encoder_conf\.selfattention_layer_type='selfattn'",
    ),
    "rms_norm": (_set("encoder_conf.layer_norm_type", "rms_norm"), r"encoder_conf\.layer_norm_type='rms_norm'"),
    "concat_after": (_set("encoder_conf.concat_after", True), r"encoder_conf\.concat_after=True"),
    "static_without_dynamic": (
        _edits(_set("encoder_conf.static_chunk_size", 16), _set("encoder_conf.use_dynamic_chunk", False)),
        r"encoder_conf\.static_chunk_size=16.*without a dynamic one",
    ),
    "gelu": (_set("encoder_conf.activation_type", "gelu"), r"encoder_conf\.activation_type='gelu'"),
    "hardtanh": (_set("encoder_conf.activation_type", "hardtanh"), r"encoder_conf\.activation_type='hardtanh'"),
    "unknown_key": (_set("encoder_conf.warp_drive", 3), r"encoder_conf\.warp_drive=3.*does not know"),
    "input_layer": (_set("encoder_conf.input_layer", "conv2d2"), r"encoder_conf\.input_layer='conv2d2'"),
    "conv_norm": (_set("encoder_conf.cnn_module_norm", "rms_norm"), r"encoder_conf\.cnn_module_norm='rms_norm'"),
    "mlp_type": (_set("encoder_conf.mlp_type", "moe"), r"encoder_conf\.mlp_type='moe'"),
    "gqa": (_set("encoder_conf.n_kv_head", 1), r"encoder_conf\.n_kv_head=1"),
    "inner_factor": (_set("encoder_conf.conv_inner_factor", 4), r"encoder_conf\.conv_inner_factor=4"),
    "efficient": (_set("encoder_conf.efficient_conf", {"stride_layer_idx": [3]}), r"encoder_conf\.efficient_conf="),
    "even_kernel": (_set("encoder_conf.cnn_module_kernel", 8), r"encoder_conf\.cnn_module_kernel=8"),
    "cmvn_kind": (_set("cmvn", "utterance_cmvn"), r"cmvn='utterance_cmvn'"),
    "feats_type": (_set("dataset_conf.feats_type", "mfcc"), r"dataset_conf\.feats_type='mfcc'"),
    "fbank_key": (_set("dataset_conf.fbank_conf.htk_compat", True), r"dataset_conf\.fbank_conf\.htk_compat=True"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_config_names_key_and_value(case, edited_dir):
    edit, pattern = REFUSED[case]
    path = edited_dir(edit)
    assert WenetConverter().can_load(path)  # it is a WeNet directory: refused by load, not ignored
    with pytest.raises(LoadError, match=pattern):
        WenetConverter().load(path)


def test_fixture_is_detected_as_conformer(wenet_dir):
    name, conv = detect_architecture(wenet_dir)
    assert name == "conformer" and isinstance(conv, WenetConverter)
    assert WenetConverter().can_load(wenet_dir / "final.pt")
    assert not WenetConverter().can_load(wenet_dir / "units.txt")
    assert not WenetConverter().can_load(wenet_dir.parent)


@pytest.mark.parametrize(
    "edit, reason",
    [
        (_set("decoder", "sanm_decoder"), r"decoder='sanm_decoder'"),
        (_set("decoder_conf.layer_norm_type", "rms_norm"), r"decoder_conf\.layer_norm_type='rms_norm'"),
        (_set("decoder_conf.warp_drive", 1), r"decoder_conf\.warp_drive=1"),
        (_set("model_conf.ctc_weight", 1.0), r"model_conf\.ctc_weight=1\.0.*never trained"),
        (_set("model_conf.apply_non_blank_embedding", True), r"model_conf\.apply_non_blank_embedding=True"),
    ],
)
@torch.no_grad()
def test_unbuildable_decoder_is_dropped_with_warnings(edit, reason, edited_dir, waveform, expected):
    from oasr.audio.frontends import build_frontend
    from oasr.engine.decode.ctc import ctc_greedy_search

    path = edited_dir(edit)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = oasr.load_pretrained(path)
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert any(re.search(reason, m) for m in messages), messages
    # the registry's named drop hint fires for the decoder tensors
    assert any("decoder.left_decoder" in m and "ctc_aed_rescoring" in m for m in messages), messages
    model = loaded.model
    assert model.decoder is None
    assert model.capabilities == frozenset({DecodeType.CTC})
    feats = build_frontend(loaded.feature_spec)(waveform)[None]
    log_probs, _ = model.forward_offline(feats, torch.tensor([feats.shape[1]]))
    assert list(ctc_greedy_search(log_probs[0], model.blank_id).tokens) == expected["ctc_greedy_search"]


def test_decoder_null_is_ctc_only_without_warning(edited_dir, wenet_dir, tmp_path):
    # A CTC-only experiment: no decoder in the config and none in the weights.
    path = edited_dir(_set("decoder", None))
    state = torch.load(wenet_dir / "final.pt", map_location="cpu", weights_only=True)
    (path / "final.pt").unlink()
    torch.save({k: v for k, v in state.items() if not k.startswith("decoder.")}, path / "final.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = oasr.load_pretrained(path)
    assert loaded.model.decoder is None
    assert loaded.model.capabilities == frozenset({DecodeType.CTC})


def test_training_options_are_read_for_inference(edited_dir):
    # dither is training augmentation; a static chunk with a dynamic one is served (dynamic wins, as in WeNet).
    path = edited_dir(
        _edits(
            _set("dataset_conf.fbank_conf.dither", 1.0),
            _set("encoder_conf.static_chunk_size", 16),
            _set("dataset_conf.resample_conf.resample_rate", 8000),
        )
    )
    bundle = WenetConverter().load(path)
    assert bundle.features.params["dither"] == 0.0
    assert bundle.features.sampling_rate == 8000
    assert bundle.config.encoder.static_chunk_size == 16 and bundle.config.encoder.use_dynamic_chunk
    assert bundle.config.encoder.activation == "silu"
    assert bundle.config.decoder.bidirectional and bundle.config.decoder.reverse_weight == 0.3


def test_ambiguous_checkpoints_are_refused(edited_dir):
    path = edited_dir(lambda cfg: None)
    (path / "final.pt").rename(path / "avg_5.pt")
    assert WenetConverter().load(path).source.endswith("avg_5.pt")
    (path / "avg_5.pt").rename(path / "epoch_3.pt")
    (path / "epoch_4.pt").symlink_to(path / "epoch_3.pt")
    with pytest.raises(LoadError, match="several checkpoints"):
        WenetConverter().load(path)
    assert WenetConverter().load(path / "epoch_4.pt").source.endswith("epoch_4.pt")


def test_units_and_head_must_cover_the_vocabulary(edited_dir, wenet_dir):
    path = edited_dir(_set("output_dim", 65))
    with pytest.raises(LoadError, match="CTC head has 64 outputs but output_dim is 65"):
        WenetConverter().load(path)
    path = edited_dir(lambda cfg: None, "short_units")
    (path / "units.txt").unlink()
    lines = (wenet_dir / "units.txt").read_text(encoding="utf-8").splitlines()[:-1]
    (path / "units.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(LoadError, match="63 units but output_dim is 64"):
        WenetConverter().load(path)
