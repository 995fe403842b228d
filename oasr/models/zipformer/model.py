"""icefall Zipformer2 encoder and its CTC model.

    feats (B, T, F) -> Conv2dSubsampling (3 convs + ConvNeXt, T -> (T - 7) // 2) -> BiasNorm
    -> stacks i = 0..S-1, each at its own frame rate (downsampling_factor[i]):
         [SimpleDownsample ->] N x ZipformerLayer [-> SimpleUpsample -> bypass lerp]
       (the channels are cut / zero-padded to each stack's width on the way in; the output
       takes every channel from the most recent stack that has it)
    -> SimpleDownsample x2 -> (B, ceil(T' / 2), max(encoder_dim)) -> ctc_output -> log-probs

A layer: the attention weights are computed once from the layer input and feed the
NonlinAttention (first head) and both SelfAttentions:

    x = x + FF1(x); x = x + NonlinAttn(x, w); x = x + SelfAttn1(x, w); x = x + Conv1(x)
    x = x + FF2(x); x = lerp(x_in, x, bypass_mid); x = x + SelfAttn2(x, w); x = x + Conv2(x)
    x = x + FF3(x); x = BiasNorm(x); out = lerp(x_in, x, bypass)

Tensor names follow icefall's ``AsrModel`` state dict under the model's ``encoder.`` prefix
(``encoder.encoder_embed.*``, ``encoder.encoder.*``), and ``ctc_output.1.*`` -> ``ctc_output.*``
(the converter renames them). The blocks that own parameters of their own (BiasNorm, the bypass
lerp, SimpleDownsample, the chunk-causal convolution) are in ``oasr.layers.zipformer``.

Padding never leaks into a row's valid frames, so a padded batch gives each row what it
gets alone (icefall's own batches do not: its downsample repeats the batch's last frame,
and its ConvNeXt and chunk-causal convolution see padding): the embed zeroes frames past
each row's end before the ConvNeXt, downsampling repeats each row's own last frame,
attention masks padded keys, the convolution modules zero padded frames, and a row shorter
than the chunk scales its chunk as it would alone. A causal model runs offline with
icefall's chunked attention mask and chunk-causal convolutions (chunk 16, left context 128),
its features padded by 30 frames of log(1e-10) first, as icefall's decode.py evaluates them.

A causal model also streams (``streaming_kind`` "slot"), as icefall's streaming_decode.py
runs it: windows of 2 * chunk + 13 feature frames at a stride of 2 * chunk (chunk in embed
frames, 20 ms each; the config's ``chunk_size`` unless the engine asks for another), each
stream padded with 13 + 30 frames of log(1e-10) at its end and a short last window with more;
every module has a ``streaming_forward`` that continues from the stream's caches (the
ConvNeXt's last frames, each layer's last ``left_context_frames // factor`` keys, nonlin
attention inputs and values, each convolution's tail) and masks the cached frames the stream
has not filled yet by its processed length. Those caches are icefall's state list, declared
one ``StreamStateSpec`` each, so the engine's slot runtime keeps them in fixed buffers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers import Conv1d, Conv2d, Linear, Tanh
from oasr.layers.zipformer import BiasNorm, Bypass, ChunkCausalDepthwiseConv1d, SimpleDownsample, swoosh_l, swoosh_r
from oasr.models.base import (
    BaseEncoder,
    StreamingGeometry,
    StreamingNotSupported,
    StreamingStates,
    StreamStateSpec,
    chunk_units,
)
from oasr.models.ctc import EncoderCtcModel
from oasr.models.zipformer.config import ZipformerConfig, ZipformerEncoderConfig

MASK_SCORE = -1000.0  # icefall fills masked attention scores with -1000, not -inf
LOG_EPS = math.log(1e-10)  # icefall's padding value for log-mel features
# The embed turns T frames into (T - 7) // 2 and its ConvNeXt looks 3 frames ahead: a window of
# 2 * chunk + 13 feature frames yields exactly ``chunk`` embed frames.
EMBED_WINDOW_PAD = 7 + 2 * 3
# icefall's streaming_decode.py pads each utterance with EMBED_WINDOW_PAD + 30 LOG_EPS frames
# (DecodeStream.set_features(..., tail_pad_len=30)) and encodes windows while any is left.
STREAMING_TAIL_FRAMES = EMBED_WINDOW_PAD + 30


def _valid(lengths: torch.Tensor, n: int) -> torch.Tensor:
    """(B,) lengths -> (B, n) bool, True at frames inside each row."""
    return torch.arange(n, device=lengths.device)[None, :] < lengths[:, None]


class ConvNeXt(nn.Module):
    """The embed's ConvNeXt block over (time, freq): depthwise 7x7, 1x1 up (x3), SwooshL,
    1x1 down, residual.

    Shapes:
        x: (B, C, T, W) -> (B, C, T, W)
    """

    def __init__(self, channels: int, kernel: int = 7) -> None:
        super().__init__()
        self.depthwise_conv = Conv2d(channels, channels, kernel, padding=kernel // 2, groups=channels)
        self.pointwise_conv1 = Conv2d(channels, 3 * channels, 1)
        self.pointwise_conv2 = Conv2d(3 * channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pointwise_conv2(swoosh_l(self.pointwise_conv1(self.depthwise_conv(x))))
        return x + h

    def streaming_forward(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One streaming chunk: the depthwise kernel reads the cached frames before the chunk
        and the frames after it that the chunk's window carries (its look-ahead).

        Shapes:
            x: (B, C, T + k // 2, W) the chunk and its look-ahead, cache: (B, C, k // 2, W)
            -> (B, C, T, W), new cache (the chunk's last k // 2 frames)
        """
        dw = self.depthwise_conv
        pad_t, pad_f = dw.weight.shape[-2] // 2, dw.weight.shape[-1] // 2
        t = x.shape[2] - pad_t
        full = torch.cat((cache, x), dim=2)  # (B, C, pad + T + pad, W)
        h = F.conv2d(full, dw.weight, dw.bias, 1, (0, pad_f), 1, dw.groups)  # (B, C, T, W)
        h = self.pointwise_conv2(swoosh_l(self.pointwise_conv1(h)))
        return x[:, :, :t] + h, full[:, :, t : t + pad_t]


