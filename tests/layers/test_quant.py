"""int8 weight quantisation: the rounding, both kernels, the model-wide swap, and the
engine option (with real whisper-base: the same transcript as float32)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from oasr.engine.config import EngineConfig
from oasr.layers import Linear, quant
from oasr.layers.linear import LinearActivation
from oasr.layers.quant import DYNAMIC_MAX_ROWS, Int8Linear, prepack_int8_, quantize_linears_
from oasr.models.registry import get_model_info
from tests.models.tiny_configs import TINY_CONFIGS


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return F.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0).item()


def test_rounding_is_per_channel_and_within_half_a_step():
    torch.manual_seed(0)
    w = torch.randn(24, 40) * torch.logspace(-3, 1, 24)[:, None]  # channels of very different scale
    q = Int8Linear.from_weight(w)
    assert q.qweight.dtype == torch.int8 and q.scale.shape == (24,)
    err = (q.dequantized_weight() - w).abs()
    assert bool((err <= q.scale[:, None] / 2 + 1e-7).all())
    assert int(q.qweight.abs().amax(1).min()) == 127  # every channel uses the full range


@pytest.mark.parametrize("cpu", ["vnni+bf16", "vnni", "avx2"])
@pytest.mark.parametrize("rows", [1, 7, DYNAMIC_MAX_ROWS, DYNAMIC_MAX_ROWS + 1, 900])
def test_every_kernel_matches_the_float_layer(rows, cpu, monkeypatch):
    # Which kernel runs (and in what precision) depends on the CPU: each choice on this one.
    monkeypatch.setattr(quant, "cpu_has_vnni", lambda: "vnni" in cpu)
    monkeypatch.setattr(quant, "cpu_has_bf16", lambda: "bf16" in cpu)
    torch.manual_seed(rows)
    lin = LinearActivation(64, 96, "gelu")
    q = Int8Linear.from_linear(lin)
    x = torch.randn(rows, 64)
    with torch.no_grad():
        ref = lin(x)
        dequant = F.gelu(F.linear(x, q.dequantized_weight(), lin.bias))
        got = q(x.view(1, rows, 64)).view(rows, 96)
    assert got.shape == ref.shape and got.dtype == torch.float32
    assert _cos(got, ref) > 0.999
    if rows > DYNAMIC_MAX_ROWS and "bf16" not in cpu:
        # The large-row path is exactly the float GEMM on the dequantised weight.
        torch.testing.assert_close(got, dequant, rtol=1e-5, atol=1e-5)
    else:
        # The dynamic path rounds the activations to 8 (or 7) bits, the bf16 GEMM to 8
        # significant bits: close, not equal.
        assert (got - dequant).abs().max().item() < 0.05 * dequant.abs().max().item()


def test_dynamic_kernel_does_not_saturate_on_this_cpu():
    # The worst case for int8 pair sums: every activation at the top of its range and every
    # weight at +127, so each output is in*127*255 in the integer domain. Full 8-bit
    # activations (reduce_range off) are only taken where the CPU accumulates them in int32.
    k = 512
    q = Int8Linear(torch.full((16, k), 127, dtype=torch.int8), torch.full((16,), 0.01))
    x = torch.cat([torch.full((3, k), 4.0), torch.full((1, k), -4.0)])  # 4 rows: the dynamic kernel
    with torch.no_grad():
        got = q(x)
    want = F.linear(x, q.dequantized_weight())
    torch.testing.assert_close(got, want, rtol=0.02, atol=0.02 * want.abs().max().item())


def test_prepack_builds_every_packed_weight_once_and_a_cast_drops_them():
    torch.manual_seed(0)
    model = get_model_info("whisper").model_class().from_config(TINY_CONFIGS["whisper"]()).eval()
    quantize_linears_(model)
    layers = [m for m in model.modules() if isinstance(m, Int8Linear)]
    if not quant._fbgemm_available():
        assert prepack_int8_(model) == 0
        return
    encoder = [m for m in model.encoder.modules() if isinstance(m, Int8Linear)]
    assert prepack_int8_(model, skip=("encoder",)) == len(layers) - len(encoder) > 0
    assert all(m._packed is None for m in encoder) and encoder  # left to a first call with few rows
    assert prepack_int8_(model) == len(layers)
    packed = [m._packed for m in layers]
    x = torch.randn(2, 5, layers[0].in_features)
    with torch.no_grad():
        layers[0](x)
    assert [m._packed for m in layers] == packed  # a call uses the load's packing, no repack
    model.to(torch.bfloat16)  # bf16 activations take the dequantised path: nothing to pack
    assert all(m._packed is None for m in layers)
    assert prepack_int8_(model) == 0


def test_grad_mode_and_half_inputs_take_the_dequantised_path():
    torch.manual_seed(1)
    q = Int8Linear.from_weight(torch.randn(8, 16), torch.randn(8))
    x = torch.randn(3, 16)
    exact = F.linear(x, q.dequantized_weight(), q.bias)
    with torch.enable_grad():
        torch.testing.assert_close(q(x), exact)
    got = q(x.bfloat16())
    assert got.dtype == torch.bfloat16 and _cos(got, exact) > 0.999


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_every_architecture_quantizes_all_its_linears(name):
    torch.manual_seed(0)
    model = get_model_info(name).model_class().from_config(TINY_CONFIGS[name]()).eval()
    n_linear = sum(type(m) in (Linear, LinearActivation) for m in model.modules())
    swapped = quantize_linears_(model)
    assert swapped >= n_linear > 0
    assert not any(type(m) in (Linear, LinearActivation) for m in model.modules())
    for module in model.modules():
        if hasattr(module, "tied_head") and hasattr(module, "embed_tokens"):
            assert isinstance(module.tied_head, Int8Linear), f"{name}: tied output projection left in float"


def test_tied_head_logits_follow_the_embedding():
    torch.manual_seed(0)
    model = get_model_info("whisper").model_class().from_config(TINY_CONFIGS["whisper"]()).eval()
    decoder = model.decoder
    x = torch.randn(2, 3, decoder.cfg.n_text_state)
    with torch.no_grad():
        ref = decoder.logits(x)
        quant = copy.deepcopy(model)
        quantize_linears_(quant, skip=("encoder",))
        got = quant.decoder.logits(x)
    assert got.shape == ref.shape and _cos(got, ref) > 0.999
    assert not any(isinstance(m, Int8Linear) for m in quant.encoder.modules())


def test_unknown_modes_are_refused():
    with pytest.raises(ValueError, match="quantize must be None or 'int8'"):
        EngineConfig(quantize="int4")
    with pytest.raises(ValueError, match="unknown quantization"):
        quantize_linears_(torch.nn.Sequential(), "fp8")


@pytest.mark.real_weights
def test_int8_whisper_base_transcribes_like_float32(manifest):
    import oasr
    from oasr.metrics import normalize_text
    from oasr.models.bundled import bundled_path

    if bundled_path("whisper-base") is None:
        pytest.skip("whisper-base weights are not installed")
    paths = [
        row["path"] for row in manifest if row["audio"] in ("jfk.wav", "sense_and_sensibility_01_austen_64kb-0870.wav")
    ]
    assert len(paths) == 2
    ref = oasr.ASREngine("whisper-base").transcribe(paths, beam_size=1, language="en")
    engine = oasr.ASREngine("whisper-base", quantize="int8")
    assert sum(isinstance(m, Int8Linear) for m in engine.model.modules()) > 50
    got = engine.transcribe(paths, beam_size=1, language="en")
    for r, g in zip(ref, got):
        assert normalize_text(g.text, "en") == normalize_text(r.text, "en")


def test_cli_quantize_flag_reaches_the_engine_config(capsys):
    from oasr.cli.common import engine_extras
    from oasr.cli.main import build_parser

    args = build_parser().parse_args(["transcribe", "x.wav", "--quantize", "int8"])
    assert engine_extras(args)["quantize"] == "int8"
    args = build_parser().parse_args(["serve", "--model", "m", "--quantize", "int8"])
    assert engine_extras(args)["quantize"] == "int8"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["transcribe", "x.wav", "--quantize", "int4"])
    assert "invalid choice: 'int4'" in capsys.readouterr().err
