"""The attention core over ``torch.nn.functional.scaled_dot_product_attention``.

Families own their projections (and their checkpoint names); they all meet here
for the score / softmax / weighted-sum part, so a faster kernel lands in one place.
Masks are given as key lengths where possible instead of materialised tensors.
``LinearQKVO`` is the projection set WeNet's and NeMo's attentions share.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers.linear import Linear


def key_padding_mask(key_lengths: torch.Tensor, n_keys: int) -> torch.Tensor:
    """Boolean "may attend" mask from per-row key lengths.

    Shapes:
        key_lengths: (B,) -> (B, 1, 1, n_keys)
    """
    pos = torch.arange(n_keys, device=key_lengths.device)
    return (pos[None, :] < key_lengths[:, None])[:, None, None, :]


def _combine(mask: torch.Tensor | None, allowed: torch.Tensor) -> torch.Tensor:
    """AND a boolean "may attend" mask into a boolean or additive mask."""
    if mask is None:
        return allowed
    if mask.dtype == torch.bool:
        return mask & allowed
    return mask.masked_fill(~allowed, float("-inf"))


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    key_lengths: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention.

    Args:
        q: queries (B, H, Tq, D).
        k, v: keys / values (B, H, Tk, D); K/V heads may be fewer than query heads
            when H is a multiple of them (grouped-query attention).
        mask: boolean "may attend" mask or additive float mask, broadcastable to
            (B, H, Tq, Tk).
        key_lengths: (B,) number of valid keys per row (keys past it are masked);
            combined with ``mask`` when both are given.
        is_causal: causal mask aligned to the top-left corner (Tq == Tk prefill).
        scale: score scale; default ``D ** -0.5``.

    Returns:
        (B, H, Tq, D)
    """
    if key_lengths is not None:
        mask = _combine(mask, key_padding_mask(key_lengths, k.shape[-2]))
    if is_causal and mask is not None:
        # SDPA takes either a mask or is_causal: fold the causal part into the mask.
        tq, tk = q.shape[-2], k.shape[-2]
        mask = _combine(mask, torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq))
        is_causal = False
    if k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)


def attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Materialised softmax attention probabilities, for callers that need them
    (e.g. word alignment from cross-attention).

    Shapes:
        q: (B, H, Tq, D), k: (B, H, Tk, D) -> (B, H, Tq, Tk), in float32.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    return scores.softmax(dim=-1)


class LinearQKVO(nn.Module):
    """Multi-head attention's four projections under WeNet's and NeMo's names (``linear_q``,
    ``linear_k``, ``linear_v``, ``linear_out``; ``linear_out`` carries a bias exactly when
    ``linear_q`` does, WeNet's rule) and the head split; a subclass adds its positions and
    its forward (WeNet's decoder and relative-position attentions, NeMo's Transformer-XL one).

    Raises:
        ValueError: ``d_model`` is not a multiple of ``n_head``.
    """

    def __init__(
        self, n_head: int, d_model: int, *, query_bias: bool = True, key_bias: bool = True, value_bias: bool = True
    ) -> None:
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model {d_model} is not a multiple of n_head {n_head}")
        self.d_model = d_model
        self.n_head = n_head
        self.d_k = d_model // n_head
        self.linear_q = Linear(d_model, d_model, bias=query_bias)
        self.linear_k = Linear(d_model, d_model, bias=key_bias)
        self.linear_v = Linear(d_model, d_model, bias=value_bias)
        self.linear_out = Linear(d_model, d_model, bias=query_bias)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, H, T, d_k)"""
        b, t, _ = x.shape
        return x.view(b, t, self.n_head, self.d_k).transpose(1, 2)
