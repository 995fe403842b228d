"""The scheduler of the autoregressive decoders, written once: continuous batching of decode
tasks over a per-row K/V pool, used by Whisper's ``aed`` strategy and the speech-LLMs' ``llm``.

A ``Cohort`` is one running batch of a decoder: tasks of ``k`` rows each (1 for greedy Whisper
and for an LLM request, ``beam_size`` for beam search, ``best_of`` for sampling), so that every
task of a cohort has the same rows per encoder window and the batch keeps the pool's shared
cross-attention fast path. Between two steps a strategy drives it as:

1. ``take``: the waiting tasks that fit (tasks of requests that left are skipped);
2. grow the pool if the newcomers need it (``reserve_groups``: more windows, doubling;
   ``reserve_length``: longer rows, in steps), taking the running rows along;
3. prefill the newcomers with the strategy's own prompt and inputs into the rows after the
   running ones (``next_row0`` / ``next_group0``), choose their first tokens, and ``admit``
   those that continue;
4. ``step``: every running row feeds its next token (through ``StepGraphs`` when enabled:
   its fixed-shape / CUDA-graph step) -> one (rows, V) logits for the whole batch;
5. ``select_rows``: the strategy says, per task, which of its rows continue (their parents,
   for beams) with which next tokens, or that the task finished; ``keep`` then compacts the
   batch (a finished task's hole is filled by the last survivor, so few rows move;
   ``compaction_order``); a selection that keeps every row in place touches nothing;
6. ``discard``: an aborted request's tasks leave at once; ``release`` gives the pool back.

What a task is, how its prompt is built and how its tokens are chosen stay with the strategy
(Whisper's windows, prompts, timestamps and fallback in ``aed/``; the chat prompt, streaming
and output parsing of a speech-LLM in ``llm.py``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import torch

from oasr.engine.decode.requests import DecodeCounters
from oasr.models.decoders import DecoderState, KVPool
from oasr.models.decoders.base import BaseDecoder

T = TypeVar("T")

TaskUpdate = Callable[[T, int, int], "tuple[list[int], list[int]] | None"]
"""``update(task, lo, hi)``: the task owns rows ``lo:hi`` of the step's logits; returns its
continuing rows as (parents within ``lo:hi``, their next input tokens), or None when the task
finished (or was dropped)."""


class Stepper(Protocol):
    """What ``Cohort.step`` calls: the decoder itself or its ``StepGraphs``."""

    def step(self, state: DecoderState, tokens: torch.Tensor) -> torch.Tensor: ...


@dataclass
class AutoregressiveCounters(DecodeCounters):
    """``DecodeCounters`` plus the scheduler's: prefill calls, and pool growths that moved running rows."""

    prefills: int = 0
    pool_grows: int = 0


def compaction_order(alive_positions: list[int], n_before: int) -> list[int]:
    """Order of the surviving tasks that moves as few as possible: each hole left by a
    finished task is filled by the last survivor (swap-remove).

    Args:
        alive_positions: old positions of the survivors, ascending.
        n_before: tasks before the step.

    Returns:
        indices into ``alive_positions`` in their new order.
    """
    m = len(alive_positions)
    slot_of = {p: i for i, p in enumerate(alive_positions)}
    order: list[int] = []
    tail = [i for i, p in enumerate(alive_positions) if p >= m]
    for pos in range(m):
        if pos in slot_of:
            order.append(slot_of[pos])
        else:
            order.append(tail.pop())
    return order


def select_rows(
    tasks: Sequence[T], rows_per_task: Sequence[int], update: TaskUpdate, *, compact: bool = True
) -> tuple[list[int], list[int], list[T]]:
    """One selection over a batch whose rows are ``tasks`` in order, ``rows_per_task`` each.

    Args:
        update: see ``TaskUpdate``; called once per task, in order.
        compact: order the survivors by ``compaction_order`` (a running batch); False keeps
            their order (a fresh prefill, whose rows are new anyway).

    Returns:
        the rows to keep (for ``BaseDecoder.select``), their next input tokens, and the
        tasks still running, in their new order.
    """
    continuing: list[tuple[int, list[int], list[int]]] = []  # (task index, parent rows, next tokens)
    lo = 0
    for i, (task, n) in enumerate(zip(tasks, rows_per_task)):
        got = update(task, lo, lo + n)
        if got is not None:
            parents, nxt = got
            continuing.append((i, [lo + p for p in parents], nxt))
        lo += n
    order = compaction_order([c[0] for c in continuing], len(tasks)) if compact else range(len(continuing))
    idx: list[int] = []
    next_tokens: list[int] = []
    alive: list[T] = []
    for j in order:
        ti, parents, nxt = continuing[j]
        idx.extend(parents)
        next_tokens.extend(nxt)
        alive.append(tasks[ti])
    return idx, next_tokens, alive


def _in_place(idx: Sequence[int], n_rows: int) -> bool:
    return len(idx) == n_rows and all(i == j for j, i in enumerate(idx))


