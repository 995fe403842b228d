"""The shared conformer sublayers, rotary embedding and CTC projection against
plain torch.nn / transformers computations."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers import BatchNorm1d, ConformerConvolution, CtcProjection, FeedForward, NeoxRotaryEmbedding
from oasr.models.base import PAD_LOGIT


def _reference_conv(mod: ConformerConvolution, x: torch.Tensor) -> torch.Tensor:
    """The module's maths with torch.nn layers over one unpadded row."""
    c, k = mod.channels, mod.kernel_size
    pw1, dw, pw2 = nn.Conv1d(c, 2 * c, 1), nn.Conv1d(c, c, k, groups=c), nn.Conv1d(c, c, 1)
    for ref, ours in ((pw1, mod.pointwise_conv1), (dw, mod.depthwise_conv), (pw2, mod.pointwise_conv2)):
        ref.load_state_dict(ours.state_dict())
    bn = nn.BatchNorm1d(c).eval()
    bn.load_state_dict(mod.norm.state_dict())
    y = F.glu(pw1(x.transpose(1, 2)), dim=1)
    y = dw(F.pad(y, mod.padding))
    return pw2(F.silu(bn(y))).transpose(1, 2)


def _randomize(mod: nn.Module) -> None:
    with torch.no_grad():
        for b in mod.buffers():
            if b.is_floating_point():
                b.uniform_(0.5, 1.5)


@pytest.mark.parametrize(("kernel", "padding"), [(5, None), (32, (15, 16)), (4, (3, 0))])
def test_conv_module_matches_torch_nn(kernel, padding):
    torch.manual_seed(0)
    mod = ConformerConvolution(8, kernel, padding=padding).eval()
    _randomize(mod)
    x = torch.randn(1, 40, 8)
    torch.testing.assert_close(mod(x), _reference_conv(mod, x), atol=1e-5, rtol=1e-5)


def test_conv_module_padded_batch_equals_single_rows():
    torch.manual_seed(1)
    mod = ConformerConvolution(8, 7, norm="layer_norm").eval()
    rows = [torch.randn(1, n, 8) for n in (30, 17, 5)]
    batch = torch.zeros(3, 30, 8)
    mask = torch.zeros(3, 30, dtype=torch.bool)
    for i, r in enumerate(rows):
        batch[i, : r.shape[1]] = r[0]
        batch[i, r.shape[1] :] = 100.0  # garbage in the padding must not leak
        mask[i, : r.shape[1]] = True
    out = mod(batch, mask)
    for i, r in enumerate(rows):
        n = r.shape[1]
        torch.testing.assert_close(out[i, :n], mod(r)[0], atol=1e-5, rtol=1e-5)
        assert torch.all(out[i, n:] == 0)


def test_conv_module_refuses_unbalanced_padding():
    with pytest.raises(ValueError, match="explicit"):
        ConformerConvolution(8, 32)
    with pytest.raises(ValueError, match="keep the length"):
        ConformerConvolution(8, 5, padding=(1, 1))
    with pytest.raises(ValueError, match="norm"):
        ConformerConvolution(8, 5, norm="group_norm")


def test_feed_forward_names_and_maths():
    torch.manual_seed(2)
    ff = FeedForward(8, 16, activation="relu", bias=False, names=("linear1", "linear2"))
    assert set(ff.state_dict()) == {"linear1.weight", "linear2.weight"}
    x = torch.randn(3, 8)
    ref = F.linear(F.relu(F.linear(x, ff.linear1.weight)), ff.linear2.weight)
    torch.testing.assert_close(ff(x), ref)


def test_batch_norm_matches_torch_eval():
    torch.manual_seed(3)
    ours = BatchNorm1d(6, eps=1e-3)
    _randomize(ours)
    with torch.no_grad():
        ours.weight.normal_()
        ours.bias.normal_()
    ref = nn.BatchNorm1d(6, eps=1e-3).eval()
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(2, 6, 9)
    torch.testing.assert_close(ours(x), ref(x))


def test_neox_rotary_matches_transformers():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    torch.manual_seed(4)
    rope = NeoxRotaryEmbedding(16, base=10000.0)
    q, k = torch.randn(2, 3, 11, 16), torch.randn(2, 3, 11, 16)
    pos = torch.arange(11)
    cos, sin = rope.cos_sin(pos)
    ref_q, ref_k = apply_rotary_pos_emb(q, k, cos[None], sin[None])
    torch.testing.assert_close(rope.apply_rotary(q, cos, sin), ref_q)
    torch.testing.assert_close(rope.apply_rotary(k, cos, sin), ref_k)
    # Per-row positions (B, T) give the same as shared ones.
    cos_b, sin_b = rope.cos_sin(pos.expand(2, 11))
    torch.testing.assert_close(rope.apply_rotary(q, cos_b, sin_b), ref_q)
    # Position 0 is the identity.
    torch.testing.assert_close(rope.apply_rotary(q[:, :, :1], cos[:1], sin[:1]), q[:, :, :1])


def test_ctc_projection_pads_to_alignment_and_never_emits_padding():
    torch.manual_seed(5)
    head = CtcProjection(16, 13, bias=False)
    assert head.padded_size == 16 and head.bias is not None
    w = torch.randn(13, 16)
    wp, bp = head.pad_checkpoint(w, None)
    assert wp.shape == (16, 16) and bp.shape == (16,)
    assert torch.all(bp[13:] == PAD_LOGIT) and torch.all(bp[:13] == 0)
    with torch.no_grad():
        head.weight.copy_(wp)
        head.bias.copy_(bp)
    x = torch.randn(4, 7, 16) * 100
    lp = head(x)
    assert lp.shape == (4, 7, 13) and lp.dtype == torch.float32
    torch.testing.assert_close(lp, F.log_softmax(F.linear(x, w), dim=-1))
    assert int(head.logits(x).argmax(-1).max()) < 13
    with pytest.raises(ValueError, match="13"):
        head.pad_checkpoint(torch.randn(12, 16), None)


def test_ctc_projection_aligned_vocab_is_unpadded():
    head = CtcProjection(16, 24)
    w, b = torch.randn(24, 16), torch.randn(24)
    assert head.pad_checkpoint(w, b) == (w, b)


def test_rotary_frequencies_stay_float32_under_a_half_model():
    rope = NeoxRotaryEmbedding(16)
    holder = torch.nn.ModuleDict({"rope": rope}).to(torch.bfloat16)
    assert holder["rope"].inv_freq.dtype == torch.float32
    cos, _ = rope.cos_sin(torch.arange(5000), dtype=torch.bfloat16)
    ref, _ = NeoxRotaryEmbedding(16).cos_sin(torch.arange(5000))
    assert cos.dtype == torch.bfloat16
    assert (cos.float() - ref).abs().max() < 1e-2
