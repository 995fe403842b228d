"""Reading and writing a paged K/V pool (paged streaming encoders).

The pool of one layer is ``(n_blocks, block_size, n_heads, head_dim)``: block ``b`` holds
``block_size`` consecutive frames of one stream. ``block_tables[i, j]`` is the pool block
holding frames ``[j * block_size, (j + 1) * block_size)`` of row ``i``'s stream (-1: not
held, either never written or dropped behind the stream's attention window). A row's frame
``p`` therefore lives at flat pool row ``block_tables[i, p // block_size] * block_size + p %
block_size``; both helpers work on the pool flattened to ``(n_blocks * block_size, H, D)``.
"""

from __future__ import annotations

import torch

__all__ = ["paged_rows", "read_paged", "write_paged"]


def paged_rows(
    block_tables: torch.Tensor, start: torch.Tensor, length: torch.Tensor, width: int, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat pool rows of frames ``[start, start + width)`` of each row's stream.

    Args:
        block_tables: (B, max_blocks) int.
        start: (B,) first frame of each row (may be negative: those frames do not exist).
        length: (B,) frames that exist from ``start`` on (the rest of the width is padding).
        width: frames per row in the result.

    Returns:
        rows (B, width) int64 flat pool rows (0 where invalid), valid (B, width) bool.
    """
    pos = start[:, None].long() + torch.arange(width, device=block_tables.device)[None, :]
    # valid frames: pos in [max(start, 0), start + length)
    valid = (pos >= 0) & (pos < (start + length)[:, None].long())
    safe = pos.clamp(min=0)
    col = (safe // block_size).clamp(max=block_tables.shape[1] - 1)
    block = block_tables.long().gather(1, col)
    valid = valid & (block >= 0)
    rows = block.clamp(min=0) * block_size + safe % block_size
    return torch.where(valid, rows, torch.zeros_like(rows)), valid


def read_paged(pool: torch.Tensor, rows: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Gather frames of a layer's pool.

    Shapes:
        pool: (n_blocks, block_size, H, D), rows / valid: (B, W) -> (B, W, H, D), zeros where invalid
    """
    flat = pool.reshape(-1, pool.shape[-2], pool.shape[-1])
    out = flat.index_select(0, rows.reshape(-1)).view(*rows.shape, pool.shape[-2], pool.shape[-1])
    # where, not a product: an invalid row reads pool row 0 (``paged_rows``), and the pool is
    # allocated unwritten, so whatever it holds (NaN included) must not reach attention.
    return torch.where(valid[..., None, None], out, torch.zeros((), dtype=out.dtype, device=out.device))


def write_paged(pool: torch.Tensor, rows: torch.Tensor, valid: torch.Tensor, values: torch.Tensor) -> None:
    """Write frames into a layer's pool in place (frames where ``valid`` is False are skipped).

    Shapes:
        pool: (n_blocks, block_size, H, D), rows / valid: (B, W), values: (B, W, H, D)
    """
    flat = pool.view(-1, pool.shape[-2], pool.shape[-1])
    keep = valid.reshape(-1)
    flat.index_copy_(0, rows.reshape(-1)[keep], values.reshape(-1, *values.shape[-2:])[keep].to(pool.dtype))
