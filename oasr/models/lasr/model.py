"""LASR (Google's MedASR, Hugging Face ``lasr``): a conformer-CTC encoder.

What sets it apart from a textbook conformer:

* 1-D subsampling: a dense layer takes the mel frames to the model width *before*
  two unpadded stride-2 convolutions (4x), then a dense layer back to the width;
* rotary (NEOX) self-attention without relative-position terms;
* scaled residuals on every sub-block: ``1.5 x + 0.5 FF(x)`` (both macaron halves),
  ``2 x + conv(x)``, while attention adds unscaled;
* bias-free LayerNorms (epsilon from the config), an even depthwise kernel padded
  one frame more on the right (PyTorch's ``padding="same"``);
* a k=1 convolution as the CTC head (stored (V, D, 1), run as a GEMM), blank id 0.

Module names are Hugging Face's without the ``LasrForCTC`` wrapper, so its checkpoint
maps 1:1 (the head's kernel axis is squeezed in ``convert.py``).

Padding: a batch carries per-row lengths; padded keys are masked out of attention and
padded frames are zeroed ahead of the depthwise convolution, so every valid frame of a
padded batch equals the same row run alone. Reads top to bottom: subsampling,
attention, block, encoder, model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers import (
    ConformerConvolution,
    Conv1d,
    FeedForward,
    LayerNorm,
    Linear,
    LinearActivation,
    NeoxRotaryEmbedding,
    attention,
)
from oasr.layers.packing import Packing, as_packed, as_rows
from oasr.models.base import BaseEncoder
from oasr.models.ctc import EncoderCtcModel
from oasr.models.lasr.config import LasrConfig


class LasrSubsampling(nn.Module):
    """dense -> ReLU -> conv(stride s) -> ReLU -> conv(stride s) -> ReLU -> dense.

    Shapes:
        x: (B, T, n_mels) -> (B, T', hidden_size), T' = ((T - k) // s + 1 - k) // s + 1
    """

    def __init__(self, cfg: LasrConfig) -> None:
        super().__init__()
        d, k, s = cfg.hidden_size, cfg.subsampling_conv_kernel_size, cfg.subsampling_conv_stride
        self.dense_0 = LinearActivation(cfg.num_mel_bins, d, "relu")
        self.conv_0 = Conv1d(d, d, k, stride=s)
        self.conv_1 = Conv1d(d, cfg.subsampling_conv_channels, k, stride=s)
        self.dense_1 = Linear(cfg.subsampling_conv_channels, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dense_0(x).transpose(1, 2)  # (B, D, T)
        x = F.relu(self.conv_0(x))
        x = F.relu(self.conv_1(x))  # (B, C, T')
        return self.dense_1(x.transpose(1, 2))  # (B, T', D)


class LasrAttention(nn.Module):
    """Multi-head self-attention with rotary queries and keys.

    Shapes:
        x: (B, T, D), cos / sin: (T, head_dim), key_lengths: (B,) or None -> (B, T, D);
        with ``packing``, x is (N, D) packed rows attended per row -> (N, D)
    """

    def __init__(self, cfg: LasrConfig) -> None:
        super().__init__()
        self.n_head = cfg.num_attention_heads
        self.head_dim = cfg.head_dim
        inner = self.n_head * self.head_dim
        bias = cfg.attention_bias
        self.q_proj = Linear(cfg.hidden_size, inner, bias=bias)
        self.k_proj = Linear(cfg.hidden_size, inner, bias=bias)
        self.v_proj = Linear(cfg.hidden_size, inner, bias=bias)
        self.o_proj = Linear(inner, cfg.hidden_size, bias=bias)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        key_lengths: torch.Tensor | None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        q = NeoxRotaryEmbedding.apply_rotary(self._heads(as_rows(self.q_proj(x), packing)), cos, sin)
        k = NeoxRotaryEmbedding.apply_rotary(self._heads(as_rows(self.k_proj(x), packing)), cos, sin)
        v = self._heads(as_rows(self.v_proj(x), packing))
        b, _, t, _ = q.shape
        out = attention(q, k, v, key_lengths=key_lengths)  # (B, H, T, Dh)
        out = out.transpose(1, 2).reshape(b, t, self.n_head * self.head_dim)  # (B, T, H * Dh)
        return self.o_proj(as_packed(out, packing))


class LasrBlock(nn.Module):
    """FF (x1.5 + 0.5) -> attention (+) -> conv (x2 + 1) -> FF (x1.5 + 0.5) -> LayerNorm.

    Shapes:
        x: (B, T, D), mask: (B, T) bool valid frames or None -> (B, T, D); with
        ``packing``, x is (N, D) packed rows and ``mask`` None -> (N, D)
    """

    def __init__(self, cfg: LasrConfig) -> None:
        super().__init__()
        d, eps = cfg.hidden_size, cfg.layer_norm_eps
        names = ("linear1", "linear2")
        self.feed_forward1 = FeedForward(d, cfg.intermediate_size, cfg.hidden_act, cfg.attention_bias, names)
        self.self_attn = LasrAttention(cfg)
        k = cfg.conv_kernel_size
        self.conv = ConformerConvolution(
            d,
            k,
            bias=cfg.convolution_bias,
            norm="batch_norm",
            norm_eps=cfg.batch_norm_eps,
            activation=cfg.hidden_act,
            padding=((k - 1) // 2, k // 2),  # PyTorch "same": the odd frame of an even kernel goes right
        )
        self.feed_forward2 = FeedForward(d, cfg.intermediate_size, cfg.hidden_act, cfg.attention_bias, names)
        self.norm_feed_forward1 = LayerNorm(d, eps, bias=False)
        self.norm_self_att = LayerNorm(d, eps, bias=False)
        self.norm_conv = LayerNorm(d, eps, bias=False)
        self.norm_feed_forward2 = LayerNorm(d, eps, bias=False)
        self.norm_out = LayerNorm(d, eps, bias=False)
        self.ff_scales = tuple(cfg.feed_forward_residual_weights)
        self.conv_scales = tuple(cfg.conv_residual_weights)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        lengths: torch.Tensor | None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        r_ff, b_ff = self.ff_scales
        r_conv, b_conv = self.conv_scales
        x = r_ff * x + b_ff * self.feed_forward1(self.norm_feed_forward1(x))
        x = x + self.self_attn(self.norm_self_att(x), cos, sin, lengths, packing)
        x = r_conv * x + b_conv * self.conv(self.norm_conv(x), mask, packing)
        x = r_ff * x + b_ff * self.feed_forward2(self.norm_feed_forward2(x))
        return self.norm_out(x)


class LasrEncoder(BaseEncoder):
    """Subsampling, rotary conformer blocks, a final LayerNorm.

    Shapes:
        feats: (B, T, n_mels), feat_lens: (B,) -> hidden (B, T', D), hidden_lens (B,)
    """

    def __init__(self, cfg: LasrConfig) -> None:
        super().__init__()
        self.subsampling_rate = cfg.subsampling_rate
        self.output_size = cfg.hidden_size
        self.cfg = cfg
        self.subsampler = LasrSubsampling(cfg)
        self.rotary_emb = NeoxRotaryEmbedding(cfg.head_dim, base=cfg.rope_theta)
        self.layers = nn.ModuleList(LasrBlock(cfg) for _ in range(cfg.num_hidden_layers))
        self.out_norm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, bias=False)

    def output_lengths(self, feat_lens: torch.Tensor) -> torch.Tensor:
        """Encoder frames of each row (0 for a row shorter than ``min_input_frames``)."""
        return self.cfg.output_lengths(feat_lens.long())

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if feats.dim() != 3 or feats.shape[-1] != self.cfg.num_mel_bins:
            raise ValueError(f"LASR expects features (B, T, {self.cfg.num_mel_bins}); got {tuple(feats.shape)}")
        b, t, _ = feats.shape
        if feat_lens is None:
            feat_lens = torch.full((b,), t, dtype=torch.long, device=feats.device)
        x, lens = self._front(feats, feat_lens)
        t_out = x.shape[1]
        cos, sin = self.rotary_emb.cos_sin(torch.arange(t_out, device=x.device), x.dtype)
        if bool((lens == t_out).all()):
            mask = key_lengths = None
        else:
            mask = torch.arange(t_out, device=x.device)[None, :] < lens[:, None]  # (B, T')
            key_lengths = lens.clamp(min=1)  # a row with no frame still needs one key (its output is unused)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, key_lengths)
        return self.out_norm(x), lens

    def forward_packed(self, feats: torch.Tensor, cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode packed rows: the subsampling runs on the rows padded (its strided
        convolutions look along time), the blocks on the subsampled frames packed.

        Shapes:
            feats: (N, n_mels), cu_seqlens: (B + 1,) -> hidden (N', D), cu_seqlens (B + 1,)
        """
        if feats.dim() != 2 or feats.shape[-1] != self.cfg.num_mel_bins:
            raise ValueError(f"LASR packed input must be (N, {self.cfg.num_mel_bins}); got {tuple(feats.shape)}")
        rows = Packing.from_cu_seqlens(cu_seqlens, device=feats.device)
        x, lens = self._front(rows.pad(feats), rows.lengths)
        packing = Packing(lens)
        x = packing.unpad(x)  # (N', D)
        cos, sin = self.rotary_emb.cos_sin(torch.arange(packing.max_len, device=x.device), x.dtype)
        key_lengths = lens.clamp(min=1)
        for layer in self.layers if packing.total else ():  # nothing to run when no row has a frame
            x = layer(x, cos, sin, None, key_lengths, packing)
        return self.out_norm(x), packing.cu_seqlens

    def _front(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Subsampling of a padded batch. -> (B, T', D), (B,)"""
        lens = self.output_lengths(feat_lens.to(feats.device))
        if feats.shape[1] < self.cfg.min_input_frames:
            # Too short for one output frame: run on zeros so the shapes hold; every length is 0.
            feats = F.pad(feats, (0, 0, 0, self.cfg.min_input_frames - feats.shape[1]))
        return self.subsampler(feats), lens


class LasrModel(EncoderCtcModel):
    """LASR encoder + CTC head (``ctc_head``; offline-only, decoded by the ``ctc`` strategy):
    (B, T, n_mels) log-mel -> (B, T', V) float32 log-probs."""

    architecture = "lasr"
    config_class = LasrConfig
    encoder_class = LasrEncoder
    encoder_reads_model_config = True
