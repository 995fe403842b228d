"""Zipformer2's own blocks (icefall), kept in the waist so that every parameter of the
zipformer and transducer families lives in an ``oasr.layers`` block. None of them is a
special case of another waist op:

* ``BiasNorm`` divides by the RMS of ``x - bias`` (no centring, no per-channel gain) and scales
  by a learnt scalar, where LayerNorm / RMSNorm centre or carry a gain;
* ``Bypass`` is the learnt per-channel lerp that replaces a residual add;
* ``SimpleDownsample`` is a softmax-weighted sum over groups of frames;
* ``ChunkCausalDepthwiseConv1d`` adds a within-chunk kernel with a per-position scale to a
  causal depthwise kernel;
* ``swoosh_l`` / ``swoosh_r`` are icefall's activations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers.embedding import Conv1d

__all__ = ["BiasNorm", "Bypass", "ChunkCausalDepthwiseConv1d", "SimpleDownsample", "swoosh_l", "swoosh_r"]


# log(1 + e^z) as softplus, not icefall's logaddexp(0, z): one fused op instead of a zeros
# tensor and logaddexp (the activations took ~20 % of a Zipformer-medium encoder pass on a CPU).
# Past the threshold softplus returns z itself: at 40 that is within e^-40 of the exact value
# (below float64's rounding of z), and e^40 still fits the float32 that half types compute in.
_SOFTPLUS_THRESHOLD = 40.0


def swoosh_l(x: torch.Tensor) -> torch.Tensor:
    """icefall's SwooshL: log(1 + e^(x - 4)) - 0.08 x - 0.035."""
    return F.softplus(x - 4.0, threshold=_SOFTPLUS_THRESHOLD) - 0.08 * x - 0.035


def swoosh_r(x: torch.Tensor) -> torch.Tensor:
    """icefall's SwooshR: log(1 + e^(x - 1)) - 0.08 x - 0.313261687."""
    return F.softplus(x - 1.0, threshold=_SOFTPLUS_THRESHOLD) - 0.08 * x - 0.313261687


class BiasNorm(nn.Module):
    """Divides by the RMS of ``x - bias`` (no centring, no per-channel gain) and scales by a
    learnt scalar ``exp(log_scale)``.

    Shapes:
        x: (..., D) -> (..., D)
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(dim))
        self.log_scale = nn.Parameter(torch.tensor(1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.mean((x - self.bias) ** 2, dim=-1, keepdim=True) ** -0.5 * self.log_scale.exp()
        return x * scale


class Bypass(nn.Module):
    """The learnt per-channel lerp ``x_in + (x - x_in) * bypass_scale`` that replaces a residual add."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.bypass_scale = nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, x_in: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x_in + (x - x_in) * self.bypass_scale


class ChunkCausalDepthwiseConv1d(nn.Module):
    """icefall's chunk-causal depthwise convolution: a causal depthwise kernel of
    ``kernel // 2 + 1`` taps, plus a full-width depthwise kernel applied within each chunk
    whose output is scaled per position by ``1 + left_edge + right_edge``
    (``chunkwise_conv_scale``).

    Shapes:
        x: (B, C, T), lengths: (B,) -> (B, C, T)
    """

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.kernel = kernel
        self.causal_conv = Conv1d(channels, channels, kernel // 2 + 1, groups=channels)
        self.chunkwise_conv = Conv1d(channels, channels, kernel, padding=kernel // 2, groups=channels)
        self.chunkwise_conv_scale = nn.Parameter(torch.zeros(2, channels, kernel))

    def _chunk_scale(self, chunk: int) -> torch.Tensor:
        """(C, chunk): the per-position scale of the within-chunk kernel."""
        left, right = self.chunkwise_conv_scale[0], self.chunkwise_conv_scale[1]
        if chunk < self.kernel:
            left, right = left[:, :chunk], right[:, -chunk:]
        else:
            pad = left.new_zeros(left.shape[0], chunk - self.kernel)
            left, right = torch.cat((left, pad), dim=-1), torch.cat((pad, right), dim=-1)
        return 1.0 + (left + right)

    def forward(self, x: torch.Tensor, chunk_size: int, lengths: torch.Tensor) -> torch.Tensor:
        b, c, t = x.shape
        left = self.kernel // 2
        chunk = t if chunk_size <= 0 or chunk_size > t else chunk_size
        x = F.pad(x, (left, -t % chunk))
        causal = self.causal_conv(x[..., : left + t])
        n = (x.shape[-1] - left) // chunk
        xc = x[..., left:].reshape(b, c, n, chunk).transpose(1, 2).reshape(b * n, c, chunk)
        xc = self.chunkwise_conv(xc).reshape(b, n, c, chunk)
        scale = self._chunk_scale(chunk)
        short = [int(n_) for n_ in torch.unique(lengths[(lengths > 0) & (lengths < chunk)]).tolist()]
        if short:
            # Alone, a row shorter than the chunk is one chunk of its own length: its scale.
            first = scale.expand(b, c, chunk).clone()
            for length in short:
                first[lengths == length, :, :length] = self._chunk_scale(length)
            xc = torch.cat((xc[:, :1] * first[:, None], xc[:, 1:] * scale), dim=1)
        else:
            xc = xc * scale
        xc = xc.transpose(1, 2).reshape(b, c, n * chunk)[..., :t]
        return xc + causal

    def streaming_forward(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One streaming chunk: the causal kernel reads the cached ``kernel // 2`` frames before
        it, the within-chunk kernel sees the chunk alone.

        Shapes:
            x: (B, C, T) the whole chunk, cache: (B, C, kernel // 2) -> (B, C, T), new cache
        """
        t = x.shape[-1]
        left = self.kernel // 2
        full = torch.cat((cache, x), dim=-1)  # (B, C, left + T)
        out = self.causal_conv(full) + self.chunkwise_conv(x) * self._chunk_scale(t)
        return out, full[..., full.shape[-1] - left :]


class SimpleDownsample(nn.Module):
    """Softmax(bias)-weighted sum of each group of ``factor`` frames. A row's last group is
    completed with copies of that row's own last frame (icefall pads alone-rows that way).

    Shapes:
        x: (B, T, D), lengths: (B,) -> (B, ceil(T / factor), D), (B,) ceil(lengths / factor)
    """

    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = factor
        self.bias = nn.Parameter(torch.zeros(factor))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        ds = self.factor
        t_out = (t + ds - 1) // ds
        idx = torch.arange(t_out * ds, device=x.device)[None, :]
        idx = torch.minimum(idx, (lengths - 1).clamp(min=0)[:, None])  # (B, T_out * ds)
        x = x.gather(1, idx[..., None].expand(b, t_out * ds, d)).reshape(b, t_out, ds, d)
        weights = self.bias.softmax(dim=0)[:, None]  # (ds, 1)
        return (x * weights).sum(dim=2), (lengths + ds - 1) // ds
