"""FunASR's SANM encoder: self-attention with an FSMN memory block beside it.

Each block is pre-norm: ``x + SANM(norm1(x))`` (the first block maps the 560 LFR
features to D, so it has no residual there), then ``x + FFN(norm2(x))``. SANM projects
Q, K, V in one GEMM (``linear_q_k_v``); the attention goes through the shared core
(``oasr.layers.attention``) and the FSMN memory is a depthwise convolution over the
masked values, added to its own input. Inputs are scaled by ``sqrt(D)`` and get
FunASR's sinusoids (positions from 1) at the input width. LayerNorm eps is the config's
``norm_eps`` (1e-12, ESPnet's, in Paraformer).

Module names follow FunASR's state dict (``encoder.encoders0.0.self_attn.linear_q_k_v``,
``encoder.encoders.N.feed_forward.w_1``, ``encoder.after_norm``); CMVN from ``am.mvn``
is held here as buffers ``cmvn_shift`` / ``cmvn_scale``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers import Conv1d, FeedForward, LayerNorm, Linear, attention
from oasr.models.base import BaseEncoder
from oasr.models.paraformer.config import SanmEncoderConfig


def length_mask(lens: torch.Tensor, n: int) -> torch.Tensor:
    """(B,) lengths -> (B, n, 1) float mask of the valid frames."""
    return (torch.arange(n, device=lens.device)[None, :] < lens[:, None])[..., None]


def funasr_sinusoids(length: int, depth: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """FunASR's ``SinusoidalPositionEncoder``: positions 1..length, ``[sin | cos]`` halves,
    timescales ``10000 ** (-i / (depth / 2 - 1))``.

    Shapes:
        -> (length, depth)
    """
    increment = math.log(10000.0) / (depth / 2 - 1)
    inv = torch.exp(torch.arange(depth // 2, dtype=torch.float64, device=device) * -increment)
    pos = torch.arange(1, length + 1, dtype=torch.float64, device=device)
    scaled = pos[:, None] * inv[None, :]
    return torch.cat([scaled.sin(), scaled.cos()], dim=1).to(dtype)


def fsmn_memory(conv: Conv1d, x: torch.Tensor, mask: torch.Tensor, left: int, right: int) -> torch.Tensor:
    """FunASR's FSMN memory: depthwise convolution over the masked input plus the input, masked.

    Shapes:
        x: (B, T, D), mask: (B, T, 1) -> (B, T, D)
    """
    x = x * mask
    y = conv(F.pad(x.transpose(1, 2), (left, right))).transpose(1, 2)
    return (y + x) * mask


def fsmn_padding(kernel_size: int, shift: int) -> tuple[int, int]:
    left = (kernel_size - 1) // 2 + max(shift, 0)
    return left, kernel_size - 1 - left


class SanmAttention(nn.Module):
    """Multi-head self-attention plus the FSMN memory of the values (``MultiHeadedAttentionSANM``).

    Shapes:
        x: (B, T, in_size), mask: (B, T, 1), lens: (B,) -> (B, T, D)
    """

    def __init__(self, in_size: int, d_model: int, heads: int, kernel_size: int, shift: int) -> None:
        super().__init__()
        self.heads = heads
        self.d_model = d_model
        self.linear_q_k_v = Linear(in_size, 3 * d_model)
        self.linear_out = Linear(d_model, d_model)
        self.fsmn_block = Conv1d(d_model, d_model, kernel_size, groups=d_model, bias=False)
        self.pad = fsmn_padding(kernel_size, shift)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.linear_q_k_v(x).split(self.d_model, dim=-1)
        memory = fsmn_memory(self.fsmn_block, v, mask, *self.pad)
        h, dk = self.heads, self.d_model // self.heads
        q, k, vh = (z.reshape(b, t, h, dk).transpose(1, 2) for z in (q, k, v))
        ctx = attention(q, k, vh, key_lengths=lens).transpose(1, 2).reshape(b, t, self.d_model)
        return self.linear_out(ctx) + memory


class SanmEncoderLayer(nn.Module):
    """One pre-norm SANM block (``EncoderLayerSANM``)."""

    def __init__(self, in_size: int, cfg: SanmEncoderConfig) -> None:
        super().__init__()
        d = cfg.output_size
        self.residual_attention = in_size == d
        self.self_attn = SanmAttention(in_size, d, cfg.attention_heads, cfg.kernel_size, cfg.sanm_shfit)
        self.feed_forward = FeedForward(d, cfg.linear_units, activation="relu")
        self.norm1 = LayerNorm(in_size, eps=cfg.norm_eps)
        self.norm2 = LayerNorm(d, eps=cfg.norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        a = self.self_attn(self.norm1(x), mask, lens)
        x = x + a if self.residual_attention else a
        return x + self.feed_forward(self.norm2(x))


class ParaformerEncoder(BaseEncoder):
    """CMVN, sinusoids, then the SANM blocks and the final LayerNorm.

    Shapes:
        feats: (B, T, input_size) LFR features before CMVN, lens: (B,) -> (B, T, D), lens
    """

    subsampling_rate = 1  # LFR stacking happens in the front end

    def __init__(self, cfg: SanmEncoderConfig) -> None:
        super().__init__()
        self.output_size = cfg.output_size
        self.cfg = cfg
        self.register_buffer("cmvn_shift", torch.zeros(cfg.input_size))
        self.register_buffer("cmvn_scale", torch.ones(cfg.input_size))
        self.encoders0 = nn.ModuleList([SanmEncoderLayer(cfg.input_size, cfg)])
        self.encoders = nn.ModuleList([SanmEncoderLayer(cfg.output_size, cfg) for _ in range(cfg.num_blocks - 1)])
        self.after_norm = LayerNorm(cfg.output_size, eps=cfg.norm_eps)

    def normalize(self, feats: torch.Tensor) -> torch.Tensor:
        """``(x + shift) * scale`` with the ``am.mvn`` statistics (FunASR's ``apply_cmvn``)."""
        return (feats + self.cmvn_shift) * self.cmvn_scale

    def forward(self, feats: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if feats.dim() != 3 or feats.shape[-1] != self.cfg.input_size:
            raise ValueError(
                f"ParaformerEncoder expects (B, T, {self.cfg.input_size}) LFR features, got {tuple(feats.shape)}"
            )
        return self.forward_normalized(self.normalize(feats), lens)

    def forward_normalized(self, x: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The blocks over features already through CMVN (where a prompted encoder puts its
        prompt rows in front of the audio's).

        Shapes:
            x: (B, T, input_size), lens: (B,) -> (B, T, D), lens
        """
        t = x.shape[1]
        x = x * self.cfg.output_size**0.5
        x = x + funasr_sinusoids(t, x.shape[-1], x.dtype, x.device)
        mask = length_mask(lens, t).to(x.dtype)
        for layer in (*self.encoders0, *self.encoders):
            x = layer(x, mask, lens)
        return self.after_norm(x), lens
