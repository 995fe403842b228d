"""Sequence packing: the rows of a batch laid end to end, with no padding between them.

A packed batch is one ``(N, ...)`` tensor holding every row's frames in order, and
``cu_seqlens`` (B + 1,), the cumulative row lengths (row ``i`` is frames
``cu_seqlens[i] : cu_seqlens[i + 1]``). Position-wise layers (linears, feed-forwards,
norms, the CTC head) run on it as they are, so no FLOP is spent on padding. The two
things that look along time need care, and ``Packing`` supplies both:

* attention stays per row: ``pad`` lays the projected queries, keys and values out as
  a (B, T_max, ...) batch for the attention core and ``unpad`` gathers the result back;
* a depthwise convolution must not read across a row boundary: ``gapped`` spreads the
  rows out with zero frames between them, so the kernel sees exactly the zeros it
  would see at the edges of a padded row.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class Packing:
    """Where each row of a packed batch sits.

    Built from per-row lengths (``Packing(lengths)``) or from ``cu_seqlens``
    (``Packing.from_cu_seqlens``). The row count, total and longest row are read once,
    on the host, at construction.

    Args:
        lengths: (B,) integer frames per row (rows of length 0 are allowed).
        device: where the index tensors live (default: ``lengths``'s device).
    """

    def __init__(self, lengths: torch.Tensor, device: torch.device | str | None = None) -> None:
        if lengths.dim() != 1:
            raise ValueError(f"packing lengths must be (B,), got {tuple(lengths.shape)}")
        host = lengths.detach().to("cpu", torch.long)
        if bool((host < 0).any()):
            raise ValueError(f"packing lengths must be >= 0, got {host.tolist()}")
        device = lengths.device if device is None else torch.device(device)
        self.batch = int(host.numel())
        self.total = int(host.sum())
        self.max_len = int(host.max()) if self.batch else 0
        self.lengths = host.to(device)
        cu = F.pad(host.cumsum(0), (1, 0))
        self.cu_seqlens = cu.to(device)
        row = torch.repeat_interleave(torch.arange(self.batch), host)  # (N,) row of each frame
        pos = torch.arange(self.total) - cu[row]  # (N,) frame within its row
        self.row = row.to(device)
        self.position = pos.to(device)
        self.flat_index = (row * self.max_len + pos).to(device)  # (N,) index into (B * T_max)

    @classmethod
    def from_cu_seqlens(cls, cu_seqlens: torch.Tensor, device: torch.device | str | None = None) -> Packing:
        """From (B + 1,) cumulative lengths starting at 0."""
        if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 1:
            raise ValueError(f"cu_seqlens must be (B + 1,), got {tuple(cu_seqlens.shape)}")
        host = cu_seqlens.detach().to("cpu", torch.long)
        if int(host[0]) != 0:
            raise ValueError(f"cu_seqlens must start at 0, got {int(host[0])}")
        return cls(host.diff(), device=cu_seqlens.device if device is None else device)

    def valid(self) -> torch.Tensor:
        """(B, T_max) bool, True at each row's frames."""
        t = torch.arange(self.max_len, device=self.lengths.device)
        return t[None, :] < self.lengths[:, None]

    def pad(self, x: torch.Tensor, value: float = 0.0) -> torch.Tensor:
        """Packed rows -> a padded batch (padding filled with ``value``).

        Shapes:
            x: (N, ...) -> (B, T_max, ...)
        """
        if x.shape[0] != self.total:
            raise ValueError(f"packed tensor has {x.shape[0]} frames; the packing holds {self.total}")
        out = x.new_full((self.batch * self.max_len, *x.shape[1:]), value)
        out.index_copy_(0, self.flat_index, x)
        return out.view(self.batch, self.max_len, *x.shape[1:])

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """A padded batch -> its valid frames, packed. Frames past ``T_max`` are ignored.

        Shapes:
            x: (B, T >= T_max, ...) -> (N, ...)
        """
        if x.shape[0] != self.batch or x.shape[1] < self.max_len:
            raise ValueError(f"padded tensor {tuple(x.shape)} does not hold {self.batch} rows of {self.max_len}")
        x = x[:, : self.max_len]
        return x.reshape(self.batch * self.max_len, *x.shape[2:]).index_select(0, self.flat_index)

    def split(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Packed rows -> one view per row. (N, ...) -> B x (len_i, ...)"""
        return list(x.split(self.lengths.tolist()))

    def gapped(self, x: torch.Tensor, padding: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Spread packed rows along the last axis so a convolution cannot mix them.

        Row ``i`` is placed after ``left`` zeros (before the first row) or after the
        ``left + right`` zero frames that separate it from row ``i - 1``, and ``right``
        zeros close the buffer. An unpadded convolution of kernel ``left + right + 1``
        over the buffer then gives, at ``index``, what each row gets alone with
        (left, right) zero padding.

        Shapes:
            x: (..., C, N) -> buffer (..., C, N + B * (left + right)), index (N,)
        """
        left, right = padding
        gap = left + right
        if x.shape[-1] != self.total:
            raise ValueError(f"packed tensor has {x.shape[-1]} frames; the packing holds {self.total}")
        index = torch.arange(self.total, device=x.device) + self.row.to(x.device) * gap  # output positions
        buf = x.new_zeros(*x.shape[:-1], self.total + self.batch * gap)
        buf.index_copy_(-1, index + left, x)
        return buf, index

    def __repr__(self) -> str:
        return f"Packing(batch={self.batch}, total={self.total}, max_len={self.max_len})"


def as_rows(x: torch.Tensor, packing: Packing | None) -> torch.Tensor:
    """``packing.pad(x)``, or ``x`` itself when there is no packing (already rows)."""
    return x if packing is None else packing.pad(x)


def as_packed(x: torch.Tensor, packing: Packing | None) -> torch.Tensor:
    """``packing.unpad(x)``, or ``x`` itself when there is no packing."""
    return x if packing is None else packing.unpad(x)


__all__ = ["Packing", "as_packed", "as_rows"]
