"""Encoder runtimes: the per-stream encoder caches of many live streams, advanced together.

The runtime is chosen from the model's contract (``encoder.streaming_kind``), never from
its class:

- ``PagedRuntime`` ("paged"): attention K/V of every stream in one pool of fixed-size
  blocks (``CacheSpec`` geometry), a block table per stream, convolution tails and the
  encoder's declared ``StreamStateSpec`` tensors in per-stream slots; the model's
  ``encode_chunk_paged`` reads and writes them through a ``PagedCacheView``.
- ``SlotRuntime`` ("slot"): every per-stream tensor is a declared ``StreamStateSpec``; the
  runtime keeps one buffer per spec with a slot axis, gathers the batch's slots, runs the
  model's stateful forward and scatters the new states back (a fixed set of buffers: the
  step can be captured in a CUDA graph).
- ``StatefulRuntime`` ("stateful", and the parity oracle of the slot runtime): each stream
  keeps its own list of state tensors (``get_streaming_init_states``), stacked into a batch
  for the forward and unstacked after it.

Every runtime: ``admit`` a stream (``EngineOverloaded`` when full), ``encode`` one chunk of
a batch of admitted streams, ``reset`` a stream's encoder cache at an endpoint (persistent
states kept), ``release`` it.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass

import torch

from oasr.engine.decode.base import EngineOverloaded
from oasr.models.base import BaseAsrModel, PagedCacheView, StreamingGeometry, StreamStateSpec

__all__ = [
    "ChunkPlan",
    "EncoderRuntime",
    "PagedRuntime",
    "SlotRuntime",
    "StatefulRuntime",
    "build_runtime",
]


@dataclass(frozen=True)
class ChunkPlan:
    """How a stream's features are cut into encoder chunks.

    Attributes:
        chunk_size: the chunk in the encoder's streaming unit (``streaming_geometry``'s argument).
        window_frames: feature frames one chunk reads.
        stride_frames: feature frames the window advances per chunk.
        pad_value: feature value that fills a short final window.
        tail_frames: ``pad_value`` frames appended to a stream when it finishes.
        head_frames: ``pad_value`` frames put before a stream's first frame (and after a reset).
        min_final_frames: the fewest feature frames a final short window may hold (fewer are dropped).
        output_frame_s: seconds per encoder output frame.
    """

    chunk_size: int
    window_frames: int
    stride_frames: int
    pad_value: float
    tail_frames: int
    head_frames: int
    min_final_frames: int
    output_frame_s: float


class EncoderRuntime(abc.ABC):
    """The encoder caches of up to ``max_streams`` streams.

    Args:
        model: the loaded model (its ``encoder`` declares the streaming contract).
        chunk_ms: chunk in ms of audio (None: the encoder's default).
        left_chunks: chunks of attention history (None: all; refused by encoders whose
            history their weights fix).
        max_streams: concurrent streams.
        feature_shift_s: seconds per feature frame.
    """

    kind: str = ""

    def __init__(
        self,
        model: BaseAsrModel,
        *,
        chunk_ms: float | None,
        left_chunks: int | None,
        max_streams: int,
        feature_shift_s: float,
    ) -> None:
        self.model = model
        self.encoder = model.encoder
        if max_streams < 1:
            raise ValueError(f"max_streams must be >= 1, got {max_streams}")
        if left_chunks is not None and not self.encoder.streaming_left_chunks:
            raise ValueError(
                f"{type(self.encoder).__name__}'s attention history is fixed by the model: left_chunks is not taken"
            )
        if left_chunks is not None and left_chunks < 0:
            raise ValueError(f"left_chunks must be >= 0 (None: all history), got {left_chunks}")
        chunk = self.encoder.streaming_chunk_size(chunk_ms, feature_shift_s)
        geometry: StreamingGeometry = self.encoder.streaming_geometry(chunk)  # refuses what it cannot serve
        sub = self.encoder.subsampling_rate
        self.plan = ChunkPlan(
            chunk_size=chunk,
            window_frames=geometry.window_frames,
            stride_frames=geometry.stride_frames,
            pad_value=float(self.encoder.streaming_pad_value),
            tail_frames=int(self.encoder.streaming_tail_frames),
            head_frames=int(self.encoder.streaming_head_frames),
            min_final_frames=int(self.encoder.streaming_min_final_frames),
            output_frame_s=sub * feature_shift_s,
        )
        self.left_chunks = left_chunks
        self.max_streams = int(max_streams)
        self._free = list(range(self.max_streams - 1, -1, -1))
        self.device = model.device
        self.dtype = model.compute_dtype

    # -- slots ------------------------------------------------------------------------

    @property
    def in_use(self) -> int:
        return self.max_streams - len(self._free)

    def room(self) -> str | None:
        """Why one more stream cannot be admitted now (None: it can)."""
        if not self._free:
            return f"all {self.max_streams} streaming slots are in use"
        return None

    def admit(self, conditioning: dict[str, float] | None = None) -> int:
        """A slot for a new stream, its cache fresh; ``conditioning`` sets its persistent
        states by name (e.g. a prompt id). Raises ``EngineOverloaded`` when none is free."""
        full = self.room()
        if full is not None:
            raise EngineOverloaded(full)
        slot = self._free.pop()
        try:
            self._init_slot(slot, conditioning or {}, keep_persistent=False)
        except BaseException:
            self._free.append(slot)
            raise
        return slot

    def release(self, slot: int) -> None:
        """Free a stream's slot and its cache (its blocks first: a slot is handed out bare)."""
        if slot in self._free:
            raise RuntimeError(f"streaming slot {slot} released twice")
        self._drop_slot(slot)
        self._free.append(slot)

    def reset(self, slot: int) -> None:
        """Rewind a stream's encoder cache (an endpoint): persistent states are kept."""
        self._drop_slot(slot)
        self._init_slot(slot, {}, keep_persistent=True)

    @abc.abstractmethod
    def _init_slot(self, slot: int, conditioning: dict[str, float], keep_persistent: bool) -> None: ...

    def _drop_slot(self, slot: int) -> None:  # noqa: B027 - only the paged runtime holds blocks
        pass

    def memory_bytes(self) -> int:
        """Bytes of cache the runtime holds for all its slots."""
        return 0

    def bytes_in_use(self) -> int:
        """Bytes of cache the open streams take (their blocks, tails and states)."""
        return int(self.memory_bytes() * self.in_use / self.max_streams)

    # -- the step ---------------------------------------------------------------------

    def reserve(self, slots: list[int]) -> list[int]:
        """Make room for one more chunk of each listed stream; the slots that found none
        (the caller fails those streams and encodes the others)."""
        return []

    @abc.abstractmethod
    def encode(
        self, slots: list[int], feats: torch.Tensor, feat_lens: torch.Tensor, final: list[bool]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One chunk of each listed stream.

        Shapes:
            feats: (B, window_frames, F) each row's window, short final windows padded with
            ``plan.pad_value``; feat_lens: (B,) valid frames per row
            -> encoder output (B, T', D), lens (B,)
        """


def _spec_buffer(spec: StreamStateSpec, n: int, device, dtype) -> torch.Tensor:
    shape = list(spec.shape)
    shape.insert(spec.slot_axis, n)
    return torch.full(shape, spec.init_value, dtype=spec.dtype or dtype, device=device)


class _StateBuffers:
    """One buffer per ``StreamStateSpec``, with the slot axis where the spec puts it."""

    def __init__(self, specs: tuple[StreamStateSpec, ...], n: int, device, dtype) -> None:
        self.specs = specs
        self.buffers = {s.name: _spec_buffer(s, n, device, dtype) for s in specs}

    def init(self, slot: int, conditioning: dict[str, float], keep_persistent: bool) -> None:
        unknown = set(conditioning) - {s.name for s in self.specs if s.persistent}
        if unknown:
            raise ValueError(f"no persistent streaming state named {sorted(unknown)}")
        for s in self.specs:
            buf = self.buffers[s.name].select(s.slot_axis, slot)
            if s.persistent and keep_persistent:
                continue
            buf.fill_(conditioning.get(s.name, s.init_value))

    def gather(self, index: torch.Tensor) -> list[torch.Tensor]:
        return [self.buffers[s.name].index_select(s.slot_axis, index) for s in self.specs]

    def scatter(self, index: torch.Tensor, values: list[torch.Tensor]) -> None:
        for s, v in zip(self.specs, values, strict=True):
            self.buffers[s.name].index_copy_(s.slot_axis, index, v.to(self.buffers[s.name].dtype))

    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers.values())


class PagedRuntime(EncoderRuntime):
    """Paged K/V pool + per-slot convolution tails and declared states.

    Args (beyond ``EncoderRuntime``'s):
        block_size: encoder frames per pool block.
        max_stream_frames: the longest stream in encoder frames (bounds a block table when
            the history is unbounded).
        pool_frames: K/V frames the pool holds across streams (None: room for every slot's
            whole attention window, within ``cache_mb``).
        cache_mb: the most memory the K/V pool takes (None: no bound). With unbounded history
            a stream takes blocks as it grows; one that finds none left fails alone
            (``reserve``), and admission refuses while the pool cannot hold a new stream's
            first window.
    """

    kind = "paged"

    def __init__(
        self,
        model: BaseAsrModel,
        *,
        block_size: int = 16,
        max_stream_frames: int = 90_000,
        pool_frames: int | None = None,
        cache_mb: float | None = 1024.0,
        **kw,
    ) -> None:
        super().__init__(model, **kw)
        spec = model.cache_spec
        if spec is None:
            raise ValueError(f"{type(model).__name__} declares no streaming cache")
        self.spec = spec
        self.block_size = int(block_size)
        out_chunk = self._output_chunk_frames()
        if spec.fixed_attention_window is not None:
            self.history = int(spec.fixed_attention_window)
        elif self.left_chunks is not None:
            self.history = self.left_chunks * out_chunk
        else:
            self.history = None
        window = (self.history + out_chunk) if self.history is not None else max_stream_frames
        self.blocks_per_stream = math.ceil(max_stream_frames / self.block_size) + 1
        need = math.ceil(window / self.block_size) + 1  # blocks one stream holds at most
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        block_bytes = 2 * spec.n_layers * self.block_size * spec.n_kv_heads * spec.head_dim * itemsize
        if pool_frames is None:
            pool_frames = self.max_streams * need * self.block_size
        n_blocks = math.ceil(pool_frames / self.block_size)
        if cache_mb is not None:
            n_blocks = min(n_blocks, int(cache_mb * 2**20 // block_bytes))
        # Always room for one stream's first window (its whole window when the history is
        # bounded): a budget below it could serve nobody.
        floor = need if self.history is not None else self._blocks_for(out_chunk)
        self.n_blocks = max(n_blocks, floor, 1)
        self.block_bytes = block_bytes
        self.window_blocks = need
        shape = (spec.n_layers, self.n_blocks, self.block_size, spec.n_kv_heads, spec.head_dim)
        # Left unwritten (``read_paged`` masks every frame a stream has not written): the pages of a
        # pool sized for hours of audio are committed as streams fill its blocks, not all at once.
        self.k = torch.empty(shape, dtype=self.dtype, device=self.device)
        self.v = torch.empty(shape, dtype=self.dtype, device=self.device)
        self.conv = (
            torch.zeros(spec.n_layers, self.max_streams, *spec.conv_cache, dtype=self.dtype, device=self.device)
            if spec.conv_cache is not None
            else None
        )
        self.states = _StateBuffers(spec.stream_states, self.max_streams, self.device, self.dtype)
        self.tables = torch.full((self.max_streams, self.blocks_per_stream), -1, dtype=torch.int32)
        self.cache_lens = torch.zeros(self.max_streams, dtype=torch.long)
        self._free_blocks = list(range(self.n_blocks - 1, -1, -1))
        self._held: list[list[int]] = [[] for _ in range(self.max_streams)]

    def _output_chunk_frames(self) -> int:
        return self.plan.stride_frames // self.encoder.subsampling_rate

    def room(self) -> str | None:
        full = super().room()
        if full is not None:
            return full
        first = self._blocks_for(self._output_chunk_frames())
        promised = sum(self._promise(s) for s in range(self.max_streams) if s not in self._free)
        if self.n_blocks - promised < (self.window_blocks if self.history is not None else first):
            return (
                f"the streaming K/V pool is full ({self.n_blocks} blocks of {self.block_size} frames, "
                f"{self.in_use} streams)"
            )
        return None

    def _blocks_for(self, frames: int) -> int:
        return math.ceil(frames / self.block_size) + 1

    def _promise(self, slot: int) -> int:
        """Blocks a live stream holds or, with a bounded window, will hold."""
        return self.window_blocks if self.history is not None else len(self._held[slot])

    def _init_slot(self, slot: int, conditioning: dict[str, float], keep_persistent: bool) -> None:
        self.cache_lens[slot] = 0
        if self.conv is not None:
            self.conv[:, slot].zero_()
        self.states.init(slot, conditioning, keep_persistent)

    def _drop_slot(self, slot: int) -> None:
        row = self.tables[slot]
        for b in self._held[slot]:
            self._free_blocks.append(b)
        self._held[slot] = []
        row.fill_(-1)

    def memory_bytes(self) -> int:
        n = self.k.numel() * self.k.element_size() * 2 + self.states.nbytes()
        return n + (self.conv.numel() * self.conv.element_size() if self.conv is not None else 0)

    def bytes_in_use(self) -> int:
        blocks = sum(len(h) for h in self._held)
        per_slot = (self.memory_bytes() - self.k.numel() * self.k.element_size() * 2) / self.max_streams
        return int(blocks * self.block_bytes + per_slot * self.in_use)

    def _reserve(self, slot: int, upto_frames: int) -> None:
        """Blocks for frames up to ``upto_frames`` of a stream, and frees those behind its window."""
        row = self.tables[slot]
        last = (upto_frames - 1) // self.block_size
        if last >= self.blocks_per_stream:
            raise OverflowError(f"stream longer than {self.blocks_per_stream * self.block_size} encoder frames")
        first_needed = 0
        if self.history is not None:
            first_needed = max(0, (int(self.cache_lens[slot]) - self.history) // self.block_size)
        for j in range(first_needed):
            b = int(row[j])
            if b >= 0:
                row[j] = -1
                self._held[slot].remove(b)
                self._free_blocks.append(b)
        for j in range(first_needed, last + 1):
            if int(row[j]) < 0:
                if not self._free_blocks:
                    raise EngineOverloaded("the streaming K/V pool ran out of blocks")
                b = self._free_blocks.pop()
                row[j] = b
                self._held[slot].append(b)

    def reserve(self, slots: list[int]) -> list[int]:
        out_chunk = self._output_chunk_frames()
        failed = []
        for s in slots:
            try:
                self._reserve(s, int(self.cache_lens[s]) + out_chunk)
            except (EngineOverloaded, OverflowError):
                failed.append(s)
        return failed

    def encode(self, slots, feats, feat_lens, final):
        index = torch.tensor(slots, dtype=torch.long)
        dev = self.device
        view = PagedCacheView(
            k=self.k,
            v=self.v,
            block_tables=self.tables.index_select(0, index).to(dev),
            cache_lens=self.cache_lens.index_select(0, index).to(dev),
            conv=self.conv,
            slots=index.to(dev),
            states=self.states.buffers,
            block_size=self.block_size,
            history_frames=self.history,
            final=torch.tensor(final, dtype=torch.bool, device=dev),
        )
        out, lens = self.model.encode_chunk_paged(feats.to(device=dev, dtype=self.dtype), feat_lens.to(dev), view)
        self.cache_lens.index_add_(0, index, lens.to("cpu", torch.long))
        return out, lens


class SlotRuntime(EncoderRuntime):
    """Every per-stream tensor a declared ``StreamStateSpec``, one buffer each."""

    kind = "slot"

    def __init__(self, model: BaseAsrModel, **kw) -> None:
        super().__init__(model, **kw)
        specs = self.encoder.streaming_state_specs
        if not specs:
            raise ValueError(
                f"{type(self.encoder).__name__} declares streaming_kind='slot' but no streaming_state_specs"
            )
        self.states = _StateBuffers(specs, self.max_streams, self.device, self.dtype)

    def _init_slot(self, slot, conditioning, keep_persistent):
        self.states.init(slot, conditioning, keep_persistent)

    def memory_bytes(self) -> int:
        return self.states.nbytes()

    def encode(self, slots, feats, feat_lens, final):
        index = torch.tensor(slots, dtype=torch.long, device=self.device)
        states = self.states.gather(index)
        out, lens, new = self.model.encode_chunk(
            feats.to(device=self.device, dtype=self.dtype), feat_lens.to(self.device), states
        )
        self.states.scatter(index, list(new))
        return out, lens


class StatefulRuntime(EncoderRuntime):
    """Per-stream state lists, stacked for each forward (the list API)."""

    kind = "stateful"

    def __init__(self, model: BaseAsrModel, **kw) -> None:
        super().__init__(model, **kw)
        self._states: dict[int, list[torch.Tensor]] = {}

    def _fresh(self) -> list[torch.Tensor]:
        return self.encoder.unstack_streaming_states(self.encoder.get_streaming_init_states(1, self.device))[0]

    def _init_slot(self, slot, conditioning, keep_persistent):
        if conditioning:
            raise ValueError("the stateful streaming runtime keeps no persistent per-stream states")
        self._states[slot] = self._fresh()

    def _drop_slot(self, slot):
        self._states.pop(slot, None)

    def memory_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for st in self._states.values() for t in st)

    def bytes_in_use(self) -> int:
        return self.memory_bytes()  # only open streams hold states

    def encode(self, slots, feats, feat_lens, final):
        batch = self.encoder.stack_streaming_states([self._states[s] for s in slots])
        # An encoder that flushes its look-ahead at a stream's end is told which windows are last.
        told = {"final": list(final)} if getattr(self.encoder, "streaming_needs_final", False) else {}
        out, lens, new = self.model.encode_chunk(
            feats.to(device=self.device, dtype=self.dtype), feat_lens.to(self.device), batch, **told
        )
        for s, st in zip(slots, self.encoder.unstack_streaming_states(new), strict=True):
            self._states[s] = st
        return out, lens


_RUNTIMES: dict[str, type[EncoderRuntime]] = {
    "paged": PagedRuntime,
    "slot": SlotRuntime,
    "stateful": StatefulRuntime,
}


def build_runtime(model: BaseAsrModel, kind: str | None = None, **kw) -> EncoderRuntime:
    """The runtime the model's contract calls for (``kind`` forces "stateful" over "slot",
    the parity oracle). Raises ``StreamingNotSupported``-style ``ValueError`` for an offline model."""
    declared = model.encoder.streaming_kind
    if declared == "none":
        raise ValueError(
            f"{type(model).__name__} cannot stream: its encoder declares streaming_kind='none' "
            f"(an offline-only checkpoint); transcribe it offline instead"
        )
    kind = kind or declared
    if kind != declared and not (kind == "stateful" and declared == "slot"):
        raise ValueError(f"{type(model).__name__} streams as {declared!r}, not {kind!r}")
    if kind not in _RUNTIMES:
        raise ValueError(f"unknown streaming kind {kind!r}; known: {sorted(_RUNTIMES)}")
    cls = _RUNTIMES[kind]
    if cls is not PagedRuntime:
        kw = {k: v for k, v in kw.items() if k not in ("block_size", "max_stream_frames", "pool_frames", "cache_mb")}
    return cls(model, **kw)
