"""Transformer-XL relative-position attention limited to a band of keys, in linear memory.

Query ``i`` sees keys ``i - left ... i + right`` (inside its row); the score is the one of
``oasr.layers.relpos_xl``. The queries run in blocks of ``Q`` frames, each against the
``left + Q + right`` keys its band spans, so the scores of T frames are (T, Q + left + right):
linear in T where full attention's are (T, T). This is NeMo's local attention
(``self_attention_model: rel_pos_local_attn``, ``RelPositionMultiHeadAttentionLongformer`` with no
global tokens, what ``change_attention_model`` sets for long audio) and NeMo's ``regular``
attention with a finite ``att_context_size`` (a band mask over full attention).

The two differ only where ``left != right``: NeMo's Longformer lays the band on a window of
``2 max(left, right) + 1`` columns and adds the position term of its ``left`` furthest-left
distances to the window's first ``left`` columns and of its other ``right + 1`` to the last
``right + 1`` columns, whatever keys those columns hold (``nemo_positions`` reproduces it; with
``left == right`` it is the plain relative position).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from oasr.layers.attention import attention
from oasr.layers.packing import Packing, as_packed, as_rows
from oasr.layers.relpos_xl import RelPositionMultiHeadAttentionXL, xl_relative_positions

# Fewest queries per block (a block is at least left + right queries: scores stay <= 2x the band).
MIN_BLOCK_FRAMES = 16


def band_positions(left: int, right: int, d_model: int, *, device=None, dtype=torch.float32) -> torch.Tensor:
    """Sinusoids of the distances ``left, ..., 0, ..., -right`` (the band's keys, nearest the
    past first), as NeMo's ``LocalAttRelPositionalEncoding`` makes them.

    Shapes:
        -> (left + right + 1, d_model)
    """
    n = max(left, right) + 1
    table = xl_relative_positions(n, d_model, device=device, dtype=dtype)  # distances n-1 ... -(n-1)
    return table[n - 1 - left : n + right]


def nemo_position_columns(left: int, right: int) -> torch.Tensor:
    """For each key offset ``-left ... right`` of the band, the row of ``band_positions`` whose
    position term NeMo's Longformer adds to it, or -1 for none (see the module docstring).

    Shapes:
        -> (left + right + 1,) long
    """
    w = max(left, right)
    col = torch.arange(-left, right + 1) + w  # the offset's column in NeMo's (2w + 1)-wide window
    rows = torch.full_like(col, -1)
    rows = torch.where(col < left, col, rows)
    return torch.where(col >= 2 * w - right, left + col - (2 * w - right), rows)


def block_indices(nb: int, nq: int, w: int, left: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Absolute frame indices of ``nb`` blocks of ``nq`` queries, each against a window of ``w``
    keys starting ``left`` frames before its first query.

    Shapes:
        -> queries (nb, Q), keys (nb, W)
    """
    start = torch.arange(nb, device=device)[:, None] * nq
    return start + torch.arange(nq, device=device), start - left + torch.arange(w, device=device)


def blocked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias_u: torch.Tensor,
    pos_scores: torch.Tensor,
    allowed: torch.Tensor,
    scale: float,
    t: int,
) -> torch.Tensor:
    """Transformer-XL attention of query blocks against their key windows: the content term
    ``(q + u) . k`` in the attention core, the (scaled) position term and the allowed keys as its
    additive mask; the first ``t`` frames of the blocks' outputs, heads joined.

    Shapes:
        q: (B, H, nb, Q, Dh), k / v: (B, H, nb, W, Dh), bias_u: (H, Dh), pos_scores: (B, H, nb, Q, W),
        allowed: (B, nb, Q, W) bool -> (B, t, H * Dh)
    """
    b, h, nb, nq, dh = q.shape
    w = k.shape[3]
    mask = pos_scores.masked_fill(~allowed[:, None], float("-inf"))
    out = attention(
        (q + bias_u[:, None, None, :]).reshape(b, h * nb, nq, dh),
        k.reshape(b, h * nb, w, dh),
        v.reshape(b, h * nb, w, dh),
        mask=mask.reshape(b, h * nb, nq, w),
        scale=scale,
    )  # (B, H * nb, Q, Dh)
    return out.reshape(b, h, nb * nq, dh)[:, :, :t].transpose(1, 2).reshape(b, t, h * dh)


