"""Rotary position embedding, NEOX layout (the rotated halves are the two contiguous
halves of the head dimension, as Hugging Face's ``rotate_half``)."""

from __future__ import annotations

import torch
from torch import nn


class NeoxRotaryEmbedding(nn.Module):
    """``x * cos + rotate_half(x) * sin`` with ``inv_freq = base ** (-2i / head_dim)``.

    The angles are computed in float32 (as the reference implementations do) and cast
    to the activation dtype at the end.

    Args:
        head_dim: rotated width (the whole head).
        base: the rope theta.
    """

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embedding needs an even head_dim, got {head_dim}")
        self.head_dim = head_dim
        self.base = float(base)
        # Not a buffer: ``model.to(bfloat16)`` must not round the frequencies (long inputs
        # would get wrong angles). Kept in float32 and moved to the positions' device on use.
        self.inv_freq = 1.0 / (self.base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """Angles for integer ``positions``.

        Shapes:
            positions: (T,) or (B, T) -> cos, sin: (T, head_dim) or (B, T, head_dim)
        """
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.to(torch.float32)[..., None] * self.inv_freq
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    @staticmethod
    def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate ``x`` by the angles.

        Shapes:
            x: (B, H, T, D); cos / sin: (T, D) or (B, T, D) -> (B, H, T, D)
        """
        if cos.dim() == 3:
            cos, sin = cos[:, None], sin[:, None]
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base:g}"
