"""Preallocated K/V storage for autoregressive decoders, indexed per row.

A pool holds decoder self-attention K/V for up to ``max_rows`` hypotheses and,
for encoder-decoder models, cross-attention K/V for up to ``max_groups`` encoder
windows. A running decode batch occupies a contiguous run of rows (and groups),
so a step reads plain views of the pool: nothing is concatenated or re-allocated
per step, requests can join (their prefill writes the rows after the running
batch) and leave (a ``select`` moves a few rows into the holes) between steps,
and a step can be captured in a CUDA graph over fixed addresses.

Rows of one group share that group's cross-attention K/V: beam search keeps k
hypotheses per encoder window without copying the window's K/V k times.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field

import torch


class PoolExhausted(RuntimeError):
    """A prefill or merge needs more rows / groups than the pool has free."""


def zeros_on_demand(shape: tuple[int, ...], device: torch.device | str, dtype: torch.dtype) -> torch.Tensor:
    """A zero tensor whose host memory is taken only where it is written.

    On the CPU the storage is an anonymous mapping: the kernel hands out zero pages as they are
    first touched, so a pool sized for the decoder's whole context and every group holds in RAM only
    the rows, tokens and windows a decode has written (``torch.zeros`` writes, and so keeps, all of
    it). Elsewhere it is ``torch.zeros``.
    """
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, device=device, dtype=dtype)
    n = 1
    for d in shape:
        n *= d
    nbytes = n * torch.empty((), dtype=dtype).element_size()
    if nbytes == 0:
        return torch.zeros(shape, dtype=dtype)
    return torch.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype).view(shape)  # the tensor keeps the map alive


class KVPool:
    """K/V buffers for one decoder (host memory is taken as rows are written: ``zeros_on_demand``).

    Layout:
        k, v: (n_layers, max_rows, n_heads, max_len, head_dim)
        cross_k, cross_v: (n_layers, max_groups, n_heads, cross_len, head_dim), or None

    Args:
        n_layers, n_heads, head_dim: decoder geometry (n_heads = K/V heads).
        max_rows: hypothesis rows (batch rows x beams).
        max_len: tokens per row (the decoder's context).
        max_groups: encoder windows with cross-attention K/V (0 for decoder-only LMs).
        cross_len: encoder frames per window.
    """

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        head_dim: int,
        max_rows: int,
        max_len: int,
        *,
        max_groups: int = 0,
        cross_len: int = 0,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        shape = (n_layers, max_rows, n_heads, max_len, head_dim)
        self.k = zeros_on_demand(shape, device, dtype)
        self.v = zeros_on_demand(shape, device, dtype)
        if max_groups > 0:
            cshape = (n_layers, max_groups, n_heads, cross_len, head_dim)
            self.cross_k: torch.Tensor | None = zeros_on_demand(cshape, device, dtype)
            self.cross_v: torch.Tensor | None = zeros_on_demand(cshape, device, dtype)
        else:
            self.cross_k = self.cross_v = None
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.max_rows = max_rows
        self.max_len = max_len
        self.max_groups = max_groups
        self.cross_len = cross_len
        self.device = torch.device(device)
        self.dtype = dtype

    def copy_from(self, other: KVPool, n_rows: int, n_groups: int, n_tokens: int) -> None:
        """Copy the first rows / groups of a smaller pool (growing a pool between steps)."""
        self.k[:, :n_rows, :, :n_tokens] = other.k[:, :n_rows, :, :n_tokens]
        self.v[:, :n_rows, :, :n_tokens] = other.v[:, :n_rows, :, :n_tokens]
        if n_groups and self.cross_k is not None and other.cross_k is not None:
            self.cross_k[:, :n_groups] = other.cross_k[:, :n_groups]
            self.cross_v[:, :n_groups] = other.cross_v[:, :n_groups]

    def nbytes(self) -> int:
        total = self.k.numel() * self.k.element_size() * 2
        if self.cross_k is not None:
            total += self.cross_k.numel() * self.cross_k.element_size() * 2
        return total

    def move_rows(self, dst: list[int], src: list[int], n_tokens: int) -> None:
        """Copy self-attention K/V of rows ``src`` into rows ``dst`` (first ``n_tokens``)."""
        if not dst or n_tokens <= 0:
            return
        d = torch.tensor(dst, device=self.device)
        s = torch.tensor(src, device=self.device)
        for buf in (self.k, self.v):
            # The right-hand side is gathered before the write, so overlaps are safe.
            buf[:, d, :, :n_tokens] = buf[:, s, :, :n_tokens]

    def move_groups(self, dst: list[int], src: list[int]) -> None:
        """Copy cross-attention K/V of groups ``src`` into groups ``dst``."""
        if not dst or self.cross_k is None:
            return
        d = torch.tensor(dst, device=self.device)
        s = torch.tensor(src, device=self.device)
        for buf in (self.cross_k, self.cross_v):
            buf[:, d] = buf[:, s]


@dataclass
class DecoderState:
    """A decode batch's place in a pool.

    The batch occupies rows ``[row0, row0 + n_rows)`` and groups
    ``[group0, group0 + n_groups)``. ``row_group[i]`` is the group (relative to
    ``group0``) whose cross-attention row ``i`` reads; ``lengths[i]`` the tokens
    cached for row ``i`` (kept on the host, mirrored on the device in
    ``lengths_t``, so no step needs a device sync to know its extent).
    """

    pool: KVPool
    row0: int
    group0: int
    n_groups: int
    lengths: list[int]
    lengths_t: torch.Tensor  # (n_rows,) int64 on the pool's device
    row_group: list[int]
    extras: dict = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        return len(self.lengths)

    @property
    def max_length(self) -> int:
        return max(self.lengths) if self.lengths else 0

    @property
    def group_size(self) -> int | None:
        """k when rows are ``[g0]*k + [g1]*k + ...`` in group order, else None."""
        n, g = self.n_rows, self.n_groups
        if g == 0 or n % g:
            return None
        k = n // g
        if all(grp == i // k for i, grp in enumerate(self.row_group)):
            return k
        return None

    def advance(self) -> None:
        """Count one more cached token in every row (after a step wrote them)."""
        self.lengths = [length + 1 for length in self.lengths]
        self.lengths_t = self.lengths_t + 1

    def row_groups(self) -> RowGroups:
        """The rows' layout over their groups: ``group_size`` when it is regular, else
        each row's group (relative to ``group0``) as a (n_rows,) tensor on the pool's device."""
        k = self.group_size
        if k is not None:
            return k
        return torch.tensor(self.row_group, device=self.pool.device, dtype=torch.long)


RowGroups = int | torch.Tensor
"""How decode rows read encoder windows: k hypotheses per window in window order, or each
row's window index."""
