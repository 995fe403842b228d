"""Linear layers: the GEMM every family is built on.

``Linear`` keeps the flat ``weight`` / ``bias`` checkpoint names of ``nn.Linear``;
``LinearActivation`` applies its activation as the GEMM epilogue so a checkpoint's
``fc1`` stays one module (and one kernel on a fast path) instead of two.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers.activation import ACTIVATIONS, apply_activation


class Linear(nn.Module):
    """``y = x @ W.T + b``.

    Shapes:
        x: (..., in_features) -> (..., out_features)
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=dtype))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Same initialisation as nn.Linear, so randomly built tiny models are well scaled.
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, bias={self.bias is not None}"


class LinearActivation(Linear):
    """``act(x @ W.T + b)`` with the activation as the GEMM epilogue.

    Args:
        activation: one of ``ACTIVATIONS`` ("gelu" is exact erf, "gelu_tanh" the tanh
            approximation, "relu", "silu").

    Shapes:
        x: (..., in_features) -> (..., out_features)
    """

    def __init__(self, in_features: int, out_features: int, activation: str, bias: bool = True, **kwargs) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; expected one of {sorted(ACTIVATIONS)}")
        super().__init__(in_features, out_features, bias, **kwargs)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return apply_activation(F.linear(x, self.weight, self.bias), self.activation)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", activation={self.activation}"
