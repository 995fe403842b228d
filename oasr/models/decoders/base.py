"""Decoder contracts: the AED / LLM / transducer extension points.

Two batched decoder shapes are driven from ``oasr.engine.decode``:

* label-synchronous autoregressive (Whisper, speech-LLM): ``BaseDecoder`` with the
  incremental surface ``prefill / step / select / merge`` over a ``KVPool``;
* frame-synchronous (transducer): ``TransducerPredictor`` with an opaque state
  (``init_state / predict / advance / stack_states / unstack_states``) and a ``Joiner``.

``select(state, idx)`` is an index-select: row ``i`` of the result is row
``idx[i]`` of ``state``. Repeated indices are legal, which is what lets beam
search expand a prefilled batch into a B x k grid and reorder hypotheses onto
their parents without a new model method; dropping indices is how finished rows
leave a running batch. ``merge(a, b)`` joins two prefilled states into one batch
(a request joining a running decode), guarded by ``can_merge``. Both work because
K/V is indexed per row in a preallocated pool rather than off a shared
generation offset.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from oasr.layers import attention
from oasr.models.base import ComputeDtypeModule
from oasr.models.decoders.kv_pool import DecoderState, KVPool, PoolExhausted, RowGroups


class BaseDecoder(ComputeDtypeModule, abc.ABC):
    """A label-synchronous autoregressive decoder over a per-row K/V pool, in its declared
    ``compute_dtype`` (the dtype of a new pool unless told).

    Class-level declarations (answered by the decoder, not probed):
        supports_paged_kv: ``prefill`` writes its K/V (and, for an AED, the
            cross-attention K/V of the encoder window) into a preallocated pool.
        supports_step_graphs: a ``step`` can be recorded into a CUDA graph: every
            tensor it reads lives at a process-stable address (the pool) or is a
            small per-step input copied into a static buffer.
    """

    supports_paged_kv: ClassVar[bool] = False
    supports_step_graphs: ClassVar[bool] = False

    @abc.abstractmethod
    def new_pool(
        self,
        max_rows: int,
        max_groups: int = 0,
        *,
        max_len: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> KVPool:
        """Allocate K/V storage for ``max_rows`` hypotheses of up to ``max_len`` tokens
        (default: the decoder context) and ``max_groups`` encoder windows."""

    @abc.abstractmethod
    def prefill(
        self,
        pool: KVPool,
        tokens: torch.Tensor,
        token_lens: torch.Tensor,
        *,
        row0: int = 0,
        group0: int = 0,
        **inputs: Any,
    ) -> tuple[torch.Tensor, DecoderState]:
        """Run the prompts, writing their K/V into rows ``row0..row0+B`` of ``pool``.

        Args:
            tokens: (B, P) right-padded prompt ids.
            token_lens: (B,) prompt lengths.
            inputs: family inputs (the encoder window for an AED, embeddings for an LLM).

        Returns:
            logits at each row's last prompt position (B, V), and the state.
        """

    @abc.abstractmethod
    def step(self, state: DecoderState, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row; returns next-token logits (n_rows, V). Updates ``state``."""

    def step_rows(
        self,
        pool: KVPool,
        row0: int,
        group0: int,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        extent: int,
        groups: RowGroups,
    ) -> torch.Tensor:
        """``step``'s arithmetic at fixed shapes, for a CUDA graph to record (a decoder that
        declares ``supports_step_graphs`` implements it; ``oasr.models.decoders.graphs``).

        Rows ``row0 .. row0 + n`` of ``pool`` each feed ``tokens[i]`` at ``positions[i]``
        (their K/V written there), attending over ``extent`` key positions (those past a
        row's own position are masked); ``groups`` is the rows' layout over the encoder
        windows from ``group0`` (``DecoderState.row_groups``; ignored by decoder-only LMs).
        Every tensor read is the pool, the weights or an argument; nothing is synced to
        the host; the state is not touched.

        Shapes:
            tokens, positions: (n,) -> logits (n, V)
        """
        raise NotImplementedError(f"{type(self).__name__} does not declare supports_step_graphs")

    # -- generic batch surgery over the pool ------------------------------------------

    def select(self, state: DecoderState, idx: Sequence[int] | torch.Tensor) -> DecoderState:
        """Row ``i`` of the result is row ``idx[i]`` of ``state``.

        Rows (and the groups they read) are moved within the pool so the result is
        again contiguous from ``state.row0``; a row already in place is not copied.
        """
        idx_list = [int(i) for i in (idx.tolist() if isinstance(idx, torch.Tensor) else idx)]
        pool = state.pool
        n = len(idx_list)
        if any(i < 0 or i >= state.n_rows for i in idx_list):
            raise IndexError(f"select: index out of range for {state.n_rows} rows: {idx_list}")
        if state.row0 + n > pool.max_rows:
            raise PoolExhausted(f"select needs {n} rows from row {state.row0}; the pool has {pool.max_rows}")
        moves = [(state.row0 + d, state.row0 + s) for d, s in enumerate(idx_list) if d != s]
        if moves:
            dst, src = zip(*moves)
            pool.move_rows(list(dst), list(src), max(state.lengths[i] for i in idx_list))
        # Groups are renumbered by first appearance, keeping their relative order.
        remap: dict[int, int] = {}
        for i in idx_list:
            g = state.row_group[i]
            if g not in remap:
                remap[g] = len(remap)
        gmoves = [(state.group0 + new, state.group0 + old) for old, new in remap.items() if old != new]
        if gmoves:
            gdst, gsrc = zip(*gmoves)
            pool.move_groups(list(gdst), list(gsrc))
        idx_t = torch.tensor(idx_list, device=pool.device, dtype=torch.long)
        return DecoderState(
            pool=pool,
            row0=state.row0,
            group0=state.group0,
            n_groups=len(remap),
            lengths=[state.lengths[i] for i in idx_list],
            lengths_t=state.lengths_t.index_select(0, idx_t),
            row_group=[remap[state.row_group[i]] for i in idx_list],
            extras=self.select_extras(state.extras, idx_t),
        )

    def select_extras(self, extras: dict, idx: torch.Tensor) -> dict:
        """Index family per-row extras (tensors with a leading row axis) with ``idx``."""
        return {k: (v.index_select(0, idx) if isinstance(v, torch.Tensor) else v) for k, v in extras.items()}

    def can_merge(self, a: DecoderState, b: DecoderState) -> bool:
        """Whether ``b`` can join ``a``: same pool, room for its rows and groups, and
        the same hypotheses-per-group (so the joined batch keeps the shared
        cross-attention fast path)."""
        if a.pool is not b.pool:
            return False
        if a.n_rows and b.n_rows and a.group_size != b.group_size:
            return False
        rows_ok = a.row0 + a.n_rows + b.n_rows <= a.pool.max_rows
        groups_ok = a.pool.max_groups == 0 or a.group0 + a.n_groups + b.n_groups <= a.pool.max_groups
        return rows_ok and groups_ok

    def merge(self, a: DecoderState, b: DecoderState) -> DecoderState:
        """Join ``b`` after ``a``; ``b``'s rows are moved next to ``a``'s if they are elsewhere."""
        if not self.can_merge(a, b):
            raise ValueError("merge: the two states cannot be merged (see can_merge)")
        pool = a.pool
        row_at, group_at = a.row0 + a.n_rows, a.group0 + a.n_groups
        if b.row0 != row_at:
            # move_rows gathers before it writes, so b may overlap its destination.
            pool.move_rows(list(range(row_at, row_at + b.n_rows)), list(range(b.row0, b.row0 + b.n_rows)), b.max_length)
        if b.n_groups and b.group0 != group_at:
            pool.move_groups(list(range(group_at, group_at + b.n_groups)), list(range(b.group0, b.group0 + b.n_groups)))
        extras = {}
        for k in set(a.extras) | set(b.extras):
            va, vb = a.extras.get(k), b.extras.get(k)
            extras[k] = torch.cat([va, vb]) if isinstance(va, torch.Tensor) else va
        return DecoderState(
            pool=pool,
            row0=a.row0,
            group0=a.group0,
            n_groups=a.n_groups + b.n_groups,
            lengths=a.lengths + b.lengths,
            lengths_t=torch.cat([a.lengths_t, b.lengths_t]),
            row_group=a.row_group + [g + a.n_groups for g in b.row_group],
            extras=extras,
        )


