"""Normalisation layers with fused add+norm forms.

Pre-norm residual streams call ``add_forward(x, residual)``, which returns both the
normalised sum and the un-normalised sum: the sum is carried into the next sublayer
as its residual without a separate elementwise pass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _ResidualNorm(nn.Module):
    """The fused add+norm form every norm here shares (its ``forward`` is the norm)."""

    def add_forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(norm(x + residual), x + residual)``."""
        s = x + residual
        return self.forward(s), s


class LayerNorm(_ResidualNorm):
    """LayerNorm over the last dimension, optionally without bias.

    Shapes:
        x: (..., D) -> (..., D)
    """

    def __init__(
        self, normalized_shape: int, eps: float = 1e-5, bias: bool = True, elementwise_affine: bool = True
    ) -> None:
        super().__init__()
        self.normalized_shape = (normalized_shape,)
        self.eps = eps
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(normalized_shape))
            self.bias = nn.Parameter(torch.zeros(normalized_shape)) if bias else None
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape[0]}, eps={self.eps}, bias={self.bias is not None}"


class RMSNorm(_ResidualNorm):
    """RMSNorm over the last dimension; the statistic accumulates in float32.

    Shapes:
        x: (..., D) -> (..., D)
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * y.to(dtype)) if dtype != y.dtype else self.weight * y

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class BatchNorm1d(nn.Module):
    """Inference batch norm over channels with ``nn.BatchNorm1d``'s names
    (``weight``, ``bias``, ``running_mean``, ``running_var``, ``num_batches_tracked``).

    Always uses the running statistics: oasr only runs inference.

    Shapes:
        x: (B, C, T) -> (B, C, T)
    """

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}"


class MaskedGroupNorm(nn.Module):
    """``nn.GroupNorm(groups, C)`` (its names; default one group a channel, each channel
    normalised over time) with each row's statistics taken over its valid frames only, so a
    padded row equals the row alone (wav2vec2's first conv layer; Moonshine's one group).

    Shapes:
        x: (B, C, T), mask: (B, T) bool or None -> (B, C, T)
    """

    def __init__(self, channels: int, eps: float = 1e-5, groups: int | None = None) -> None:
        super().__init__()
        self.eps = eps
        self.groups = channels if groups is None else groups
        if channels % self.groups:
            raise ValueError(f"channels={channels} is not a multiple of groups={self.groups}")
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is None:
            return F.group_norm(x, self.groups, self.weight, self.bias, self.eps)
        # statistics in float32 at least (a half-precision sum over a long row overflows), as
        # group_norm's own kernels keep them
        b, c, t = x.shape
        xs = (x if x.dtype == torch.float64 else x.float()).reshape(b, self.groups, -1, t)  # (B, G, C/G, T)
        m = mask[:, None, None, :].to(xs.dtype)  # (B, 1, 1, T)
        n = (m.sum(-1, keepdim=True) * xs.shape[2]).clamp(min=1)  # (B, 1, 1, 1)
        mean = (xs * m).sum((-1, -2), keepdim=True) / n  # (B, G, 1, 1)
        var = ((xs - mean).square() * m).sum((-1, -2), keepdim=True) / n
        y = ((xs - mean) * torch.rsqrt(var + self.eps)).reshape(b, c, t).to(x.dtype)
        return y * self.weight[:, None] + self.bias[:, None]
