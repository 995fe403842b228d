"""WavLM's gated relative position bias: a learned bias over bucketed ``key - query``
distances, scaled per head and per query frame by a gate read off the attention input.

The distances fall into T5's bidirectional buckets (``relative_position_buckets``); one
table (``rel_attn_embed``, buckets x heads) gives the ungated bias of a row,
(H, T, T), and each attention layer gates it with its own projection of the input:

    g_a, g_b = sigmoid(sum over 4 of gru_rel_pos_linear(x_head))     # (B, H, T) each
    gate     = g_a * (g_b * gru_rel_pos_const - 1) + 2
    bias     = gate[..., None] * table                               # (B, H, T, T)

which the attention adds to its scores, the key padding folded into the same pass.
Parameter names are WavLM's (transformers').
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers.attention import key_padding_mask
from oasr.layers.embedding import Embedding
from oasr.layers.linear import Linear
from oasr.layers.packing import Packing, as_rows


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


class GateProjection(Linear):
    """``gru_rel_pos_linear``: (head_dim -> 8), two gates of four summed terms each, applied
    with each gate's four rows summed into the weight first (one head_dim -> 2 GEMM, no sum
    over the activations). A ``Linear`` subclass, so int8 quantisation leaves its few hundred
    weights in float.

    Shapes:
        x: (..., head_dim) -> (..., 2)
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.view(2, 4, self.in_features).sum(1)
        bias = None if self.bias is None else self.bias.view(2, 4).sum(1)
        return F.linear(x, weight, bias)


class GatedRelativePositionBias(nn.Module):
    """One attention layer's gate over the bias table, and the table where this layer holds it.

    Args:
        num_heads, head_dim: the attention's heads (the gate reads each head's slice of the input).
        num_buckets, max_distance: the buckets (``relative_position_buckets``).
        has_table: whether this layer holds ``rel_attn_embed`` (WavLM: the first layer only;
            the others gate its table).

    Shapes:
        x: (B, T, D) attention input, or packed (N, D) with ``packing`` (T = its longest row);
        table: (H, T, T); key_lengths: (B,) or None -> additive mask (B, H, T, T), -inf at
        each row's keys past its length
    """

    def __init__(self, num_heads: int, head_dim: int, num_buckets: int, max_distance: int, has_table: bool) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.gru_rel_pos_const = nn.Parameter(torch.ones(1, num_heads, 1, 1))
        self.gru_rel_pos_linear = GateProjection(head_dim, 8)
        self.rel_attn_embed = Embedding(num_buckets, num_heads) if has_table else None

    def table(self, length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The ungated bias of every (query, key) pair of a row of ``length`` frames.

        Shapes:
            -> (H, length, length)
        """
        if self.rel_attn_embed is None:
            raise RuntimeError("this layer holds no relative position table (the first one does)")
        pos = torch.arange(length, device=device)
        buckets = relative_position_buckets(pos[None, :] - pos[:, None], self.num_buckets, self.max_distance)
        return self.rel_attn_embed(buckets).to(dtype).permute(2, 0, 1).contiguous()  # (T, T, H) -> (H, T, T)

    def gate(self, x: torch.Tensor) -> torch.Tensor:
        """Per-head, per-frame scale of the table.

        Shapes:
            x: (..., H * head_dim) -> (..., H)
        """
        proj = self.gru_rel_pos_linear(x.unflatten(-1, (self.num_heads, self.head_dim)))  # (..., H, 2)
        gate_a, gate_b = torch.sigmoid(proj).unbind(-1)  # (..., H) each
        return gate_a * (gate_b * self.gru_rel_pos_const.view(self.num_heads) - 1.0) + 2.0

    def forward(
        self,
        x: torch.Tensor,
        table: torch.Tensor,
        key_lengths: torch.Tensor | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        gate = as_rows(self.gate(x), packing).transpose(1, 2)[..., None]  # (B, H, T, 1)
        if key_lengths is None:
            return gate * table  # (B, H, T, T)
        t = table.shape[-1]
        padding = table.new_zeros(key_lengths.shape[0], 1, 1, t)
        padding.masked_fill_(~key_padding_mask(key_lengths, t), float("-inf"))  # (B, 1, 1, T)
        return torch.addcmul(padding, gate, table)  # one pass: gate * table, -inf past each row's keys


__all__ = ["GateProjection", "GatedRelativePositionBias", "relative_position_buckets"]
