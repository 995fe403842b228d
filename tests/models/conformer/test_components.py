"""The family's pieces against the maths they implement, written out in plain torch:
WeNet's rel-pos attention, chunk masks, causal convolution, decoder scoring, fbank framing."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oasr.audio.fbank import KaldiFbank
from oasr.layers import ConformerConvolution
from oasr.layers.relpos import RelPositionalEncoding, RelPositionMultiHeadedAttention, wenet_sinusoids
from oasr.models.base import FeatureSpec
from oasr.models.conformer.model import _wenet_causal_conv, chunk_attention_mask
from oasr.models.decoders.transformer_decoder import (
    BiTransformerDecoder,
    TransformerDecoder,
    TransformerDecoderConfig,
    add_sos_eos,
)


def _wenet_chunk_mask(size: int, chunk: int, left: int) -> torch.Tensor:
    ret = torch.zeros(size, size, dtype=torch.bool)
    for i in range(size):
        start = 0 if left < 0 else max((i // chunk - left) * chunk, 0)
        ret[i, start : min((i // chunk + 1) * chunk, size)] = True
    return ret


@pytest.mark.parametrize("size, chunk, left", [(1, 4, -1), (9, 4, -1), (9, 4, 0), (17, 3, 2), (16, 16, 1), (5, 8, 1)])
def test_chunk_mask_is_wenets(size, chunk, left):
    assert torch.equal(chunk_attention_mask(size, chunk, left), _wenet_chunk_mask(size, chunk, left))


def test_sinusoids_are_wenets_interleaved_table():
    pe = wenet_sinusoids(7, 6)
    pos, i = 5, 1
    assert pe[pos, 2 * i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / 6)), abs=1e-6)
    assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos / 10000 ** (2 * i / 6)), abs=1e-6)
    enc = RelPositionalEncoding(6, max_len=4)
    x, pos_emb = enc(torch.ones(1, 7, 6))  # grows past max_len
    assert torch.equal(pos_emb[0], pe) and torch.allclose(x, torch.full_like(x, math.sqrt(6)))


@torch.no_grad()
def test_rel_pos_attention_is_wenets_maths():
    torch.manual_seed(0)
    h, d, t = 2, 8, 6
    att = RelPositionMultiHeadedAttention(h, d).double()
    x = torch.randn(2, t, d, dtype=torch.float64)
    pos = wenet_sinusoids(t, d).double()[None]
    lens = torch.tensor([6, 4])
    chunk = chunk_attention_mask(t, 2, -1)
    got = att(x, pos, key_lengths=lens, chunk_mask=chunk)

    def split(y):  # (B, T, D) -> (B, H, T, dk)
        return y.view(y.shape[0], -1, h, d // h).transpose(1, 2)

    q = att.linear_q(x).view(2, t, h, d // h)
    k, v = split(att.linear_k(x)), split(att.linear_v(x))
    p = split(att.linear_pos(pos))
    ac = ((q + att.pos_bias_u).transpose(1, 2)) @ k.transpose(-2, -1)
    bd = ((q + att.pos_bias_v).transpose(1, 2)) @ p.transpose(-2, -1)  # no rel_shift, as WeNet
    scores = (ac + bd) / math.sqrt(d // h)
    allowed = (torch.arange(t)[None, :] < lens[:, None])[:, None, :] & chunk[None]
    scores = scores.masked_fill(~allowed[:, None], -math.inf)
    ref = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, t, d)
    ref = att.linear_out(ref)
    valid = torch.arange(t)[None, :] < lens[:, None]
    torch.testing.assert_close(got[valid], ref[valid], atol=1e-12, rtol=0)


@torch.no_grad()
def test_causal_conv_pads_the_input_as_wenet_does():
    torch.manual_seed(0)
    c, k, t = 6, 5, 11
    conv = ConformerConvolution(c, k, norm="layer_norm", padding=(k - 1, 0)).double()
    for p in conv.parameters():
        p.add_(0.5 * torch.randn_like(p))
    x = torch.randn(2, t, c, dtype=torch.float64)
    # WeNet's ConvolutionModule with lorder = k - 1: zero frames before pointwise_conv1.
    y = F.pad(x.transpose(1, 2), (k - 1, 0))
    y = F.glu(F.conv1d(y, conv.pointwise_conv1.weight, conv.pointwise_conv1.bias), dim=1)
    y = F.conv1d(y, conv.depthwise_conv.weight, conv.depthwise_conv.bias, groups=c)
    y = F.layer_norm(y.transpose(1, 2), (c,), conv.norm.weight, conv.norm.bias, conv.norm.eps).transpose(1, 2)
    y = F.conv1d(F.silu(y), conv.pointwise_conv2.weight, conv.pointwise_conv2.bias).transpose(1, 2)
    got = _wenet_causal_conv(conv, x, torch.ones(2, t, dtype=torch.bool))
    torch.testing.assert_close(got, y, atol=1e-12, rtol=0)
    # Padding after the GLU (the shared module) differs exactly in the first k - 1 frames.
    shared = conv(x)
    torch.testing.assert_close(shared[:, k - 1 :], y[:, k - 1 :], atol=1e-12, rtol=0)
    assert (shared[:, : k - 1] - y[:, : k - 1]).abs().max() > 1e-3


def _decoder_cfg(**kw) -> TransformerDecoderConfig:
    base = dict(vocab_size=13, d_model=8, attention_heads=2, linear_units=16, num_blocks=2)
    return TransformerDecoderConfig(**{**base, **kw})


@torch.no_grad()
def test_score_hypotheses_equals_incremental_decoding():
    torch.manual_seed(0)
    cfg = _decoder_cfg(bidirectional=True, r_num_blocks=1)
    dec = BiTransformerDecoder(cfg).double().eval()
    memory = torch.randn(1, 9, 8, dtype=torch.float64)
    hyps = [[3, 4, 5], [], [7, 7]]

    def incremental(side: TransformerDecoder, seq: list[int], mem_len: int) -> float:
        tokens, cache, total = [cfg.sos], None, 0.0
        for target in [*seq, cfg.eos]:
            logp, cache = side.forward_one_step(
                memory[:, :mem_len], torch.tensor([mem_len]), torch.tensor([tokens]), cache
            )
            total += float(logp[0, target])
            tokens.append(target)
        return total

    left = [incremental(dec.left_decoder, h, 7) for h in hyps]
    right = [incremental(dec.right_decoder, h[::-1], 7) for h in hyps]
    # encoder frames past encoder_len are ignored
    torch.testing.assert_close(dec.score_hypotheses(memory, 7, hyps, 0.0), torch.tensor(left, dtype=torch.float64))
    mixed = [0.7 * a + 0.3 * b for a, b in zip(left, right)]
    got = dec.score_hypotheses(memory, 7, hyps, 0.3)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, torch.tensor(mixed, dtype=torch.float64))
    # a one-direction decoder has no right-to-left score (WeNet ignores reverse_weight then)
    plain = BiTransformerDecoder(_decoder_cfg()).double().eval()
    plain.left_decoder.load_state_dict(dec.left_decoder.state_dict())
    torch.testing.assert_close(plain.score_hypotheses(memory, 7, hyps, 0.3), torch.tensor(left, dtype=torch.float64))


def test_add_sos_eos_pads_with_eos():
    ys, lens = add_sos_eos([[1, 2], [], [3]], sos=9, eos=8)
    assert ys.tolist() == [[9, 1, 2], [9, 8, 8], [9, 3, 8]] and lens.tolist() == [3, 1, 2]


def test_fbank_framing_and_spec():
    fb = KaldiFbank.from_spec(FeatureSpec("kaldi_fbank", 16000, {"num_mel_bins": 40, "frame_shift": 10}))
    assert fb.n_features == 40 and fb.frame_shift_s == pytest.approx(0.01)
    assert fb(np.zeros(399, dtype=np.float32)).shape == (0, 40)
    assert fb(np.random.default_rng(0).uniform(-0.1, 0.1, 16000).astype(np.float32)).shape == (98, 40)
    silence = fb(np.zeros(800, dtype=np.float32))
    assert torch.allclose(silence, torch.full_like(silence, math.log(torch.finfo(torch.float32).eps)))
    with pytest.raises(ValueError, match="unknown param"):
        KaldiFbank.from_spec(FeatureSpec("kaldi_fbank", 16000, {"use_energy": True}))
    with pytest.raises(ValueError, match="energy_floor"):
        KaldiFbank.from_spec(FeatureSpec("kaldi_fbank", 16000, {"energy_floor": 1.0}))
    assert KaldiFbank.from_spec(fb.to_spec()).to_spec() == fb.to_spec()
