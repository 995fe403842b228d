"""WeNet's relative-position self-attention (Transformer-XL style, without ``rel_shift``).

WeNet's ``RelPositionalEncoding`` scales the input by ``sqrt(d)`` and hands the
sinusoidal rows of the current positions to every block separately; each block's
attention scores are

    ((q + u) . k  +  (q + v) . W_pos p_j) / sqrt(d_k)

where ``p_j`` is the *absolute* sinusoid of key position j: WeNet dropped
Transformer-XL's ``rel_shift`` ("useless in speech recognition", and awkward for
streaming), and checkpoints are trained that way. The position term is computed as
a (B, H, T, T) score bias and handed to the shared attention core as an additive
mask, so the content term runs through SDPA.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from oasr.layers.attention import LinearQKVO, attention, key_padding_mask
from oasr.layers.linear import Linear
from oasr.layers.packing import Packing, as_packed, as_rows


def wenet_sinusoids(length: int, d_model: int) -> torch.Tensor:
    """WeNet's / ESPnet's table: sin on even channels, cos on odd ones, built in float32.

    Shapes:
        -> (length, d_model) float32
    """
    return wenet_sinusoids_at(torch.arange(length), d_model)


def wenet_sinusoids_at(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """The rows of WeNet's table at any frame positions, computed for just those (a live
    stream's absolute positions grow without bound).

    Shapes:
        positions: (...) int -> (..., d_model) float32
    """
    if d_model % 2:
        raise ValueError(f"sinusoidal positions need an even width, got {d_model}")
    div_term = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32, device=positions.device) * -(math.log(10000.0) / d_model)
    )
    angle = positions.to(torch.float32)[..., None] * div_term  # (..., D / 2)
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).flatten(-2)  # sin even, cos odd


class SinusoidalTable(nn.Module):
    """A WeNet sinusoidal position table that grows on demand.

    The table is a non-persistent buffer: it is derived, not trained, so it is not part
    of the state dict (WeNet's checkpoints store a 5000-row copy, which converters drop).
    It follows the module's dtype, like WeNet's float32 buffer cast with the model.
    """

    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        self.d_model = d_model
        self.register_buffer("pe", wenet_sinusoids(max_len, d_model), persistent=False)

    def rows(self, offset: int, size: int) -> torch.Tensor:
        """Positions ``offset .. offset + size - 1``.

        Shapes:
            -> (1, size, d_model)
        """
        if offset < 0:
            raise ValueError(f"position offset must be >= 0, got {offset}")
        if offset + size > self.pe.shape[0]:
            grown = max(offset + size, 2 * self.pe.shape[0])
            self.pe = wenet_sinusoids(grown, self.d_model).to(device=self.pe.device, dtype=self.pe.dtype)
        return self.pe[None, offset : offset + size]


class PositionalEncoding(nn.Module):
    """WeNet's absolute ``PositionalEncoding``: ``x * sqrt(d) + pe[offset : offset + T]``
    (the attention decoder's ``embed.1``).

    Shapes:
        x: (B, T, D) -> (B, T, D)
    """

    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        self.d_model = d_model
        self.xscale = math.sqrt(d_model)
        self.table = SinusoidalTable(d_model, max_len)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x * self.xscale + self.table.rows(offset, x.shape[1]).to(x.dtype)


class RelPositionalEncoding(nn.Module):
    """WeNet's ``RelPositionalEncoding``: returns ``x * sqrt(d)`` and the position rows apart.

    Shapes:
        x: (B, T, D) -> (x * sqrt(D) (B, T, D), pos_emb (1, T, D))
    """

    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        self.d_model = d_model
        self.xscale = math.sqrt(d_model)
        self.table = SinusoidalTable(d_model, max_len)

    def position_encoding(self, offset: int, size: int) -> torch.Tensor:
        """Rows ``offset .. offset + size - 1``. -> (1, size, D)"""
        return self.table.rows(offset, size)

    def forward(self, x: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        return x * self.xscale, self.position_encoding(offset, x.shape[1]).to(x.dtype)


class RelPositionMultiHeadedAttention(LinearQKVO):
    """Self-attention with WeNet's relative-position term (checkpoint names ``linear_q``,
    ``linear_k``, ``linear_v``, ``linear_out``, ``linear_pos``, ``pos_bias_u``, ``pos_bias_v``).

    Args:
        n_head: heads H; ``d_model`` must be a multiple of it (head width d_k = D / H).
        query_bias / key_bias / value_bias: biases of the projections (WeNet gives
            ``linear_out`` the query's).

    Shapes:
        x: (B, T, D); pos_emb: (1 or B, T, D) from ``RelPositionalEncoding``;
        key_lengths: (B,) valid frames per row; chunk_mask: (T, T) or (B, T, T) bool,
        True where a query may attend a key -> (B, T, D). With ``packing``, x is (N, D)
        packed rows: the projections run packed, the attention core per row (padded to
        ``packing.max_len``, key lengths from the packing) -> (N, D)
    """

    def __init__(
        self,
        n_head: int,
        d_model: int,
        *,
        query_bias: bool = True,
        key_bias: bool = True,
        value_bias: bool = True,
    ) -> None:
        super().__init__(n_head, d_model, query_bias=query_bias, key_bias=key_bias, value_bias=value_bias)
        self.linear_pos = Linear(d_model, d_model, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(n_head, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.empty(n_head, self.d_k))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, H, d_k)"""
        b, t, _ = x.shape
        return x.view(b, t, self.n_head, self.d_k)

    def forward(
        self,
        x: torch.Tensor,
        pos_emb: torch.Tensor,
        *,
        key_lengths: torch.Tensor | None = None,
        chunk_mask: torch.Tensor | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        q = self._split(as_rows(self.linear_q(x), packing))  # (B, T, H, d_k)
        k = self._split(as_rows(self.linear_k(x), packing)).transpose(1, 2)  # (B, H, T, d_k)
        v = self._split(as_rows(self.linear_v(x), packing)).transpose(1, 2)
        b, t, d = q.shape[0], q.shape[1], x.shape[-1]
        if packing is not None:
            key_lengths = packing.lengths
        p = self._split(self.linear_pos(pos_emb)).transpose(1, 2)  # (1|B, H, T, d_k)
        q_u = (q + self.pos_bias_u).transpose(1, 2)  # (B, H, T, d_k)
        q_v = (q + self.pos_bias_v).transpose(1, 2)
        scale = 1.0 / math.sqrt(self.d_k)
        bias = torch.matmul(q_v, p.transpose(-2, -1)) * scale  # (B, H, T, T): the position term
        allowed = None
        if key_lengths is not None:
            allowed = key_padding_mask(key_lengths.to(x.device), t)[:, :, 0]  # (B, 1, T) over keys
        if chunk_mask is not None:
            cm = chunk_mask.to(device=x.device, dtype=torch.bool)
            cm = cm[None] if cm.dim() == 2 else cm  # (1|B, T, T)
            allowed = cm if allowed is None else allowed & cm
        if allowed is not None:
            # A padded query may see no key at all (a left-limited chunk past the row's end).
            # Recent torch returns zeros for such a row, older releases and some fused
            # kernels NaN, which would leak into valid frames through 0 * NaN: let it see
            # every key, so its (discarded) output is finite everywhere.
            allowed = allowed | ~allowed.any(dim=-1, keepdim=True)
            bias = bias.masked_fill(~allowed[:, None], float("-inf"))
        out = attention(q_u, k, v, mask=bias, scale=scale).transpose(1, 2).reshape(b, t, d)  # (B, T, D)
        return self.linear_out(as_packed(out, packing))

    def extra_repr(self) -> str:
        return f"n_head={self.n_head}, d_k={self.d_k}"
