"""CUDA-graph replay of a decoder's step over its K/V pool.

A decode step of a small decoder is a few hundred tiny kernels whose launches, not
their arithmetic, set the pace on a GPU. ``StepGraphs`` records a decoder's
``step_rows`` once per shape into a CUDA graph and replays it: one launch per step.

A recorded step reads fixed addresses, so the shape has to be fixed too. The key of a
recording is the batch's place in the pool (``row0``, ``group0``), its rows rounded
up to a bucket (1, 2, 4, 8, then multiples of 8: padding rows feed token 0 at
position 0 into free rows after the batch, and their logits are dropped), its
hypotheses per encoder window (0 for a decoder-only LM), and the attended key extent rounded up to a multiple
of ``extent_step`` (positions past each row's own are masked, as in the eager step).
The token and position inputs are copied into per-pool static buffers before each
replay. Batches the recording cannot express (rows of irregular groups, a pool too
small for the padded rows) take the decoder's eager ``step``.

Without CUDA (or with ``capture=False``) the same bucketed, padded call runs eagerly:
the arithmetic of the graph path, checkable on a CPU.

A new pool (a cohort's pool grows) gets new recordings; a pool's recordings are freed
with it. All recordings share one CUDA memory pool: their outputs stay allocated, and
steps never run concurrently, so their temporaries can share memory.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from oasr.models.decoders.base import BaseDecoder
from oasr.models.decoders.kv_pool import DecoderState, KVPool

__all__ = ["StepGraphs", "bucket_rows", "step_graphs_for"]

log = logging.getLogger(__name__)


def step_graphs_for(decoder: BaseDecoder, enabled: bool | None) -> StepGraphs | None:
    """The ``StepGraphs`` an engine setting asks for, or None for eager steps.

    Args:
        enabled: ``EngineConfig.step_graphs``: None records on CUDA when the decoder
            supports it; True also runs the fixed-shape steps on a CPU (uncaptured);
            False never.

    Raises:
        ValueError: True for a decoder whose step cannot be recorded.
    """
    on_cuda = next(decoder.parameters()).device.type == "cuda"
    if enabled is None:
        enabled = on_cuda and decoder.supports_step_graphs
    if not enabled:
        return None
    if not decoder.supports_step_graphs:
        raise ValueError(f"step_graphs=True: the step of {type(decoder).__name__} cannot be recorded")
    return StepGraphs(decoder, capture=on_cuda)


def bucket_rows(n: int) -> int:
    """Rows rounded up to a recording size: 1, 2, 4, 8, then multiples of 8."""
    if n <= 8:
        return 1 << max(0, (n - 1).bit_length())
    return -(-n // 8) * 8


@dataclass
class _PoolGraphs:
    tokens: torch.Tensor  # (max_rows,) static inputs
    positions: torch.Tensor
    graphs: dict[tuple, tuple[Any, torch.Tensor]] = field(default_factory=dict)  # key -> (graph, output)


class StepGraphs:
    """Runs ``decoder.step`` through recorded fixed-shape steps where it can.

    Args:
        decoder: a decoder that declares ``supports_step_graphs`` (it has ``step_rows``).
        capture: record CUDA graphs (default: when the decoder's weights are on CUDA);
            False runs the fixed-shape steps eagerly.
        extent_step: key positions are attended in multiples of this.
        max_graphs: recordings kept per pool; shapes past it run eagerly.

    Raises:
        ValueError: the decoder's step cannot be recorded.
    """

    def __init__(
        self, decoder: BaseDecoder, *, capture: bool | None = None, extent_step: int = 64, max_graphs: int = 128
    ) -> None:
        if not decoder.supports_step_graphs:
            raise ValueError(f"{type(decoder).__name__} does not declare supports_step_graphs")
        device = next(decoder.parameters()).device
        self.decoder = decoder
        self.capture = device.type == "cuda" if capture is None else bool(capture)
        if self.capture and device.type != "cuda":
            raise ValueError(f"CUDA-graph capture needs the decoder on a CUDA device, not {device}")
        self.extent_step = int(extent_step)
        self.max_graphs = int(max_graphs)
        self._pools: weakref.WeakKeyDictionary[KVPool, _PoolGraphs] = weakref.WeakKeyDictionary()
        self._memory = torch.cuda.graph_pool_handle() if self.capture else None
        self.counters = {"replays": 0, "recorded": 0, "eager": 0}

    def stats(self) -> dict[str, int]:
        """The counters, named for an engine's stats (``step_graph_replays``, ...)."""
        return {f"step_graph_{k}": v for k, v in self.counters.items()}

    def step(self, state: DecoderState, tokens: torch.Tensor) -> torch.Tensor:
        """``decoder.step(state, tokens)``, replayed from a recording when the batch allows.

        Shapes:
            tokens: (n,) -> logits (n, V)
        """
        n = state.n_rows
        pool = state.pool
        k = state.group_size if pool.max_groups else 0  # 0: a decoder-only LM, no encoder windows
        if n == 0 or k is None or state.max_length + 1 > pool.max_len:
            self.counters["eager"] += 1
            return self.decoder.step(state, tokens)  # nothing to record, or the eager step's errors
        rows = bucket_rows(n)
        if state.row0 + rows > pool.max_rows or (k and (rows % k or state.group0 + rows // k > pool.max_groups)):
            rows = n  # the padding does not fit: record this exact size
        extent = min(pool.max_len, -(-(state.max_length + 1) // self.extent_step) * self.extent_step)
        entry = self._entry(pool)
        entry.tokens[:n].copy_(tokens)
        entry.positions[:n].copy_(state.lengths_t)
        if rows > n:
            entry.tokens[n:rows].zero_()
            entry.positions[n:rows].zero_()
        key = (state.row0, state.group0, rows, k, extent)
        args = (pool, state.row0, state.group0, entry.tokens[:rows], entry.positions[:rows], extent, k)
        recorded = entry.graphs.get(key) if self.capture else None
        if recorded is None and self.capture and len(entry.graphs) < self.max_graphs:
            recorded = self._record(args)
            if recorded is not None:
                entry.graphs[key] = recorded
        if recorded is None:
            out = self.decoder.step_rows(*args)
            self.counters["eager"] += 1
        else:
            graph, out = recorded
            graph.replay()
            self.counters["replays"] += 1
        state.advance()
        return out[:n]

    def _entry(self, pool: KVPool) -> _PoolGraphs:
        entry = self._pools.get(pool)
        if entry is None:
            zeros = torch.zeros(pool.max_rows, dtype=torch.long, device=pool.device)
            entry = self._pools[pool] = _PoolGraphs(tokens=zeros, positions=zeros.clone())
        return entry

    def _record(self, args: tuple) -> tuple[Any, torch.Tensor] | None:
        """Record ``step_rows(*args)``. The warm-up runs execute the step for real; they
        write the same K/V the replay that follows writes, so running it twice is harmless.
        A step that cannot be recorded (an op CUDA graphs refuse) turns recording off:
        the steps run eagerly from then on, with a warning."""
        try:
            return self._capture(args)
        except RuntimeError as e:
            log.warning("decoder step could not be recorded into a CUDA graph (%s); stepping eagerly", e)
            self.capture = False
            return None

    def _capture(self, args: tuple) -> tuple[Any, torch.Tensor]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # lazy initialisation (cuBLAS handles, kernels) off the recording
                self.decoder.step_rows(*args)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._memory):
            out = self.decoder.step_rows(*args)
        self.counters["recorded"] += 1
        return graph, out