class Conv2dSubsampling(nn.Module):
    """icefall's embed: conv 3x3 (freq-padded), conv 3x3 stride 2, conv 3x3 stride (1, 2),
    each followed by SwooshR, then a ConvNeXt; the (C, W) map of every frame is flattened
    channel-major, projected to the first stack's width and BiasNorm-ed.

    ``conv`` keeps icefall's ``nn.Sequential`` indices (0, 4, 7: the others hold no weights).

    Shapes:
        feats: (B, T, F), lengths: (B,) -> (B, (T - 7) // 2, D), (B,)
    """

    def __init__(self, num_mel_bins: int, channels: tuple[int, int, int], out_dim: int) -> None:
        super().__init__()
        c1, c2, c3 = channels
        self.conv = nn.ModuleDict(
            {
                "0": Conv2d(1, c1, 3, padding=(0, 1)),
                "4": Conv2d(c1, c2, 3, stride=2),
                "7": Conv2d(c2, c3, 3, stride=(1, 2)),
            }
        )
        self.convnext = ConvNeXt(c3)
        self.out_width = ((num_mel_bins - 1) // 2 - 1) // 2
        self.out = Linear(self.out_width * c3, out_dim)
        self.out_norm = BiasNorm(out_dim)

    @staticmethod
    def output_lengths(lengths: torch.Tensor) -> torch.Tensor:
        return (lengths - 7) // 2

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = feats[:, None]  # (B, 1, T, F)
        for conv in self.conv.values():
            x = swoosh_r(conv(x))
        out_lens = self.output_lengths(lengths)
        # The ConvNeXt's depthwise kernel looks 3 frames ahead: past a row's end it must
        # see zeros, as that row alone would.
        x = x * _valid(out_lens, x.shape[2])[:, None, :, None].to(x.dtype)
        x = self.convnext(x)
        b, c, t, w = x.shape
        x = x.transpose(1, 2).reshape(b, t, c * w)  # (B, T', C * W), channel-major
        return self.out_norm(self.out(x)), out_lens

    def streaming_forward(self, feats: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One streaming window: every frame is real or LOG_EPS padding (no length mask); the
        ConvNeXt continues from the cached frames of the window before.

        Shapes:
            feats: (B, T, F), cache: (B, C, 3, W) -> (B, (T - 7) // 2 - 3, D), new cache
        """
        x = feats[:, None]  # (B, 1, T, F)
        for conv in self.conv.values():
            x = swoosh_r(conv(x))
        x, cache = self.convnext.streaming_forward(x, cache)
        b, c, t, w = x.shape
        x = x.transpose(1, 2).reshape(b, t, c * w)  # (B, T', C * W), channel-major
        return self.out_norm(self.out(x)), cache


@functools.lru_cache(maxsize=32)
def _compact_rel_pos_f32(t: int, dim: int) -> torch.Tensor:
    """icefall's CompactRelPositionalEncoding for offsets -(t-1)..(t-1), computed in float32
    as icefall does (then cast), on the CPU.

    Shapes:
        -> (2t - 1, dim) float32
    """
    x = torch.arange(-(t - 1), t).to(torch.float32)[:, None]
    freqs = 1 + torch.arange(dim // 2)
    compression = dim**0.5
    x_compressed = compression * x.sign() * ((x.abs() + compression).log() - math.log(compression))
    x_atan = (x_compressed / (dim / (2.0 * math.pi))).atan()
    pe = torch.zeros(x.shape[0], dim)
    pe[:, 0::2] = (x_atan * freqs).cos()
    pe[:, 1::2] = (x_atan * freqs).sin()
    pe[:, -1] = 1.0  # a constant channel, for a bias
    return pe


def compact_rel_positions(t: int, dim: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Position encodings of relative offsets -(t-1)..(t-1), ascending. -> (2t - 1, dim)"""
    return _compact_rel_pos_f32(t, dim).to(device=device, dtype=dtype)


@functools.lru_cache(maxsize=64)
def streaming_rel_positions(t: int, left: int, dim: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Position encodings of the offsets a streaming chunk of ``t`` queries sees over ``left``
    cached keys and its own: -(t + left - 1)..(t - 1), ascending. Kept on the device (a
    captured step must not copy from the host).

    Shapes:
        -> (2t + left - 1, dim)
    """
    return _compact_rel_pos_f32(t + left, dim)[: 2 * t + left - 1].to(device=device, dtype=dtype)


class RelPositionMultiheadAttentionWeights(nn.Module):
    """Own module: attention *probabilities* with a relative-position term, materialised
    once per layer because three consumers share them (no waist attention returns them).

    ``in_proj`` gives queries, keys and positional queries; the positional score of query i
    against key j reads the projected encoding of offset j - i. Masked scores are set to
    -1000 as icefall does.

    Shapes:
        x: (B, T, D), pos_emb: (2T - 1, pos_dim), mask: (B | 1, T, T) bool (True = masked)
        -> (B, H, T, T)
    """

    def __init__(self, dim: int, pos_dim: int, num_heads: int, query_head_dim: int, pos_head_dim: int) -> None:
        super().__init__()
        self.num_heads, self.query_head_dim, self.pos_head_dim = num_heads, query_head_dim, pos_head_dim
        self.in_proj = Linear(dim, (2 * query_head_dim + pos_head_dim) * num_heads)
        self.linear_pos = Linear(pos_dim, num_heads * pos_head_dim, bias=False)

    def forward(self, x: torch.Tensor, pos_emb: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, t, _ = x.shape
        h, dq, dp = self.num_heads, self.query_head_dim, self.pos_head_dim
        proj = self.in_proj(x)
        q = proj[..., : h * dq].reshape(b, t, h, dq).transpose(1, 2)  # (B, H, T, dq)
        k = proj[..., h * dq : 2 * h * dq].reshape(b, t, h, dq).permute(0, 2, 3, 1)  # (B, H, dq, T)
        p = proj[..., 2 * h * dq :].reshape(b, t, h, dp).transpose(1, 2)  # (B, H, T, dp)
        scores = torch.matmul(q, k)  # (B, H, T, T)
        pos = self.linear_pos(pos_emb).reshape(2 * t - 1, h, dp).permute(1, 2, 0)  # (H, dp, 2T - 1)
        pos_scores = torch.matmul(p, pos).contiguous()  # (B, H, T, 2T - 1)
        # Relative shift: element (i, j) of the result is column (T - 1) - i + j (offset j - i).
        s0, s1, s2, s3 = pos_scores.stride()
        pos_scores = pos_scores.as_strided((b, h, t, t), (s0, s1, s2 - s3, s3), storage_offset=s3 * (t - 1))
        scores = scores + pos_scores
        if mask is not None:
            scores = scores.masked_fill(mask[:, None], MASK_SCORE)
        return scores.softmax(dim=-1)

    def streaming_forward(
        self, x: torch.Tensor, pos_emb: torch.Tensor, cached_key: torch.Tensor, key_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A chunk's probabilities over the cached keys and its own; the keys of the last
        ``L`` frames become the new cache.

        Shapes:
            x: (B, T, D), pos_emb: (2T + L - 1, pos_dim) (``streaming_rel_positions``),
            cached_key: (L, B, H * dq) (icefall's layout), key_mask: (B, L + T) bool (True = masked)
            -> (B, H, T, L + T), new cached_key (L, B, H * dq)
        """
        b, t, _ = x.shape
        h, dq, dp = self.num_heads, self.query_head_dim, self.pos_head_dim
        left = cached_key.shape[0]
        proj = self.in_proj(x)
        q = proj[..., : h * dq].reshape(b, t, h, dq).transpose(1, 2)  # (B, H, T, dq)
        keys = torch.cat((cached_key.transpose(0, 1), proj[..., h * dq : 2 * h * dq]), dim=1)  # (B, L + T, H * dq)
        n = keys.shape[1]
        k = keys.reshape(b, n, h, dq).permute(0, 2, 3, 1)  # (B, H, dq, L + T)
        p = proj[..., 2 * h * dq :].reshape(b, t, h, dp).transpose(1, 2)  # (B, H, T, dp)
        scores = torch.matmul(q, k)  # (B, H, T, L + T)
        pos = self.linear_pos(pos_emb).reshape(2 * t + left - 1, h, dp).permute(1, 2, 0)  # (H, dp, 2T + L - 1)
        pos_scores = torch.matmul(p, pos).contiguous()  # (B, H, T, 2T + L - 1)
        # Relative shift: element (i, j) is column (T - 1) - i + j, offset j - L - i (key j of
        # the cache + chunk against query i of the chunk).
        s0, s1, s2, s3 = pos_scores.stride()
        pos_scores = pos_scores.as_strided((b, h, t, n), (s0, s1, s2 - s3, s3), storage_offset=s3 * (t - 1))
        scores = (scores + pos_scores).masked_fill(key_mask[:, None, None, :], MASK_SCORE)
        return scores.softmax(dim=-1), keys[:, t:].transpose(0, 1)


class SelfAttention(nn.Module):
    """Values weighted by precomputed attention probabilities.

    Shapes:
        x: (B, T, D), weights: (B, H, T, T) -> (B, T, D)
    """

    def __init__(self, dim: int, num_heads: int, value_head_dim: int) -> None:
        super().__init__()
        self.in_proj = Linear(dim, num_heads * value_head_dim)
        self.out_proj = Linear(num_heads * value_head_dim, dim)

    def forward(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = weights.shape[1]
        v = self.in_proj(x).reshape(b, t, h, -1).transpose(1, 2)  # (B, H, T, dv)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(b, t, -1)  # (B, T, H * dv)
        return self.out_proj(out)

    def streaming_forward(
        self, x: torch.Tensor, weights: torch.Tensor, cached_val: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The chunk's values after the cached ones, weighted by the chunk's probabilities.

        Shapes:
            x: (B, T, D), weights: (B, H, T, L + T), cached_val: (L, B, H * dv)
            -> (B, T, D), new cached_val (L, B, H * dv)
        """
        b, t, _ = x.shape
        h = weights.shape[1]
        vals = torch.cat((cached_val.transpose(0, 1), self.in_proj(x)), dim=1)  # (B, L + T, H * dv)
        v = vals.reshape(b, vals.shape[1], h, -1).transpose(1, 2)  # (B, H, L + T, dv)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(b, t, -1)  # (B, T, H * dv)
        return self.out_proj(out), vals[:, t:].transpose(0, 1)


class NonlinAttention(nn.Module):
    """A tanh-gated projection averaged over time by the first head's attention
    probabilities, then gated again.

    Shapes:
        x: (B, T, D), weights: (B, H, T, T) -> (B, T, D)
    """

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.in_proj = Linear(dim, 3 * hidden)
        self.tanh = Tanh()
        self.out_proj = Linear(hidden, dim)

    def forward(self, x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        s, v, y = self.in_proj(x).chunk(3, dim=-1)
        v = v * self.tanh(s)  # (B, T, hidden)
        v = torch.matmul(weights[:, 0], v)  # first head only: (B, T, hidden)
        return self.out_proj(v * y)

    def streaming_forward(
        self, x: torch.Tensor, weights: torch.Tensor, cached: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The gated projection of the cached frames and the chunk's, averaged by the first head.

        Shapes:
            x: (B, T, D), weights: (B, H, T, L + T), cached: (1, B, L, hidden)
            -> (B, T, D), new cached (1, B, L, hidden)
        """
        t = x.shape[1]
        s, v, y = self.in_proj(x).chunk(3, dim=-1)
        vals = torch.cat((cached[0], v * self.tanh(s)), dim=1)  # (B, L + T, hidden)
        out = torch.matmul(weights[:, 0], vals)  # (B, T, hidden)
        return self.out_proj(out * y), vals[None, :, t:]


class FeedForward(nn.Module):
    """``out_proj(SwooshL(in_proj(x)))``.

    Shapes:
        x: (..., D) -> (..., D)
    """

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.in_proj = Linear(dim, hidden)
        self.out_proj = Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(swoosh_l(self.in_proj(x)))


class ConvolutionModule(nn.Module):
    """Sigmoid-gated projection, depthwise convolution (plain or chunk-causal), SwooshR,
    projection. Padded frames are zeroed before the depthwise kernel.

    Shapes:
        x: (B, T, D), valid: (B, T) bool, lengths: (B,) -> (B, T, D)
    """

    def __init__(self, dim: int, kernel: int, causal: bool) -> None:
        super().__init__()
        self.causal = causal
        self.in_proj = Linear(dim, 2 * dim)
        if causal:
            self.depthwise_conv: nn.Module = ChunkCausalDepthwiseConv1d(dim, kernel)
        else:
            self.depthwise_conv = Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        self.out_proj = Linear(dim, dim)

    def forward(self, x: torch.Tensor, valid: torch.Tensor, lengths: torch.Tensor, chunk_size: int) -> torch.Tensor:
        x, s = self.in_proj(x).chunk(2, dim=-1)
        x = (x * torch.sigmoid(s) * valid[..., None].to(x.dtype)).transpose(1, 2)  # (B, D, T)
        if self.causal:
            x = self.depthwise_conv(x, chunk_size, lengths)
        else:
            x = self.depthwise_conv(x)
        return self.out_proj(swoosh_r(x.transpose(1, 2)))

    def streaming_forward(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One whole chunk through the chunk-causal module (a causal model's).

        Shapes:
            x: (B, T, D), cache: (B, D, kernel // 2) -> (B, T, D), new cache
        """
        x, s = self.in_proj(x).chunk(2, dim=-1)
        x, cache = self.depthwise_conv.streaming_forward((x * torch.sigmoid(s)).transpose(1, 2), cache)
        return self.out_proj(swoosh_r(x.transpose(1, 2))), cache


class ZipformerLayer(nn.Module):
    """One Zipformer2 layer (see the module docstring for its order).

    Shapes:
        x: (B, T, D), pos_emb: (2T - 1, pos_dim), mask: (B | 1, T, T) bool,
        valid: (B, T) bool, lengths: (B,) -> (B, T, D)
    """

    def __init__(self, cfg: ZipformerEncoderConfig, i: int) -> None:
        super().__init__()
        d, ff = cfg.encoder_dim[i], cfg.feedforward_dim[i]
        heads = cfg.num_heads[i]
        self.self_attn_weights = RelPositionMultiheadAttentionWeights(
            d, cfg.pos_dim, heads, cfg.query_head_dim[i], cfg.pos_head_dim[i]
        )
        self.self_attn1 = SelfAttention(d, heads, cfg.value_head_dim[i])
        self.self_attn2 = SelfAttention(d, heads, cfg.value_head_dim[i])
        self.feed_forward1 = FeedForward(d, (ff * 3) // 4)
        self.feed_forward2 = FeedForward(d, ff)
        self.feed_forward3 = FeedForward(d, (ff * 5) // 4)
        self.nonlin_attention = NonlinAttention(d, 3 * d // 4)
        self.conv_module1 = ConvolutionModule(d, cfg.cnn_module_kernel[i], cfg.causal)
        self.conv_module2 = ConvolutionModule(d, cfg.cnn_module_kernel[i], cfg.causal)
        self.norm = BiasNorm(d)
        self.bypass = Bypass(d)
        self.bypass_mid = Bypass(d)

    def forward(
        self,
        x: torch.Tensor,
        pos_emb: torch.Tensor,
        mask: torch.Tensor | None,
        valid: torch.Tensor,
        lengths: torch.Tensor,
        chunk_size: int,
    ) -> torch.Tensor:
        x_in = x
        weights = self.self_attn_weights(x, pos_emb, mask)  # (B, H, T, T)
        x = x + self.feed_forward1(x)
        x = x + self.nonlin_attention(x, weights)
        x = x + self.self_attn1(x, weights)
        x = x + self.conv_module1(x, valid, lengths, chunk_size)
        x = x + self.feed_forward2(x)
        x = self.bypass_mid(x_in, x)
        x = x + self.self_attn2(x, weights)
        x = x + self.conv_module2(x, valid, lengths, chunk_size)
        x = x + self.feed_forward3(x)
        return self.bypass(x_in, self.norm(x))

    def streaming_forward(
        self, x: torch.Tensor, pos_emb: torch.Tensor, key_mask: torch.Tensor, states: Sequence[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One chunk; ``states`` are icefall's six per-layer caches (key, nonlin attention,
        value 1, value 2, conv 1, conv 2), returned updated in the same order.

        Shapes:
            x: (B, T, D), pos_emb: (2T + L - 1, pos_dim), key_mask: (B, L + T) -> (B, T, D)
        """
        cached_key, cached_nonlin, cached_val1, cached_val2, cached_conv1, cached_conv2 = states
        x_in = x
        weights, key = self.self_attn_weights.streaming_forward(x, pos_emb, cached_key, key_mask)
        x = x + self.feed_forward1(x)
        out, nonlin = self.nonlin_attention.streaming_forward(x, weights, cached_nonlin)
        x = x + out
        out, val1 = self.self_attn1.streaming_forward(x, weights, cached_val1)
        x = x + out
        out, conv1 = self.conv_module1.streaming_forward(x, cached_conv1)
        x = x + out
        x = x + self.feed_forward2(x)
        x = self.bypass_mid(x_in, x)
        out, val2 = self.self_attn2.streaming_forward(x, weights, cached_val2)
        x = x + out
        out, conv2 = self.conv_module2.streaming_forward(x, cached_conv2)
        x = x + out
        x = x + self.feed_forward3(x)
        return self.bypass(x_in, self.norm(x)), [key, nonlin, val1, val2, conv1, conv2]


class ZipformerStack(nn.Module):
    """One encoder stack: its layers at its own frame rate, with the downsample, upsample
    (repeat) and output bypass around them when ``factor > 1``.

    Tensor names follow icefall: a factor-1 stack holds ``layers`` directly; a downsampled
    one holds ``downsample``, ``encoder.layers`` and ``out_combiner``.

    Shapes:
        x: (B, T, D), lengths: (B,), mask: (1, T, T) bool or None -> (B, T, D)
    """

    def __init__(self, cfg: ZipformerEncoderConfig, i: int) -> None:
        super().__init__()
        self.factor = cfg.downsampling_factor[i]
        self.pos_dim = cfg.pos_dim
        layers = nn.ModuleList(ZipformerLayer(cfg, i) for _ in range(cfg.num_encoder_layers[i]))
        if self.factor == 1:
            self.layers = layers
        else:
            self.downsample = SimpleDownsample(self.factor)
            self.encoder = nn.Module()
            self.encoder.layers = layers
            self.out_combiner = Bypass(cfg.encoder_dim[i])

    def _layers(self) -> nn.ModuleList:
        return self.layers if self.factor == 1 else self.encoder.layers

    def forward(
        self, x: torch.Tensor, lengths: torch.Tensor, mask: torch.Tensor | None, chunk_size: int
    ) -> torch.Tensor:
        x_in, t_in = x, x.shape[1]
        if self.factor > 1:
            x, lengths = self.downsample(x, lengths)
            if mask is not None:
                mask = mask[:, :: self.factor, :: self.factor]
            chunk_size = chunk_size // self.factor
        t = x.shape[1]
        valid = _valid(lengths, t)
        key_mask = ~valid[:, None, :]  # (B, 1, T)
        mask = key_mask if mask is None else (mask | key_mask)
        pos_emb = compact_rel_positions(t, self.pos_dim, x.device, x.dtype)
        for layer in self._layers():
            x = layer(x, pos_emb, mask, valid, lengths, chunk_size)
        if self.factor == 1:
            return x
        x = x.repeat_interleave(self.factor, dim=1)[:, :t_in]  # SimpleUpsample
        return self.out_combiner(x_in, x)

    def streaming_forward(
        self, x: torch.Tensor, key_mask: torch.Tensor, states: Sequence[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One chunk at this stack's rate; ``states`` holds six caches per layer (icefall's order).

        Shapes:
            x: (B, T, D) at the embed rate (T a multiple of ``factor``), key_mask: (B, L + T)
            bool at the embed rate (True = a cache frame the stream has not filled yet)
            -> (B, T, D), the layers' new states
        """
        x_in, t_in = x, x.shape[1]
        if self.factor > 1:
            whole = torch.full((x.shape[0],), t_in, dtype=torch.long, device=x.device)
            x, _ = self.downsample(x, whole)
            key_mask = key_mask[:, :: self.factor]
        t, left = x.shape[1], states[0].shape[0]
        pos_emb = streaming_rel_positions(t, left, self.pos_dim, x.device, x.dtype)
        new: list[torch.Tensor] = []
        for j, layer in enumerate(self._layers()):
            x, layer_states = layer.streaming_forward(x, pos_emb, key_mask, states[6 * j : 6 * j + 6])
            new += layer_states
        if self.factor == 1:
            return x, new
        x = x.repeat_interleave(self.factor, dim=1)[:, :t_in]  # SimpleUpsample
        return self.out_combiner(x_in, x), new


def chunk_attention_mask(t: int, chunk_size: int, left_chunks: int, device: torch.device) -> torch.Tensor:
    """icefall's chunked attention mask over ``t`` embed frames: a query sees the keys of its
    own chunk and of ``left_chunks`` chunks before it (all before it when negative).

    Shapes:
        -> (1, t, t) bool, True = masked
    """
    c = torch.arange(t, device=device) // chunk_size
    left = 1_000_000 if left_chunks < 0 else left_chunks
    return ((c[None, :] > c[:, None]) | (c[None, :] < c[:, None] - left))[None]


class ZipformerEncoder(BaseEncoder):
    """The Zipformer2 encoder (``encoder_embed`` + ``encoder``).

    Shapes:
        feats: (B, T, num_mel_bins), feat_lens: (B,) -> hidden (B, T', max(encoder_dim)), lens (B,)
        with T' = ceil(((T - 7) // 2) / 2)
    """

    def __init__(self, cfg: ZipformerEncoderConfig) -> None:
        super().__init__()
        self.subsampling_rate = 2 * cfg.output_downsampling_factor
        self.output_size = cfg.output_dim
        self.config = cfg
        self.encoder_embed = Conv2dSubsampling(cfg.num_mel_bins, cfg.embed_channels, cfg.encoder_dim[0])
        self.encoder = nn.Module()
        self.encoder.encoders = nn.ModuleList(ZipformerStack(cfg, i) for i in range(cfg.num_stacks))
        self.encoder.downsample_output = SimpleDownsample(cfg.output_downsampling_factor)

    def output_lengths(self, feat_lens: torch.Tensor) -> torch.Tensor:
        """Encoder frames for ``feat_lens`` feature frames."""
        f = self.config.output_downsampling_factor
        return (Conv2dSubsampling.output_lengths(feat_lens + self.config.tail_pad_frames) + f - 1) // f

    def pad_tail(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``tail_pad_frames`` frames of log(1e-10) right after each row's last frame
        (icefall's decode.py does so for causal models; a no-op when 0).

        Shapes:
            feats: (B, T, F), feat_lens: (B,) -> (B, T + n, F), (B,) + n
        """
        n = self.config.tail_pad_frames
        feat_lens = feat_lens.to(device=feats.device, dtype=torch.long)
        if n <= 0:
            return feats, feat_lens
        b, t, f = feats.shape
        out = torch.cat((feats, feats.new_zeros(b, n, f)), dim=1)
        idx = torch.arange(t + n, device=feats.device)[None, :]
        tail = (idx >= feat_lens[:, None]) & (idx < feat_lens[:, None] + n)  # (B, T + n)
        return out.masked_fill(tail[..., None], LOG_EPS), feat_lens + n

    def embed(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The Conv2dSubsampling embed. -> (B, (T - 7) // 2, encoder_dim[0]), (B,)"""
        feat_lens = feat_lens.to(device=feats.device, dtype=torch.long)
        if int(feat_lens.min()) < 9:
            raise ValueError(
                f"the Zipformer embed needs at least 9 feature frames per row (0.09 s), got {feat_lens.tolist()}"
            )
        return self.encoder_embed(feats, feat_lens)

    def forward_stacks(
        self, x: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The stacks and the output downsample over embed frames.

        Returns:
            hidden (B, T', D_out), lens (B,), and each stack's output (B, T_embed, D_i).
        """
        cfg = self.config
        mask, chunk = None, -1
        if cfg.chunked:
            chunk = cfg.chunk_size
            mask = chunk_attention_mask(x.shape[1], chunk, cfg.left_context_chunks, x.device)
        outputs = []
        for dim, stack in zip(cfg.encoder_dim, self.encoder.encoders):
            x = _convert_num_channels(x, dim)
            x = stack(x, lengths, mask, chunk)
            outputs.append(x)
        x = self._full_dim_output(outputs)
        x, lengths = self.encoder.downsample_output(x, lengths)
        return x, lengths, outputs

    def _full_dim_output(self, outputs: list[torch.Tensor]) -> torch.Tensor:
        """Each channel from the most recent stack that has it."""
        dims = self.config.encoder_dim
        pieces, cur = [outputs[-1]], dims[-1]
        for i in range(len(dims) - 2, -1, -1):
            if dims[i] > cur:
                pieces.append(outputs[i][..., cur : dims[i]])
                cur = dims[i]
        return torch.cat(pieces, dim=-1)

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, lengths = self.embed(*self.pad_tail(feats, feat_lens))
        x, lengths, _ = self.forward_stacks(x, lengths)
        return x, lengths

    # -- streaming (a causal model: "slot", its list API the "stateful" form) -----------------
    #
    # A stream's state is icefall's list: six caches per layer, stacks in order (key
    # (L_i, B, H * dq), nonlin attention (1, B, L_i, 3 D / 4), value 1 and 2 (L_i, B, H * dv),
    # conv 1 and 2 (B, D, kernel // 2)), then the embed's ConvNeXt frames (B, C, 3, W) and the
    # embed frames the stream has been through (B,) int32; L_i = left_context_frames // factor_i.
    # Each window is a whole one (a short final window arrives padded with LOG_EPS and counts
    # whole, as icefall's own stream alone does), so no row's result depends on its batch.

    streaming_pad_value = LOG_EPS
    streaming_tail_frames = STREAMING_TAIL_FRAMES

    @property
    def streaming_kind(self) -> str:
        cfg = self.config
        return "slot" if cfg.chunked and cfg.left_context_frames > 0 else "none"

    @property
    def streaming_left_chunks(self) -> bool:
        """False: the attention history is the model's ``left_context_frames``."""
        return False

    @property
    def streaming_min_final_frames(self) -> int:
        """1: any frame left is encoded, its window padded (icefall's DecodeStream)."""
        return 1

    def streaming_chunk_size(self, chunk_ms: float | None, frame_shift_s: float) -> int:
        """The chunk in embed frames (20 ms at 10-ms features: icefall's ``--chunk-size``, 16 =
        320 ms); None: the config's ``chunk_size`` (the published decode chunk)."""
        if chunk_ms is None:
            return int(self.config.chunk_size)
        return chunk_units(chunk_ms, 2 * frame_shift_s * 1000.0, type(self).__name__)

    def _require_streaming(self) -> None:
        if self.streaming_kind == "none":
            raise StreamingNotSupported(
                f"{type(self).__name__} declares streaming_kind='none': not a causal (chunked) Zipformer "
                f"(causal={self.config.causal}, chunk_size={self.config.chunk_size}, "
                f"left_context_frames={self.config.left_context_frames}); serve it offline"
            )

    def _streaming_factors(self) -> tuple[int, ...]:
        cfg = self.config
        return (*cfg.downsampling_factor, cfg.output_downsampling_factor)

    def streaming_geometry(self, chunk_size: int) -> StreamingGeometry:
        """Windows of ``2 * chunk_size + 13`` feature frames at a stride of ``2 * chunk_size``.

        Raises:
            StreamingNotSupported: a non-causal model (or one without a left context).
            ValueError: a chunk that is not a positive multiple of every downsampling factor
                (each stack needs whole frames of its own rate).
        """
        self._require_streaming()
        factors = self._streaming_factors()
        unit = math.lcm(*factors)
        if chunk_size <= 0 or chunk_size % unit:
            raise ValueError(
                f"a Zipformer streaming chunk of {chunk_size} embed frames must be a positive multiple of "
                f"{unit} (the downsampling factors {factors}): {unit * 20} ms, {2 * unit * 20} ms, ..."
            )
        if self.config.left_context_frames % unit:
            raise ValueError(
                f"left_context_frames={self.config.left_context_frames} is not a multiple of {unit} "
                f"(the downsampling factors {factors})"
            )
        return StreamingGeometry(window_frames=2 * chunk_size + EMBED_WINDOW_PAD, stride_frames=2 * chunk_size)

    @property
    def streaming_state_specs(self) -> tuple[StreamStateSpec, ...]:
        """icefall's per-stream tensors, in ``streaming_forward``'s order, each with its batch
        axis (in icefall's layout) as the slot axis; () for a model that cannot stream."""
        if self.streaming_kind == "none":
            return ()
        cfg = self.config
        specs: list[StreamStateSpec] = []
        for i, ds in enumerate(cfg.downsampling_factor):
            left, d = cfg.left_context_frames // ds, cfg.encoder_dim[i]
            key_dim = cfg.num_heads[i] * cfg.query_head_dim[i]
            value_dim = cfg.num_heads[i] * cfg.value_head_dim[i]
            conv = (d, cfg.cnn_module_kernel[i] // 2)
            for j in range(cfg.num_encoder_layers[i]):
                name = f"stack{i}.layer{j}"
                specs += [
                    StreamStateSpec(f"{name}.key", (left, key_dim), slot_axis=1),
                    StreamStateSpec(f"{name}.nonlin_attn", (1, left, 3 * d // 4), slot_axis=1),
                    StreamStateSpec(f"{name}.val1", (left, value_dim), slot_axis=1),
                    StreamStateSpec(f"{name}.val2", (left, value_dim), slot_axis=1),
                    StreamStateSpec(f"{name}.conv1", conv),
                    StreamStateSpec(f"{name}.conv2", conv),
                ]
        embed = self.encoder_embed
        pad = embed.convnext.depthwise_conv.weight.shape[-2] // 2
        specs.append(StreamStateSpec("embed_left_pad", (cfg.embed_channels[2], pad, embed.out_width)))
        specs.append(StreamStateSpec("processed_lens", (), dtype=torch.int32))
        return tuple(specs)

    def get_streaming_init_states(self, batch_size: int, device: torch.device | str | None = None) -> StreamingStates:
        """Fresh states of ``batch_size`` streams (zeros: icefall's ``get_init_states``)."""
        self._require_streaming()
        specs = self.streaming_state_specs
        device = next(self.parameters()).device if device is None else device
        states = []
        for spec in specs:
            shape = list(spec.shape)
            shape.insert(spec.slot_axis, batch_size)
            states.append(torch.full(shape, spec.init_value, dtype=spec.dtype or self.compute_dtype, device=device))
        return states

    def stack_streaming_states(self, states: list[StreamingStates]) -> StreamingStates:
        """One batch state from single streams' states (each tensor joined on its batch axis)."""
        specs = self.streaming_state_specs
        return [torch.cat([st[n] for st in states], dim=spec.slot_axis) for n, spec in enumerate(specs)]

    def unstack_streaming_states(self, states: StreamingStates) -> list[StreamingStates]:
        """Single streams' states from a batch state (the inverse of ``stack_streaming_states``)."""
        specs = self.streaming_state_specs
        columns = [t.split(1, dim=spec.slot_axis) for t, spec in zip(states, specs, strict=True)]
        return [list(row) for row in zip(*columns, strict=True)]

    def streaming_forward(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, states: StreamingStates
    ) -> tuple[torch.Tensor, torch.Tensor, StreamingStates]:
        """One window of every stream in the batch (icefall's ``streaming_forward``): the embed
        continues from its cached frames, each stack's attention reads the last L_i frames'
        keys / values (those the stream has not filled yet masked by its processed length), the
        convolutions their cached tails. No host synchronisation, fixed shapes: a step over
        slot buffers can be captured in a CUDA graph.

        Args:
            feats: every row a whole window (a stream's short final window padded with
                ``LOG_EPS``, as the runtime does).
            feat_lens: the real frames of each row; not read: a padded final window counts
                whole, as it does for a stream decoded alone.
            states: the batch's states (``get_streaming_init_states`` / ``stack_streaming_states``
                layout, or the slot runtime's gathered buffers).

        Shapes:
            feats: (B, 2 * chunk + 13, F), feat_lens: (B,)
            -> hidden (B, chunk // 2, D_out), lens (B,), new states (same layout)
        """
        self._require_streaming()
        cfg = self.config
        b, t_feat, _ = feats.shape
        chunk = (t_feat - EMBED_WINDOW_PAD) // 2
        if t_feat != 2 * chunk + EMBED_WINDOW_PAD:
            raise ValueError(f"a streaming window has 2 * chunk + {EMBED_WINDOW_PAD} frames, got {t_feat}")
        self.streaming_geometry(chunk)
        n_layer_states = 6 * sum(cfg.num_encoder_layers)
        if len(states) != n_layer_states + 2:
            raise ValueError(f"expected {n_layer_states + 2} streaming state tensors, got {len(states)}")
        x, embed_cache = self.encoder_embed.streaming_forward(feats, states[-2])  # (B, chunk, D_0)
        processed = states[-1]
        left = cfg.left_context_frames
        # Cache frame j (oldest first) is masked while the stream has been through fewer than
        # left - j embed frames: it still holds the initial zeros.
        unfilled = processed[:, None] <= torch.arange(left - 1, -1, -1, device=x.device)  # (B, L)
        key_mask = torch.cat((unfilled, unfilled.new_zeros(b, chunk)), dim=1)  # (B, L + chunk)
        outputs, new_states, at = [], [], 0
        for dim, n_layers, stack in zip(cfg.encoder_dim, cfg.num_encoder_layers, self.encoder.encoders):
            x = _convert_num_channels(x, dim)
            x, stack_states = stack.streaming_forward(x, key_mask, states[at : at + 6 * n_layers])
            at += 6 * n_layers
            outputs.append(x)
            new_states += stack_states
        x = self._full_dim_output(outputs)
        whole = torch.full((b,), chunk, dtype=torch.long, device=x.device)
        x, lens = self.encoder.downsample_output(x, whole)
        return x, lens, new_states + [embed_cache, processed + chunk]


def _convert_num_channels(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Cut to, or zero-pad up to, ``dim`` channels."""
    if dim <= x.shape[-1]:
        return x[..., :dim]
    return F.pad(x, (0, dim - x.shape[-1]))


class ZipformerCtcModel(EncoderCtcModel):
    """Zipformer2 encoder + icefall's CTC head (``ctc_output``); the blank is id 0."""

    architecture = "zipformer"
    config_class = ZipformerConfig
    encoder_class = ZipformerEncoder
    ctc_head_name = "ctc_output"
