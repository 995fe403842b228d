"""The two sublayers every conformer family shares: the position-wise feed-forward
and the convolution module.

Families differ in names, biases, norms and the depthwise padding, not in the maths,
so both take those as arguments. Residual scaling (WeNet's 0.5 macaron step, LASR's
1.5 / 0.5) stays in the family's block: it is part of the block, not the sublayer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers.activation import ACTIVATIONS, apply_activation
from oasr.layers.embedding import Conv1d
from oasr.layers.linear import Linear, LinearActivation
from oasr.layers.norm import BatchNorm1d, LayerNorm
from oasr.layers.packing import Packing


class FeedForward(nn.Module):
    """``W2(act(W1 x))``; the activation rides the first GEMM's epilogue.

    Args:
        d_model, d_ff: model and hidden widths.
        activation: a name in ``oasr.layers.ACTIVATIONS`` ("silu" is swish).
        bias: whether both projections carry a bias.
        names: attribute names of the two projections, so a checkpoint's own keys
            load as they are (WeNet ``w_1`` / ``w_2``, Hugging Face ``linear1`` / ``linear2``).

    Shapes:
        x: (..., d_model) -> (..., d_model)
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        activation: str = "silu",
        bias: bool = True,
        names: tuple[str, str] = ("w_1", "w_2"),
    ) -> None:
        super().__init__()
        self.names = tuple(names)
        setattr(self, names[0], LinearActivation(d_model, d_ff, activation, bias=bias))
        setattr(self, names[1], Linear(d_ff, d_model, bias=bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first, second = (getattr(self, n) for n in self.names)
        return second(first(x))


class ConformerConvolution(nn.Module):
    """Conformer convolution module: pointwise (C -> 2C) -> GLU -> depthwise -> norm ->
    activation -> pointwise (C -> C).

    Padded frames are zeroed after the GLU, so the depthwise kernel sees zeros past
    each row's end and a padded batch gives the same valid frames as one row at a
    time. (WeNet zeroes the module's input instead; the pointwise bias then leaks into
    the first padded frames. Unpadded rows are identical either way.)

    Args:
        channels: C.
        kernel_size: depthwise kernel width.
        bias: whether the three convolutions carry biases.
        norm: "batch_norm" (inference statistics) or "layer_norm" (over channels).
        norm_eps: the norm's epsilon.
        activation: a name in ``oasr.layers.ACTIVATIONS``.
        padding: (left, right) zero padding of the depthwise conv; default
            ``(k - 1) // 2`` on both sides (an even kernel must say which side gets
            the extra frame; a causal module passes ``(k - 1, 0)``).

    Shapes:
        x: (B, T, C), mask: (B, T) bool, True at valid frames -> (B, T, C);
        packed: x (N, C) rows laid end to end (``packing``) -> (N, C)
    """

    def __init__(
        self,
        channels: int,
        kernel_size: int,
        *,
        bias: bool = True,
        norm: str = "batch_norm",
        norm_eps: float = 1e-5,
        activation: str = "silu",
        padding: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; expected one of {sorted(ACTIVATIONS)}")
        if padding is None:
            if kernel_size % 2 == 0:
                raise ValueError(f"an even depthwise kernel ({kernel_size}) needs explicit (left, right) padding")
            padding = ((kernel_size - 1) // 2, (kernel_size - 1) // 2)
        if sum(padding) != kernel_size - 1:
            raise ValueError(f"padding {padding} does not keep the length for kernel {kernel_size}")
        self.channels = channels
        self.kernel_size = kernel_size
        self.padding = tuple(padding)
        self.activation = activation
        self.pointwise_conv1 = Conv1d(channels, 2 * channels, 1, bias=bias)
        self.depthwise_conv = Conv1d(channels, channels, kernel_size, groups=channels, bias=bias)
        if norm == "batch_norm":
            self.norm = BatchNorm1d(channels, eps=norm_eps)
        elif norm == "layer_norm":
            self.norm = LayerNorm(channels, eps=norm_eps)
        else:
            raise ValueError(f"unknown conv-module norm {norm!r}; expected 'batch_norm' or 'layer_norm'")
        self.norm_kind = norm
        self.pointwise_conv2 = Conv1d(channels, channels, 1, bias=bias)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, packing: Packing | None = None
    ) -> torch.Tensor:
        if packing is not None:
            x = x[None]  # (1, N, C): one row whose depthwise kernel sees zeros between rows
        y = self.pointwise_conv1(x.transpose(1, 2))  # (B, 2C, T)
        y = F.glu(y, dim=1)
        keep = None
        if packing is not None:
            buf, index = packing.gapped(y, self.padding)
            y = self.depthwise_conv(buf).index_select(-1, index)
        else:
            if mask is not None:
                keep = mask[:, None, :].to(y.dtype)
                y = y * keep
            y = self.depthwise_conv(F.pad(y, self.padding))
        if self.norm_kind == "batch_norm":
            y = self.norm(y)
        else:
            y = self.norm(y.transpose(1, 2)).transpose(1, 2)
        y = self.pointwise_conv2(apply_activation(y, self.activation))
        if keep is not None:
            y = y * keep
        y = y.transpose(1, 2)
        return y[0] if packing is not None else y

    def extra_repr(self) -> str:
        return (
            f"channels={self.channels}, kernel={self.kernel_size}, padding={self.padding}, "
            f"norm={self.norm_kind}, activation={self.activation}"
        )
