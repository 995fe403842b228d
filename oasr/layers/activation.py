"""Standalone activation modules, for activations that cannot ride a GEMM epilogue
(e.g. after a convolution, or over a sum of two projections)."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x)


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


ACTIVATIONS = {
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "relu": F.relu,
    "silu": F.silu,
    "tanh": torch.tanh,
}


def apply_activation(x: torch.Tensor, name: str | None) -> torch.Tensor:
    """Apply the named activation (``None`` is the identity)."""
    if name is None:
        return x
    return ACTIVATIONS[name](x)


class Activation(nn.Module):
    """A named elementwise activation as a module; a subclass fixes the name (``fixed_name``)."""

    fixed_name: ClassVar[str | None] = None

    def __init__(self, name: str | None = None) -> None:
        super().__init__()
        name = self.fixed_name if name is None else name
        if name not in ACTIVATIONS:
            raise ValueError(f"unknown activation {name!r}; expected one of {sorted(ACTIVATIONS)}")
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ACTIVATIONS[self.name](x)

    def extra_repr(self) -> str:
        return self.name


class Gelu(Activation):
    """Exact (erf) GELU."""

    fixed_name = "gelu"


class Relu(Activation):
    fixed_name = "relu"


class Silu(Activation):
    fixed_name = "silu"


class Tanh(Activation):
    fixed_name = "tanh"