class Cohort(Generic[T]):
    """A running batch of one decoder over one K/V pool (see the module).

    Attributes:
        k: rows per task once running (the pool's rows per group).
        pool: the K/V pool (None until the first ``reserve_length`` or after ``release``).
        state: the running rows' decoder state (None before the first join).
        tasks: the running tasks, in row order (``k`` rows each).
        next_tokens: the input token of each running row at the next ``step``.
        waiting: tasks queued to join.
    """

    def __init__(self, decoder: BaseDecoder, device: torch.device, *, k: int = 1, pool: KVPool | None = None) -> None:
        self.decoder = decoder
        self.device = device
        self.k = k
        self.pool = pool
        self.state: DecoderState | None = None
        self.tasks: list[T] = []
        self.next_tokens: list[int] = []
        self.waiting: deque[T] = deque()

    @property
    def n_rows(self) -> int:
        return self.state.n_rows if self.state is not None else 0

    @property
    def n_groups(self) -> int:
        return self.state.n_groups if self.state is not None else 0

    @property
    def next_row0(self) -> int:
        """The pool row a prefill after the running rows starts at."""
        return self.state.row0 + self.state.n_rows if self.state is not None else 0

    @property
    def next_group0(self) -> int:
        return self.state.group0 + self.state.n_groups if self.state is not None else 0

    # -- joining -------------------------------------------------------------------------

    def take(self, n: int, dropped: Callable[[T], bool]) -> list[T]:
        """Up to ``n`` waiting tasks, oldest first, skipping (and forgetting) dropped ones."""
        while self.waiting and dropped(self.waiting[0]):
            self.waiting.popleft()
        tasks: list[T] = []
        while self.waiting and len(tasks) < n:
            task = self.waiting.popleft()
            if not dropped(task):
                tasks.append(task)
        return tasks

    def _move_to(self, pool: KVPool) -> bool:
        """Make ``pool`` the cohort's, copying the running rows (and their groups) into it;
        True when there were rows to copy."""
        state, moved = self.state, False
        if state is not None and state.n_rows and self.pool is not None:
            pool.copy_from(self.pool, state.row0 + state.n_rows, state.group0 + state.n_groups, state.max_length)
            moved = True
        if state is not None:
            state.pool = pool
        self.pool = pool
        return moved

    def reserve_groups(self, groups: int, max_groups: int) -> bool:
        """Grow the pool (between steps) so it holds ``groups`` groups of ``k`` rows: at least
        doubling, at most ``max_groups``; True when running rows moved to the larger pool."""
        assert self.pool is not None
        if groups <= self.pool.max_groups:
            return False
        cap = min(max_groups, max(groups, 2 * self.pool.max_groups))
        return self._move_to(self.decoder.new_pool(cap * self.k, cap))

    def reserve_length(
        self, need_len: int, *, rows: int, len_step: int, max_len: int, dtype: torch.dtype | None = None
    ) -> bool:
        """A pool of ``rows`` rows holding at least ``need_len`` tokens each, grown in steps of
        ``len_step`` up to ``max_len``; True when running rows moved to a larger pool."""
        if self.pool is not None and self.pool.max_len >= need_len:
            return False
        new_len = min(max(need_len, math.ceil(need_len / len_step) * len_step), max_len)
        pool = self.decoder.new_pool(rows, max_len=new_len, device=self.device, dtype=dtype)
        return self._move_to(pool)

    def admit(self, new: DecoderState, idx: list[int], next_tokens: list[int], tasks: list[T]) -> int:
        """Merge rows ``idx`` of a prefill's state ``new`` (``tasks``, fed ``next_tokens``
        next) after the running rows; returns how many tasks joined a batch already running."""
        if not tasks:
            return 0
        if not _in_place(idx, new.n_rows):
            new = self.decoder.select(new, idx)
        if self.state is None or self.state.n_rows == 0:
            self.state, self.tasks, self.next_tokens = new, list(tasks), list(next_tokens)
            return 0
        self.state = self.decoder.merge(self.state, new)
        self.tasks = self.tasks + list(tasks)
        self.next_tokens = self.next_tokens + list(next_tokens)
        return len(tasks)

    # -- stepping ------------------------------------------------------------------------

    def step(self, stepper: Stepper) -> torch.Tensor:
        """Every running row feeds its next token. -> logits (n_rows, V)"""
        return stepper.step(self.state, torch.tensor(self.next_tokens, device=self.device))

    def keep(self, idx: list[int], next_tokens: list[int], tasks: list[T]) -> None:
        """The running batch becomes rows ``idx`` (``select_rows``' answer)."""
        if self.state is not None and not _in_place(idx, self.state.n_rows):
            self.state = self.decoder.select(self.state, idx)
        self.tasks, self.next_tokens = tasks, next_tokens

    # -- leaving -------------------------------------------------------------------------

    def discard(self, dropped: Callable[[T], bool]) -> None:
        """Drop the tasks ``dropped`` says, waiting or running (their rows leave now; call
        under inference mode, where the pool was written)."""
        if any(dropped(t) for t in self.waiting):
            self.waiting = deque(t for t in self.waiting if not dropped(t))
        if self.state is None or not any(dropped(t) for t in self.tasks):
            return
        tokens = self.next_tokens

        def update(task: T, lo: int, hi: int) -> tuple[list[int], list[int]] | None:
            return None if dropped(task) else (list(range(hi - lo)), tokens[lo:hi])

        self.keep(*select_rows(self.tasks, [self.k] * len(self.tasks), update))

    def release(self) -> None:
        """Give the pool back (nothing runs or waits)."""
        self.pool, self.state, self.tasks, self.next_tokens = None, None, [], []


__all__ = ["AutoregressiveCounters", "Cohort", "Stepper", "TaskUpdate", "compaction_order", "select_rows"]
