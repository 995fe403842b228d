"""int8 quantisation as the checkpoint loads (``quantize=`` of the loaders): the same int8
layers as quantising a loaded float model, without the float32 linear weights ever being
allocated, and a peak RSS below float32's."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from oasr.layers import Linear
from oasr.layers.linear import LinearActivation
from oasr.layers.quant import (
    QUANT_BLOCK_ROWS,
    Int8Linear,
    linear_weights_on_meta,
    quantize_linears_,
    quantize_linears_from_checkpoint_,
)
from oasr.models.registry import _skip_init, get_model_info
from tests.models.tiny_configs import TINY_CONFIGS


def test_blocked_rounding_equals_the_whole_matrix_at_once():
    torch.manual_seed(0)
    w = torch.randn(QUANT_BLOCK_ROWS * 2 + 5, 24) * torch.rand(QUANT_BLOCK_ROWS * 2 + 5, 1)
    q = Int8Linear.from_weight(w)
    scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127.0
    assert torch.equal(q.scale, scale)
    assert torch.equal(q.qweight, torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))


def test_fbgemm_packing_keeps_the_int8_values():
    pytest.importorskip("torch.ao.quantization")
    torch.manual_seed(0)
    q = Int8Linear.from_weight(torch.randn(40, 32), torch.randn(40))
    packed = q._packed_weight()
    weight, _ = torch.ops.quantized.linear_unpack(packed)
    assert torch.equal(weight.int_repr(), q.qweight)


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_quantised_at_load_equals_quantised_after(name):
    torch.manual_seed(0)
    cls = get_model_info(name).model_class()
    source = cls.from_config(TINY_CONFIGS[name]()).eval()
    checkpoint = {k: v.clone() for k, v in source.state_dict().items()}
    after = quantize_linears_(source) and source  # the old way: load in float, then quantise

    with _skip_init(), linear_weights_on_meta():
        model = cls.from_config(TINY_CONFIGS[name]())
    linears = [m for m in model.modules() if type(m) in (Linear, LinearActivation)]
    assert linears and all(m.weight.is_meta for m in linears)  # nothing allocated for them
    state = dict(checkpoint)
    used, int8_buffers = quantize_linears_from_checkpoint_(model, state)
    assert used and not any(k in state for k in used)  # taken out of the checkpoint as used
    assert not any(p.is_meta for p in model.parameters())
    report = model.load_weights(state)
    assert not (report.missing - int8_buffers), sorted(report.missing - int8_buffers)[:5]
    quantize_linears_(model.eval())  # tied heads (and anything the load hooks reshaped)

    got, want = model.state_dict(), after.state_dict()
    assert got.keys() == want.keys()
    for key in want:
        assert torch.equal(got[key], want[key]), f"{name}: {key}"
    assert [type(m) for m in model.modules()] == [type(m) for m in after.modules()]


# VmHWM, not ru_maxrss: a child's ru_maxrss starts at its parent's peak (Linux keeps it across
# fork and exec), so a child of a large pytest process would report pytest's size.
_PEAK = """
import sys
from oasr.models.loaders import load_pretrained
load_pretrained("whisper-base", device="cpu", quantize=None if sys.argv[1] == "float32" else sys.argv[1])
with open("/proc/self/status") as f:
    print(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
"""


@pytest.mark.slow
@pytest.mark.real_weights
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmHWM from /proc/self/status (Linux)")
def test_int8_whisper_base_peak_rss_is_below_float32():
    from oasr.models.bundled import bundled_path

    if bundled_path("whisper-base") is None:
        pytest.skip("whisper-base weights are not installed")

    def peak_kib(mode: str) -> int:
        proc = subprocess.run([sys.executable, "-c", _PEAK, mode], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout.split()[-1])

    float32, int8 = peak_kib("float32"), peak_kib("int8")
    # whisper-base's linear layers are ~200 MB in float32: int8 must save a good part of it
    assert int8 < float32 - 50 * 1024, (float32, int8)
