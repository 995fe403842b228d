"""Block-wise self-attention with Shaw's relative position embeddings (Shaw et al. 2018).

The frames of each row are cut into blocks of ``block`` frames (the last block padded);
every block attends only within itself, and the score of query ``i`` against key ``j`` of
a block gains ``q_i . E[i - j]``, a learned embedding of their distance:

    scores = (q k^T + q E[i - j]^T) * Dh^-0.5,   E: (2 * max_position + 1, Dh)

This is the attention of IBM's Granite Speech encoders (transformers'
``GraniteSpeech5EncoderAttention`` and ``GraniteSpeechConformerAttention``); the families
own their projections and call :func:`shaw_block_attention` for the core.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from oasr.layers.attention import attention


def shaw_distances(block: int, max_position: int, device=None) -> torch.Tensor:
    """Row of the embedding table for each (query, key) pair of a block: ``i - j + max_position``.

    Shapes:
        -> (block, block) long
    """
    if not 0 < block <= max_position:
        raise ValueError(f"block={block} must be in (0, max_position={max_position}]")
    pos = torch.arange(block, device=device)
    return pos[:, None] - pos[None, :] + max_position


def shaw_block_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rel_emb: torch.Tensor,
    block: int,
    key_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention within blocks of ``block`` frames, with a Shaw relative-position term.

    Keys outside a row's ``key_valid`` frames (and the frames padding the last block) get
    the dtype's lowest finite score, as the reference masks them: a block with no valid key
    (all padding) then averages its values instead of giving NaN.

    Args:
        q, k, v: (B, H, T, Dh) heads of the whole rows.
        rel_emb: (block, block, Dh), the embedding of each (query, key) distance of a block
            (the table indexed by :func:`shaw_distances`).
        block: frames per block.
        key_valid: (B, T) bool, True at each row's valid frames, or None (all valid).

    Returns:
        (B, H, T, Dh)
    """
    b, h, t, d = q.shape
    pad = -t % block
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        if key_valid is None:
            key_valid = torch.ones(b, t, dtype=torch.bool, device=q.device)
        key_valid = F.pad(key_valid, (0, pad), value=False)
    nb = (t + pad) // block

    def blocks(x: torch.Tensor) -> torch.Tensor:  # (B, H, nb * c, Dh) -> (B * nb, H, c, Dh)
        return x.view(b, h, nb, block, d).transpose(1, 2).reshape(b * nb, h, block, d)

    qb, kb, vb = blocks(q), blocks(k), blocks(v)
    scale = d**-0.5
    bias = torch.einsum("nhcd,crd->nhcr", qb, rel_emb * scale)  # (B * nb, H, c, c)
    if key_valid is not None:
        keys = key_valid.reshape(b * nb, 1, 1, block)
        bias = bias.masked_fill(~keys, torch.finfo(bias.dtype).min)
    out = attention(qb, kb, vb, mask=bias, scale=scale)  # (B * nb, H, c, Dh)
    return out.view(b, nb, h, block, d).transpose(1, 2).reshape(b, h, nb * block, d)[:, :, :t]


__all__ = ["shaw_block_attention", "shaw_distances"]
