"""Transformer-XL relative-position self-attention (NeMo FastConformer / Hugging Face ``parakeet``).

The score of query ``i`` against key ``j`` is

    ((q_i + u) . k_j + (q_i + v) . W_pos r(i - j)) / sqrt(d_head)

where ``r(d)`` is a sinusoid of the signed distance ``d`` and ``u`` / ``v`` are learned
per-head biases (Dai et al. 2019, section 3.3). The position term is computed once
against all ``2T - 1`` distances and moved onto the (query, key) grid by
``rel_shift``; it then enters the shared attention core as an additive float mask, so
the content term, the softmax and the weighted sum stay in SDPA. Padding is given as
key lengths.

WeNet's relative attention indexes positions so that no shift is needed; this is the
other convention, hence a separate module (``oasr.layers.relpos`` is WeNet's).
"""

from __future__ import annotations

import torch
from torch import nn

from oasr.layers.attention import LinearQKVO, attention
from oasr.layers.linear import Linear
from oasr.layers.packing import Packing, as_packed, as_rows


def xl_relative_positions(
    length: int, d_model: int, *, device=None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Sinusoids of the signed distances ``length - 1, ..., 0, ..., -(length - 1)``.

    Channel ``2k`` holds ``sin(d * w_k)`` and ``2k + 1`` holds ``cos(d * w_k)`` with
    ``w_k = 10000 ** (-2k / d_model)`` (sin and cos interleaved, not in halves). The
    table is computed in float32, as the checkpoints were trained, then cast.

    Shapes:
        -> (2 * length - 1, d_model); row ``p`` is distance ``length - 1 - p``.
    """
    if d_model % 2:
        raise ValueError(f"relative positions need an even width, got {d_model}")
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float32, device=device) / d_model))
    distance = torch.arange(length - 1, -length, -1, device=device, dtype=torch.float32)
    angles = distance[:, None] * inv_freq[None, :]  # (2T-1, D/2)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(2 * length - 1, d_model).to(dtype)


def rel_shift(scores: torch.Tensor) -> torch.Tensor:
    """Move scores against the ``2T - 1`` distances onto the (query, key) grid.

    ``scores[..., i, p]`` is query ``i`` against distance ``T - 1 - p`` (the row order of
    ``xl_relative_positions``); the result's ``[..., i, j]`` is query ``i`` against
    distance ``i - j``, i.e. ``scores[..., i, T - 1 - i + j]``. Done as one strided
    view of the contiguous scores: row ``i`` starts ``T - 1 - i`` columns in, so the
    row stride is ``2T - 2``.

    Shapes:
        scores: (..., T, 2T - 1) -> (..., T, T)
    """
    *lead, t, p = scores.shape
    if p != 2 * t - 1:
        raise ValueError(f"rel_shift expects (..., T, 2T - 1) scores, got {tuple(scores.shape)}")
    scores = scores.contiguous()
    lead_strides = scores.stride()[:-2]
    return scores.as_strided((*lead, t, t), (*lead_strides, p - 1, 1), scores.storage_offset() + t - 1)


class RelPositionMultiHeadAttentionXL(LinearQKVO):
    """Multi-head self-attention with Transformer-XL relative positions.

    Args:
        d_model: model width.
        n_heads: attention heads (``d_model`` must be divisible by it).
        bias: whether the query / key / value / output projections carry biases
            (the position projection never does).

    Submodules: ``linear_q``, ``linear_k``, ``linear_v``, ``linear_out``, ``linear_pos``;
    parameters ``bias_u`` (content bias) and ``bias_v`` (position bias), each (H, D/H).

    Shapes:
        x: (B, T, D); pos_emb: (2T - 1, D) from ``xl_relative_positions``;
        key_lengths: (B,) valid frames per row, or None -> (B, T, D). With ``packing``,
        x is (N, D) packed rows: the projections run packed, the attention core per row
        (padded to ``packing.max_len``, key lengths from the packing) -> (N, D)
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True) -> None:
        super().__init__(n_heads, d_model, query_bias=bias, key_bias=bias, value_bias=bias)
        self.linear_pos = Linear(d_model, d_model, bias=False)
        self.bias_u = nn.Parameter(torch.zeros(n_heads, self.d_k))
        self.bias_v = nn.Parameter(torch.zeros(n_heads, self.d_k))

    def position_scores(self, q: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
        """The unscaled position term ``(q_i + v) . W_pos r(i - j)``.

        Shapes:
            q: (B, H, T, Dh); pos_emb: (2T - 1, D) -> (B, H, T, T)
        """
        p = self.linear_pos(pos_emb).view(-1, self.n_head, self.d_k).permute(1, 2, 0)  # (H, Dh, 2T-1)
        scores = torch.matmul(q + self.bias_v[:, None, :], p)  # (B, H, T, 2T-1)
        return rel_shift(scores)

    def forward(
        self,
        x: torch.Tensor,
        pos_emb: torch.Tensor,
        key_lengths: torch.Tensor | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        q = as_rows(self.linear_q(x), packing)
        b, t, _ = q.shape
        q = q.view(b, t, self.n_head, self.d_k).transpose(1, 2)  # (B, H, T, Dh)
        k = as_rows(self.linear_k(x), packing).view(b, t, self.n_head, self.d_k).transpose(1, 2)
        v = as_rows(self.linear_v(x), packing).view(b, t, self.n_head, self.d_k).transpose(1, 2)
        if packing is not None:
            key_lengths = packing.lengths
        scale = self.d_k**-0.5
        pos_bias = self.position_scores(q, pos_emb) * scale  # (B, H, T, T) additive mask
        if key_lengths is not None:
            # A row with no valid frame would softmax over nothing (NaN); give it one key.
            key_lengths = key_lengths.clamp(min=1)
        out = attention(q + self.bias_u[:, None, :], k, v, mask=pos_bias, key_lengths=key_lengths, scale=scale)
        out = out.transpose(1, 2).reshape(b, t, self.d_model)  # (B, T, D)
        return self.linear_out(as_packed(out, packing))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_head}"


__all__ = ["RelPositionMultiHeadAttentionXL", "rel_shift", "xl_relative_positions"]