class RowPoolDecoder(BaseDecoder):
    """A decoder whose pool holds rows only, no cross-attention groups (a decoder-only LM; an
    encoder-decoder that keeps its cross K/V per row in the state's ``extras``: Moonshine).

    A subclass has ``embed_tokens`` and says its pool's shape (``pool_geometry``); it gets
    ``new_pool``, ``select`` / ``merge`` / ``can_merge`` without groups, and the self-attention
    of a step over the pool (``pooled_self_attention``).
    """

    def pool_geometry(self) -> tuple[int, int, int, int]:
        """(layers, K/V heads, head width, context: the default ``max_len``)."""
        raise NotImplementedError

    def new_pool(
        self,
        max_rows: int,
        max_groups: int = 0,
        *,
        max_len: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> KVPool:
        """Self-attention K/V for ``max_rows`` rows of up to ``max_len`` tokens (default: the context)."""
        if max_groups:
            raise ValueError(f"{type(self).__name__} keeps no cross-attention groups (max_groups must be 0)")
        n_layers, n_heads, head_dim, context = self.pool_geometry()
        return KVPool(
            n_layers=n_layers,
            n_heads=n_heads,
            head_dim=head_dim,
            max_rows=max_rows,
            max_len=context if max_len is None else max_len,
            device=device if device is not None else self.embed_tokens.weight.device,
            dtype=dtype if dtype is not None else self.compute_dtype,
        )

    @staticmethod
    def pooled_self_attention(
        pool: KVPool, r0: int, positions: torch.Tensor, extent: int, masked: bool = True, scale: float | None = None
    ):
        """A step's self-attention for rows ``r0 .. r0 + n`` of ``pool``: ``attend(li, q, k, v)``
        writes each row's new K/V at its own position and attends over its keys up to it
        (``masked=False``: every row is at ``extent - 1``, so no mask is needed; ``scale``: the score
        scale, None for ``head_dim ** -0.5``).

        Shapes:
            positions: (n,); q, k, v: (n, H, 1, Dh) -> (n, H, 1, Dh)
        """
        n = positions.shape[0]
        rows = torch.arange(n, device=positions.device)
        key_mask = (torch.arange(extent, device=positions.device)[None, :] <= positions[:, None])[:, None, None, :]
        if not masked:  # the caller knows every row is at ``extent - 1``: SDPA's unmasked path
            key_mask = None

        def attend(li: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            kc, vc = pool.k[li, r0 : r0 + n], pool.v[li, r0 : r0 + n]  # (n, Hkv, S, Dh) views
            kc[rows, :, positions] = k[:, :, 0]
            vc[rows, :, positions] = v[:, :, 0]
            return attention(q, kc[:, :, :extent], vc[:, :, :extent], mask=key_mask, scale=scale)

        return attend

    def select(self, state: DecoderState, idx: Sequence[int] | torch.Tensor) -> DecoderState:
        """Row ``i`` of the result is row ``idx[i]`` of ``state`` (repeats allowed)."""
        out = super().select(state, idx)
        out.n_groups, out.row_group = 0, [0] * out.n_rows
        return out

    def merge(self, a: DecoderState, b: DecoderState) -> DecoderState:
        """Join ``b`` after ``a`` (``b``'s rows are moved next to ``a``'s if elsewhere)."""
        out = super().merge(a, b)
        out.n_groups, out.row_group = 0, [0] * out.n_rows
        return out

    def can_merge(self, a: DecoderState, b: DecoderState) -> bool:
        """Same pool and room for ``b``'s rows after ``a``'s (no groups to match)."""
        return a.pool is b.pool and a.row0 + a.n_rows + b.n_rows <= a.pool.max_rows


# ---------------------------------------------------------------------------
# Transducer extension points (frame-synchronous decoding)


class PredictionNetwork(nn.Module, abc.ABC):
    """The label-side network of a transducer: labels so far -> a prediction vector."""

    @abc.abstractmethod
    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        """(B, U) label ids -> (B, U, D_pred)."""


class Joiner(nn.Module, abc.ABC):
    """Combines an encoder frame and a prediction vector into vocabulary logits."""

    @abc.abstractmethod
    def forward(self, enc: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
        """(..., D_enc), (..., D_pred) -> (..., V) logits."""


class TransducerPredictor(nn.Module, abc.ABC):
    """A predictor with an opaque per-row state, so one greedy loop serves both a
    stateless label-window predictor and a recurrent one.

    Class attribute:
        label_window_state: the state is a window of the last labels (beam search can
            gather-reorder it); False for a recurrent predictor, which refuses beam > 1.
    """

    label_window_state: ClassVar[bool] = True

    @abc.abstractmethod
    def init_state(self, batch_size: int, device: torch.device) -> Any:
        """The state before the first label (not necessarily zeros)."""

    @abc.abstractmethod
    def predict(self, state: Any) -> torch.Tensor:
        """(B, D_pred) prediction vectors for the current states."""

    @abc.abstractmethod
    def advance(self, state: Any, tokens: torch.Tensor, emit: torch.Tensor) -> Any:
        """New state after ``tokens`` (B,) where ``emit`` (B,) is True; unchanged elsewhere."""

    @abc.abstractmethod
    def stack_states(self, states: Sequence[Any]) -> Any:
        """Batch per-stream states into one."""

    @abc.abstractmethod
    def unstack_states(self, state: Any) -> list[Any]:
        """Split a batched state per stream."""


def greedy_advance(
    is_blank: torch.Tensor, symbols: torch.Tensor, max_symbols: int, durations: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """How far each row of a greedy transducer search moves after one joiner call, and its new
    count of symbols emitted on the current frame (one rule for the offline and streaming searches).

    RNN-T: a blank moves one frame; a token stays, unless it is the ``max_symbols``-th on the
    frame (icefall's ``max_sym_per_frame``, NeMo's ``max_symbols_per_step``), which moves on.
    TDT: the predicted duration moves (a blank at duration 0 moves one frame), and the
    ``max_symbols``-th symbol on a frame moves one.

    Shapes:
        is_blank, symbols: (B,); durations: (B,) each row's predicted duration (TDT) or None
        -> advance (B,) long, symbols (B,)
    """
    zeros = torch.zeros_like(symbols)
    if durations is None:
        symbols = torch.where(is_blank, zeros, symbols + 1)
        force = symbols >= max_symbols
        return (is_blank | force).long(), torch.where(is_blank | force, zeros, symbols)
    one = torch.ones_like(symbols)
    advance = torch.where(is_blank & (durations == 0), one, durations)
    symbols = torch.where(advance == 0, symbols + 1, zeros)
    force = symbols >= max_symbols
    return torch.where(force, one, advance), torch.where(force, zeros, symbols)
