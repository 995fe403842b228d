"""Embedding tables and convolutions used by front ends."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def table_logits(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` for an output projection ``weight`` (V, D) over a large vocabulary: a
    tied embedding table or an untied head's weight.

    On a CPU in float32 it is computed as ``(W @ x.T).T``, with a lone row doubled: for a
    decode step's few rows against a large vocabulary, MKL runs that form 1.5-3x faster than
    ``F.linear``'s (whisper-base's 51865 x 512 on 2 AVX2 cores: 6.1 / 6.4 / 12.2 ms for 1 / 2 / 8
    rows against 9.3 / 21.7 / 21.7 ms; 131072 x 512 on 1 AVX-512 core, loaded: 46 / 53 / 128 ms
    against 83 / 199 / 174).

    Shapes:
        x: (..., D), weight: (V, D) -> (..., V)
    """
    if x.device.type != "cpu" or x.dtype != torch.float32 or weight.dtype != torch.float32:
        return F.linear(x, weight)
    rows = x.reshape(-1, weight.shape[1])
    n = rows.shape[0]
    if n == 1:
        # A one-column product takes MKL's slower path; copied, as a stride-0 operand is slower still.
        rows = rows.repeat(2, 1)
    out = torch.mm(weight, rows.t())[:, :n].t().contiguous()  # (n, V)
    return out.view(*x.shape[:-1], weight.shape[0])


class Embedding(nn.Module):
    """Token (or learned position) embedding table, and its tied output projection.

    Shapes:
        ids: (...) int64 -> (..., D); logits: x (..., D) -> (..., V)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None) -> None:
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = padding_idx
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim))
        nn.init.normal_(self.weight)
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].zero_()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight, self.padding_idx)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Scores against every row of the table (a tied output projection): ``x @ W.T``
        (``table_logits``)."""
        return table_logits(x, self.weight)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """Whisper's sinusoidal table: ``[sin | cos]`` halves, (length, channels), float32."""
    if channels % 2:
        raise ValueError(f"sinusoids need an even channel count, got {channels}")
    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2, dtype=torch.float32))
    scaled_time = torch.arange(length, dtype=torch.float32)[:, None] * inv_timescales[None, :]
    return torch.cat([scaled_time.sin(), scaled_time.cos()], dim=1)


class Conv1d(nn.Module):
    """1-D convolution over (B, C, T) with ``nn.Conv1d``'s parameter names.

    Shapes:
        x: (B, C_in, T) -> (B, C_out, T_out)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.stride = stride
        self.padding = padding
        self.groups = groups
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = (in_channels // groups) * kernel_size
            nn.init.uniform_(self.bias, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.groups == 1 and self.padding == 0 and self.weight.shape[-1] == 1:
            # A pointwise convolution as one GEMM per sample: oneDNN picks its convolution
            # algorithm by batch size, so a row's result would depend on the rows beside it
            # (a live stream's on the streams sharing its step).
            w = self.weight[:, :, 0].expand(x.shape[0], -1, -1)  # (B, C_out, C_in)
            x = x[:, :, :: self.stride] if self.stride != 1 else x
            if self.bias is None:
                return torch.bmm(w, x)
            return torch.baddbmm(self.bias[None, :, None].expand(x.shape[0], -1, x.shape[2]), w, x)
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, 1, self.groups)

    def extra_repr(self) -> str:
        o, i, k = self.weight.shape
        return f"{i * self.groups}, {o}, kernel={k}, stride={self.stride}, padding={self.padding}"


class Conv2d(nn.Module):
    """2-D convolution over (B, C, H, W) with ``nn.Conv2d``'s parameter names (subsampling front ends).

    Shapes:
        x: (B, C_in, H, W) -> (B, C_out, H_out, W_out)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
        self.stride = stride
        self.padding = padding
        self.groups = groups
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, kh, kw))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = (in_channels // groups) * kh * kw
            nn.init.uniform_(self.bias, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, 1, self.groups)

    def extra_repr(self) -> str:
        o, i, kh, kw = self.weight.shape
        return f"{i * self.groups}, {o}, kernel=({kh}, {kw}), stride={self.stride}, padding={self.padding}"
