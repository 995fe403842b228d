"""WavLM's transformer: self-attention with a gated relative position bias.

WavLM (Chen et al. 2022) is wav2vec2's encoder with one change inside attention: the
scores get a learned bias over the bucketed distance ``key - query`` (T5's buckets:
``num_buckets`` split between the two directions, exact up to a quarter of them, then
logarithmic up to ``max_bucket_distance``). One table (``rel_attn_embed``, buckets x
heads) lives in the first layer and its bias is reused by every layer; each layer scales
it per head and per query frame by a gate read off its own attention input:

    g_a, g_b = sigmoid(sum over 4 of gru_rel_pos_linear(x_head))     # (B, H, T) each
    gate     = g_a * (g_b * gru_rel_pos_const - 1) + 2
    scores   = q k^T / sqrt(d) + gate[..., None] * bias              # (B, H, T, T)

Module and parameter names are transformers' (``WavLMAttention``, ``WavLMEncoderLayer``,
``WavLMEncoderLayerStableLayerNorm``), so a ``WavLMForCTC`` checkpoint's encoder layers
load as they are. Both layer variants take a padded batch with per-row key lengths, or
packed rows (``oasr.layers.packing``): the bias depends only on positions within a row,
and every packed row is laid out from position 0 for attention, so one (H, T_max, T_max)
table serves every row.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from oasr.layers.attention import attention, key_padding_mask
from oasr.layers.conformer import FeedForward
from oasr.layers.embedding import Embedding
from oasr.layers.linear import Linear
from oasr.layers.norm import LayerNorm
from oasr.layers.packing import Packing, as_packed, as_rows


def relative_position_buckets(relative: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bidirectional buckets of ``key - query`` distances, as WavLM computes them.

    Half the buckets are for keys after the query; within each half the first quarter
    of ``num_buckets`` are exact distances and the rest grow logarithmically up to
    ``max_distance`` (the last bucket holds everything beyond). The logarithm is taken
    in float32, as the reference does, so every distance lands in the same bucket.

    Shapes:
        relative: integer (...) -> int64 (...) in [0, num_buckets)
    """
    half = num_buckets // 2
    exact = half // 2
    buckets = (relative > 0).long() * half
    distance = relative.abs()
    # clamp(min=1): the log of the exact distances (0 included) is computed and discarded.
    log_ratio = torch.log(distance.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    far = (exact + log_ratio * (half - exact)).long().clamp(max=half - 1)
    return buckets + torch.where(distance < exact, distance, far)


class WavLMAttention(nn.Module):
    """Multi-head self-attention with WavLM's gated relative position bias.

    Args:
        hidden_size, num_heads: model width and heads.
        num_buckets, max_distance: the relative-position buckets (``num_buckets`` and
            ``max_bucket_distance`` of ``WavLMConfig``).
        has_relative_position_bias: whether this layer holds the bias table
            (``rel_attn_embed``; the first layer only).

    Shapes:
        x: (B, T, D), bias: (H, T, T), key_lengths: (B,) or None -> (B, T, D);
        with ``packing``, x is (N, D) packed rows, T is ``packing.max_len`` -> (N, D)
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_buckets: int,
        max_distance: int,
        has_relative_position_bias: bool,
    ) -> None:
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.q_proj = Linear(hidden_size, hidden_size)
        self.k_proj = Linear(hidden_size, hidden_size)
        self.v_proj = Linear(hidden_size, hidden_size)
        self.out_proj = Linear(hidden_size, hidden_size)
        self.gru_rel_pos_const = nn.Parameter(torch.ones(1, num_heads, 1, 1))
        self.gru_rel_pos_linear = Linear(self.head_dim, 8)
        self.rel_attn_embed = Embedding(num_buckets, num_heads) if has_relative_position_bias else None

    def position_bias(self, length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The ungated bias of every (query, key) pair of a row of ``length`` frames.

        Shapes:
            -> (H, length, length)
        """
        if self.rel_attn_embed is None:
            raise RuntimeError("only the first WavLM layer holds the relative position table")
        pos = torch.arange(length, device=device)
        buckets = relative_position_buckets(pos[None, :] - pos[:, None], self.num_buckets, self.max_distance)
        return self.rel_attn_embed(buckets).to(dtype).permute(2, 0, 1)  # (T, T, H) -> (H, T, T)

    def _gate(self, x: torch.Tensor) -> torch.Tensor:
        """Per-head, per-frame scale of the bias, read off the attention input.

        Shapes:
            x: (..., D) -> (..., H)
        """
        proj = self.gru_rel_pos_linear(x.unflatten(-1, (self.num_heads, self.head_dim)))  # (..., H, 8)
        gate_a, gate_b = torch.sigmoid(proj.unflatten(-1, (2, 4)).sum(-1)).unbind(-1)  # (..., H) each
        return gate_a * (gate_b * self.gru_rel_pos_const.view(self.num_heads) - 1.0) + 2.0

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def forward(
        self,
        x: torch.Tensor,
        bias: torch.Tensor,
        key_lengths: torch.Tensor | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        gate = as_rows(self._gate(x), packing).transpose(1, 2)  # (B, H, T)
        q = self._heads(as_rows(self.q_proj(x), packing))
        k = self._heads(as_rows(self.k_proj(x), packing))
        v = self._heads(as_rows(self.v_proj(x), packing))
        b, _, t, _ = q.shape
        mask = gate[..., None] * bias  # (B, H, T, T): the gated bias, added to the scores
        if key_lengths is not None:
            mask = mask.masked_fill(~key_padding_mask(key_lengths, t), float("-inf"))
        out = attention(q, k, v, mask=mask)  # (B, H, T, Dh)
        out = out.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim)  # (B, T, D)
        return self.out_proj(as_packed(out, packing))


class WavLMEncoderLayer(nn.Module):
    """Post-norm block (wav2vec2-base style): ``LN(x + attn(x))``, then ``LN(x + FF(x))``.

    Shapes:
        as ``WavLMAttention``: x (B, T, D) or packed (N, D), bias (H, T, T)
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        activation: str,
        layer_norm_eps: float,
        num_buckets: int,
        max_distance: int,
        has_relative_position_bias: bool,
    ) -> None:
        super().__init__()
        self.attention = WavLMAttention(hidden_size, num_heads, num_buckets, max_distance, has_relative_position_bias)
        self.layer_norm = LayerNorm(hidden_size, layer_norm_eps)
        self.feed_forward = FeedForward(
            hidden_size, intermediate_size, activation, names=("intermediate_dense", "output_dense")
        )
        self.final_layer_norm = LayerNorm(hidden_size, layer_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        bias: torch.Tensor,
        key_lengths: torch.Tensor | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        x = self.layer_norm(x + self.attention(x, bias, key_lengths, packing))
        return self.final_layer_norm(x + self.feed_forward(x))


class WavLMEncoderLayerStableLayerNorm(WavLMEncoderLayer):
    """Pre-norm block (wav2vec2-large-lv60 style): ``x + attn(LN(x))``, then ``x + FF(LN(x))``;
    the gate reads the normalised input. Same parameters as ``WavLMEncoderLayer``."""

    def forward(
        self,
        x: torch.Tensor,
        bias: torch.Tensor,
        key_lengths: torch.Tensor | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        x = x + self.attention(self.layer_norm(x), bias, key_lengths, packing)
        return x + self.feed_forward(self.final_layer_norm(x))


__all__ = [
    "WavLMAttention",
    "WavLMEncoderLayer",
    "WavLMEncoderLayerStableLayerNorm",
    "relative_position_buckets",
]
