"""Transformer-XL relative attention (oasr.layers.relpos_xl): the shift against the scores
computed distance by distance, the position table against transformers', and the whole
attention against an explicit softmax."""

from __future__ import annotations

import pytest
import torch

from oasr.layers.relpos_xl import RelPositionMultiHeadAttentionXL, rel_shift, xl_relative_positions


def _direct_position_scores(q, p, bias_v):
    """(q_i + v) . p[T - 1 - (i - j)] for every (i, j), one pair at a time.

    q: (B, H, T, Dh), p: (2T - 1, H, Dh) projected positions, bias_v: (H, Dh)."""
    b, h, t, _ = q.shape
    out = torch.empty(b, h, t, t, dtype=q.dtype)
    for i in range(t):
        for j in range(t):
            out[:, :, i, j] = ((q[:, :, i] + bias_v) * p[t - 1 - (i - j)]).sum(-1)
    return out


@pytest.mark.parametrize("t", [1, 2, 7])
def test_rel_shift_is_the_relative_score(t):
    g = torch.Generator().manual_seed(t)
    b, h, dh = 2, 3, 4
    q = torch.randn(b, h, t, dh, generator=g, dtype=torch.float64)
    p = torch.randn(2 * t - 1, h, dh, generator=g, dtype=torch.float64)
    bias_v = torch.randn(h, dh, generator=g, dtype=torch.float64)
    against_all = torch.einsum("bhid,phd->bhip", q + bias_v[:, None], p)  # (B, H, T, 2T - 1)
    shifted = rel_shift(against_all)
    assert shifted.shape == (b, h, t, t)
    torch.testing.assert_close(shifted, _direct_position_scores(q, p, bias_v), rtol=0, atol=1e-12)


def test_rel_shift_of_a_non_contiguous_input():
    x = torch.randn(5, 2, 3, 4).permute(2, 1, 3, 0)[..., :3, :5]  # (3, 2, 3, 5): a strided view
    expect = torch.stack([torch.stack([x[..., i, 2 - i + j] for j in range(3)], -1) for i in range(3)], -2)
    torch.testing.assert_close(rel_shift(x), expect, rtol=0, atol=0)


def test_rel_shift_agrees_with_transformers_pad_and_reshape():
    from transformers.models.parakeet.modeling_parakeet import ParakeetEncoderAttention

    x = torch.randn(2, 3, 6, 11, dtype=torch.float64)
    theirs = ParakeetEncoderAttention._rel_shift(None, x)[..., :6]
    torch.testing.assert_close(rel_shift(x), theirs, rtol=0, atol=0)


def test_rel_shift_refuses_other_shapes():
    with pytest.raises(ValueError, match="2T - 1"):
        rel_shift(torch.zeros(1, 1, 4, 8))


def test_position_table_matches_transformers():
    from transformers import ParakeetEncoderConfig
    from transformers.models.parakeet.modeling_parakeet import ParakeetEncoderRelPositionalEncoding

    cfg = ParakeetEncoderConfig(hidden_size=48)
    theirs = ParakeetEncoderRelPositionalEncoding(cfg)(torch.zeros(1, 37, 48))[0]
    ours = xl_relative_positions(37, 48)
    assert ours.shape == (73, 48)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    # Row T - 1 is distance 0: sin 0 = 0 in the even channels, cos 0 = 1 in the odd ones.
    assert torch.equal(ours[36, 0::2], torch.zeros(24)) and torch.equal(ours[36, 1::2], torch.ones(24))


def test_attention_matches_an_explicit_softmax():
    torch.manual_seed(0)
    d, h, t = 16, 4, 9
    attn = RelPositionMultiHeadAttentionXL(d, h).double().eval()
    with torch.no_grad():
        attn.bias_u.normal_()
        attn.bias_v.normal_()
    x = torch.randn(3, t, d, dtype=torch.float64)
    lengths = torch.tensor([9, 5, 1])
    pos = xl_relative_positions(t, d, dtype=torch.float64)
    with torch.no_grad():
        out = attn(x, pos, lengths)
        q = attn.linear_q(x).view(3, t, h, -1).transpose(1, 2)
        k = attn.linear_k(x).view(3, t, h, -1).transpose(1, 2)
        v = attn.linear_v(x).view(3, t, h, -1).transpose(1, 2)
        p = attn.linear_pos(pos).view(2 * t - 1, h, -1)
        scores = (q + attn.bias_u[:, None]) @ k.transpose(-1, -2) + _direct_position_scores(q, p, attn.bias_v)
        scores = scores / (d // h) ** 0.5
        keep = torch.arange(t)[None, :] < lengths[:, None]
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
        expect = attn.linear_out((scores.softmax(-1) @ v).transpose(1, 2).reshape(3, t, d))
    for row, n in enumerate(lengths.tolist()):  # valid query frames
        torch.testing.assert_close(out[row, :n], expect[row, :n], rtol=0, atol=1e-12)
    # A row's valid frames do not depend on what sits in its padding.
    x2 = x.clone()
    x2[1, 5:] = 100.0
    with torch.no_grad():
        out2 = attn(x2, pos, lengths)
    torch.testing.assert_close(out2[1, :5], out[1, :5], rtol=0, atol=1e-12)
