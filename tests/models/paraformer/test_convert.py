"""The FunASR directory reader: detection, CMVN into the encoder, native round trip, and
clear refusals of what it cannot read (no funasr needed: the directory is written from
oasr's own random model, whose module names are FunASR's)."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

import oasr
from oasr.models.base import LoadError
from oasr.models.paraformer.convert import read_cmvn
from oasr.models.paraformer.frontend import apply_lfr
from oasr.models.registry import detect_architecture
from oasr.models.zipformer.convert import looks_like_icefall
from tests.models.paraformer.conftest import write_oasr_funasr_dir


def _edit_config(directory, **changes):
    path = directory / "config.yaml"
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    for dotted, value in changes.items():
        node = cfg
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")


def test_detected_and_loaded_with_cmvn_in_the_encoder(oasr_dir):
    assert detect_architecture(oasr_dir)[0] == "paraformer"
    loaded = oasr.load_pretrained(str(oasr_dir))
    enc = loaded.model.encoder
    assert torch.equal(enc.cmvn_shift, torch.full((560,), -10.0)) and torch.equal(
        enc.cmvn_scale, torch.full((560,), 0.25)
    )
    assert loaded.feature_spec.kind == "funasr_fbank_lfr" and loaded.feature_spec.params["lfr_m"] == 7
    assert loaded.tokenizer.id_to_token(3) == "的" and loaded.tokenizer.vocab_size == loaded.model.vocab_size


def test_bicif_loads_its_timestamp_head(tmp_path):
    d = write_oasr_funasr_dir(tmp_path / "bicif", "BiCifParaformer")
    model = oasr.load_pretrained(str(d)).model
    assert model.config.predictor.bicif and model.predictor.blstm.bidirectional


def test_native_round_trip_needs_no_am_mvn(oasr_dir, tmp_path):
    model = oasr.load_pretrained(str(oasr_dir)).model
    out = tmp_path / "roundtrip"
    out.mkdir()
    for name in ("config.yaml", "tokens.json"):
        (out / name).write_bytes((oasr_dir / name).read_bytes())
    torch.save(model.state_dict(), out / "model.pb")  # FunASR's other weights name
    (out / "seg_dict").write_text("你好 你 好\n", encoding="utf-8")  # accepted, unused at decode
    again = oasr.load_pretrained(str(out)).model
    feats, lens = torch.randn(2, 9, 560), torch.tensor([9, 6])
    with torch.no_grad():
        a, cif_a = model(feats, lens)
        b, cif_b = again(feats, lens)
    assert torch.equal(a, b) and torch.equal(cif_a.alphas, cif_b.alphas)


def test_lfr_stacks_as_funasr():
    feats = torch.arange(10.0)[:, None].expand(10, 2)  # frame t holds t
    out = apply_lfr(feats, 7, 6)
    assert out.shape == (2, 14)
    assert out[0, ::2].tolist() == [0, 0, 0, 0, 1, 2, 3]  # first frame repeated 3 times
    assert out[1, ::2].tolist() == [3, 4, 5, 6, 7, 8, 9]


def test_am_mvn_rows_are_parsed(tmp_path):
    path = tmp_path / "am.mvn"
    path.write_text(
        "<Nnet>\n<AddShift> 2 2\n<LearnRateCoef> 0 [ -1.5 2 ]\n<Rescale> 2 2\n<LearnRateCoef> 0 [ 0.5 3 ]\n</Nnet>\n"
    )
    shift, scale = read_cmvn(path, 2)
    assert shift.tolist() == [-1.5, 2.0] and scale.tolist() == [0.5, 3.0]
    with pytest.raises(LoadError, match="<AddShift> has 2 values; the encoder reads 3"):
        read_cmvn(path, 3)


def test_a_config_for_another_model_is_refused(oasr_dir):
    _edit_config(oasr_dir, model="SeacoParaformer")
    with pytest.raises(LoadError, match=r"model='SeacoParaformer' is not supported.*Paraformer / BiCifParaformer"):
        oasr.load_pretrained(str(oasr_dir))


def test_a_missing_am_mvn_is_named(oasr_dir):
    (oasr_dir / "am.mvn").unlink()
    with pytest.raises(LoadError, match=r"no am\.mvn"):
        oasr.load_pretrained(str(oasr_dir))


def test_a_token_table_of_the_wrong_size_is_named(oasr_dir):
    tokens = json.loads((oasr_dir / "tokens.json").read_text(encoding="utf-8"))
    (oasr_dir / "tokens.json").write_text(json.dumps(tokens[:-3], ensure_ascii=False), encoding="utf-8")
    with pytest.raises(LoadError, match=rf"tokens\.json: {len(tokens) - 3} tokens but the decoder output layer"):
        oasr.load_pretrained(str(oasr_dir))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("encoder_conf.input_layer", "conv2d", r"encoder_conf\.input_layer='conv2d' is not supported"),
        ("encoder_conf.chunk_size", [12, 15], r"encoder_conf\.chunk_size=\[12, 15\] is not supported"),
        ("predictor", "CifPredictorV3", r"predictor='CifPredictorV3' is not supported"),
        ("predictor_conf.threshold", 0.9, r"CIF threshold 0\.9 is not supported"),
        ("decoder_conf.bogus", 1, r"decoder_conf\.bogus=1 is not supported: an option this family does not know"),
        ("frontend_conf.snip_edges", False, r"frontend_conf\.snip_edges=False is not supported"),
    ],
)
def test_unimplemented_options_are_refused_by_name(oasr_dir, key, value, message):
    _edit_config(oasr_dir, **{key: value})
    with pytest.raises(LoadError, match=message):
        oasr.load_pretrained(str(oasr_dir))


@pytest.mark.parametrize("layout", ["one a line", "token and id"])
def test_tokens_txt_is_read_as_the_token_list(oasr_dir, layout):
    tokens = json.loads((oasr_dir / "tokens.json").read_text(encoding="utf-8"))
    (oasr_dir / "tokens.json").unlink()
    lines = tokens if layout == "one a line" else [f"{t} {i}" for i, t in enumerate(tokens)]
    (oasr_dir / "tokens.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    # A .pt beside tokens.txt is icefall's layout too: the config.yaml naming a FunASR model decides.
    assert not looks_like_icefall(oasr_dir) and not looks_like_icefall(oasr_dir / "model.pt")
    assert detect_architecture(oasr_dir)[0] == "paraformer"
    loaded = oasr.load_pretrained(str(oasr_dir))
    assert loaded.architecture == "paraformer"
    assert [loaded.tokenizer.id_to_token(i) for i in range(len(tokens))] == tokens