class LocalRelPositionAttention(RelPositionMultiHeadAttentionXL):
    """``RelPositionMultiHeadAttentionXL`` over full context, or over a band of keys
    (``set_context``): the same projections and biases, so a checkpoint's weights serve both.

    Attributes:
        context: (left, right) keys each query sees, or None for full attention.
        nemo_positions: place the position terms as NeMo's Longformer does (``left != right``
            only; see the module docstring).

    Shapes:
        x: (B, T, D), pos_emb: (2T - 1, D) (full attention only), key_lengths: (B,) -> (B, T, D);
        with ``packing``, x is (N, D) packed rows -> (N, D)
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True) -> None:
        super().__init__(d_model, n_heads, bias=bias)
        self.context: tuple[int, int] | None = None
        self.nemo_positions = False

    def set_context(self, context: tuple[int, int] | None, nemo_positions: bool = False) -> None:
        """Attend within ``context`` = (left, right) frames (None: full attention).

        Raises:
            ValueError: a negative side, or a band of one frame (no context at all).
        """
        if context is not None:
            left, right = (int(c) for c in context)
            if left < 0 or right < 0 or max(left, right) == 0:
                raise ValueError(f"a local attention context is (left, right) >= 0, not both 0; got {context}")
            context = (left, right)
        self.context = context
        self.nemo_positions = nemo_positions

    def forward(
        self,
        x: torch.Tensor,
        pos_emb: torch.Tensor | None = None,
        key_lengths: torch.Tensor | None = None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        if self.context is None:
            return super().forward(x, pos_emb, key_lengths, packing)
        if packing is not None:
            key_lengths = packing.lengths
        q = as_rows(self.linear_q(x), packing)
        b, t, _ = q.shape
        if key_lengths is None:
            key_lengths = torch.full((b,), t, dtype=torch.long, device=q.device)
        k = as_rows(self.linear_k(x), packing)
        v = as_rows(self.linear_v(x), packing)
        out = self._banded(q, k, v, key_lengths.to(q.device))  # (B, T, D)
        return self.linear_out(as_packed(out, packing))

    def _banded(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The band's attention over projected (B, T, D) queries, keys and values -> (B, T, D)."""
        left, right = self.context
        b, t, _ = q.shape
        h, dh = self.n_head, self.d_k
        nq = min(t, max(left + right, MIN_BLOCK_FRAMES))  # queries per block
        nb = -(-t // nq)
        w = left + nq + right  # keys per block
        t_pad = nb * nq

        q = F.pad(q.view(b, t, h, dh).transpose(1, 2), (0, 0, 0, t_pad - t)).reshape(b, h, nb, nq, dh)

        def windows(y: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, H, nb, W, Dh), block j: keys jQ - left ...
            y = F.pad(y.view(b, t, h, dh).transpose(1, 2), (0, 0, left, t_pad - t + right))
            return y.unfold(2, w, nq).transpose(-1, -2)

        k, v = windows(k), windows(v)

        # The position term of every offset -left ... right, then skewed onto each block's key window:
        # query a's offset c (key a + c of the window) sits at column a + c.
        n_off = left + right + 1
        pos = band_positions(left, right, self.d_model, device=q.device, dtype=q.dtype)
        p = self.linear_pos(pos).view(n_off, h, dh).permute(1, 2, 0)  # (H, Dh, n_off)
        bd = torch.matmul(q + self.bias_v[:, None, None, :], p[:, None])  # (B, H, nb, Q, n_off)
        if self.nemo_positions and left != right:
            rows = nemo_position_columns(left, right).to(q.device)
            bd = torch.where(rows >= 0, bd.index_select(-1, rows.clamp(min=0)), bd.new_zeros(()))
        bd = F.pad(bd, (0, nq)).flatten(-2)[..., : nq * w].view(b, h, nb, nq, w)  # (B, H, nb, Q, W)
        scale = dh**-0.5

        qi, kj = block_indices(nb, nq, w, left, device=q.device)  # (nb, Q), (nb, W) absolute frames
        off = kj[0][None, :] - qi[0][:, None]  # (Q, W) each key's offset from its query, as in every block
        band = (off >= -left) & (off <= right)
        inside = (kj >= 0)[None, :, None, :] & (kj[None, :, None, :] < lengths[:, None, None, None])  # (B, nb, 1, W)
        # A query past its row's end keeps its own frame, so that its softmax is defined.
        own = qi[:, :, None] == kj[:, None, :]  # (nb, Q, W)
        allowed = band[None, None] & (inside | own[None])  # (B, nb, Q, W)
        return blocked_attention(q, k, v, self.bias_u, bd * scale, allowed, scale, t)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, context={self.context}"


__all__ = [
    "LocalRelPositionAttention",
    "band_positions",
    "block_indices",
    "blocked_attention",
    "nemo_position_columns",
]
