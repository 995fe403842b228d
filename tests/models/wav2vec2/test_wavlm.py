"""WavLM's own parts: the gated relative-position attention and both encoder layers against
transformers' modules, built from a tiny random ``WavLMConfig`` and copied across by name, in
float64 (padded batches with key padding, packed rows each equal to that row alone); and the
converter's detection and config checks. The whole model (every stage, padded and packed
batches, greedy decoding through the engine) runs in ``test_parity.py``'s WavLM variants."""

from __future__ import annotations

import json

import pytest
import torch

from oasr.layers.packing import Packing
from oasr.layers.relpos_gated import relative_position_buckets
from oasr.models.base import LoadError
from oasr.models.wav2vec2.wavlm import WavLMConfig, WavLMEncoderLayer, checkpoint_name_to_oasr
from tests.models.wav2vec2._reference import build_random, cosine, max_abs

transformers = pytest.importorskip("transformers")
from transformers.models.wavlm import modeling_wavlm as hf  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask:UserWarning")

COS_MIN = 0.999999
ABS_MAX = 1e-10
LENGTHS = (37, 23, 9)  # past max_bucket_distance (20), so the log buckets and the clamp are both reached


def _config(stable: bool):
    return transformers.WavLMConfig(
        hidden_size=16,
        num_attention_heads=4,
        intermediate_size=24,
        num_hidden_layers=2,
        num_buckets=16,
        max_bucket_distance=20,
        do_stable_layer_norm=stable,
        hidden_act="gelu",
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )


def _assert_close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert cosine(got, want) >= COS_MIN and max_abs(got, want) <= ABS_MAX


def _pair(stable: bool):
    """Two layers of transformers' (the first holding the bias table) and oasr's with the same
    random weights; every parameter is random (the gate constant too), so each term counts."""
    cfg = _config(stable)
    ref_cls = hf.WavLMEncoderLayerStableLayerNorm if stable else hf.WavLMEncoderLayer
    ours_cfg = WavLMConfig(
        hidden_size=cfg.hidden_size,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        num_buckets=cfg.num_buckets,
        max_bucket_distance=cfg.max_bucket_distance,
        pos_conv_groups=4,
    )
    gen = torch.Generator().manual_seed(31 + stable)
    ref, ours = [], []
    for i in range(cfg.num_hidden_layers):
        r = ref_cls(cfg, has_relative_position_bias=i == 0).double().eval()
        with torch.no_grad():
            for p in r.parameters():
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5)
        o = WavLMEncoderLayer(ours_cfg, stable=stable, has_relative_position_bias=i == 0).double()
        o.load_state_dict({checkpoint_name_to_oasr(k): v for k, v in r.state_dict().items()}, strict=True)
        ref.append(r)
        ours.append(o)
    return ref, ours


def _reference(ref, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    bias = None
    with torch.no_grad():
        for layer in ref:
            x, bias = layer(x, attention_mask=mask, position_bias=bias)
    return x


def _ours(ours, x, key_lengths=None, packing=None, t=None) -> torch.Tensor:
    t = x.shape[1] if t is None else t
    bias = ours[0].attention.gated_bias.table(t, x.device, x.dtype)
    with torch.no_grad():
        for layer in ours:
            x = layer(x, key_lengths, packing, bias)
    return x


def test_buckets_equal_transformers():
    attn = hf.WavLMAttention(16, 4, num_buckets=320, max_distance=800)
    rel = torch.arange(-3000, 3001)
    assert torch.equal(relative_position_buckets(rel, 320, 800), attn._relative_positions_bucket(rel))


@pytest.mark.parametrize("stable", [False, True], ids=["post_norm", "stable_layer_norm"])
def test_layers_match_transformers_padded_and_packed(stable):
    ref, ours = _pair(stable)
    gen = torch.Generator().manual_seed(7)
    t = max(LENGTHS)
    x = torch.randn(len(LENGTHS), t, 16, generator=gen, dtype=torch.float64)
    lengths = torch.tensor(LENGTHS)
    mask = torch.arange(t)[None, :] < lengths[:, None]  # (B, T) as WavLMEncoder passes it

    want = _reference(ref, x, mask)
    got = _ours(ours, x, key_lengths=lengths)
    for i, n in enumerate(LENGTHS):
        _assert_close(got[i, :n], want[i, :n])

    # Packed rows: each row equals that row run alone (transformers, no padding at all).
    packing = Packing(lengths)
    packed = _ours(ours, packing.unpad(x), key_lengths=lengths, packing=packing, t=packing.max_len)
    for i, (row, n) in enumerate(zip(packing.split(packed), LENGTHS)):
        alone = _reference(ref, x[i : i + 1, :n], None)[0]
        _assert_close(row, alone)


def test_bias_and_gate_change_the_output():
    """The test above would not notice a dropped bias if the bias were negligible: it is not."""
    ref, ours = _pair(stable=False)
    x = torch.randn(1, 30, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    with_bias = _ours(ours, x)
    with torch.no_grad():
        for layer in ours:
            layer.attention.gated_bias.gru_rel_pos_const.mul_(3.0)
    assert max_abs(_ours(ours, x), with_bias) > 1e-2


@pytest.fixture(scope="module")
def wavlm_dir(tmp_path_factory):
    return build_random(tmp_path_factory.mktemp("wavlm"), "wavlm", seed=5)


def test_a_wavlm_directory_is_detected_and_read_as_wavlm(wavlm_dir):
    from oasr.models.registry import detect_architecture
    from oasr.models.wav2vec2.convert import HFWav2Vec2Converter

    arch, converter = detect_architecture(wavlm_dir)
    assert arch == "wavlm"
    assert not HFWav2Vec2Converter().can_load(wavlm_dir)  # wav2vec2's converter leaves it to WavLM's
    bundle = converter.load(wavlm_dir)
    assert (bundle.config.num_buckets, bundle.config.max_bucket_distance) == (16, 40)
    assert bundle.config.model_type == "wavlm"
    assert "encoder.layers.0.attention.gated_bias.rel_attn_embed.weight" in bundle.state_dict
    assert not any(".rel_attn_embed" in k for k in bundle.state_dict if "layers.1." in k)  # the first layer's only


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_buckets", 2, "num_buckets=2"),
        ("max_bucket_distance", 3, "max_bucket_distance=3"),
        ("add_adapter", True, "add_adapter"),
    ],
)
def test_a_config_oasr_cannot_run_is_a_load_error(wavlm_dir, tmp_path, field, value, message):
    import shutil

    import oasr

    bad = shutil.copytree(wavlm_dir, tmp_path / "bad")
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, field: value}))
    with pytest.raises(LoadError, match=message):
        oasr.load_pretrained(bad)


def test_int8_quantises_the_projections_and_keeps_the_gate_float(wavlm_dir):
    import oasr
    from oasr.layers.quant import Int8Linear
    from oasr.layers.relpos_gated import GateProjection

    f32, q8 = oasr.load_pretrained(wavlm_dir), oasr.load_pretrained(wavlm_dir, quantize="int8")
    attn = q8.model.encoder.layers[1].attention
    assert isinstance(attn.q_proj, Int8Linear) and isinstance(attn.out_proj, Int8Linear)
    assert type(attn.gated_bias.gru_rel_pos_linear) is GateProjection  # a few hundred weights: left float
    wav = torch.randn(1, 24000, 1, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want, _ = f32.model.forward_offline(wav, torch.tensor([24000]))
        got, _ = q8.model.forward_offline(wav, torch.tensor([24000]))
    assert cosine(got, want) >= 0.999
