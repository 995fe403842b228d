"""The engine-facing model contract.

The engine touches a model only through the members defined here. A family
subclasses ``BaseAsrModel`` / ``BaseEncoder``, declares what its weights can do
(``capabilities``, ``streaming_kind``, ``cache_spec``), and registers itself; the
engine never imports a family package or branches on a model class.

Optional members have "nothing declared" defaults. Members that only some
families can serve (paged streaming, sequence packing, a fused CTC head) are
declared here with a self-explaining refusal, marked with ``@unimplemented`` so
``oasr.models.interfaces.require_capability`` can tell, without calling them,
that a model does not provide them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

import torch
from torch import nn

from oasr.layers.ctc import GEMM_ALIGNMENT, PAD_LOGIT, align_out_features, pad_output_projection  # noqa: F401
from oasr.models.configs import ModelConfig
from oasr.specs import DecodeType, DecodingSpec, FeatureSpec, TokenizerSpec  # noqa: F401 (the contract's names)

StreamingKind = Literal["paged", "slot", "stateful", "none"]
STREAMING_KINDS: tuple[str, ...] = ("paged", "slot", "stateful", "none")


class StreamingNotSupported(NotImplementedError):
    """Raised by the streaming members of a model that cannot stream."""


class LoadError(RuntimeError):
    """A checkpoint could not be loaded into a model (missing or mis-shaped tensors)."""


# ---------------------------------------------------------------------------
# "Not implemented here" marker


_F = TypeVar("_F", bound=Callable[..., Any])


def unimplemented(fn: _F) -> _F:
    """Mark a base-class member as a refusal: subclasses that serve it override it.

    ``require_capability`` treats a member still bound to a marked function as
    missing, so a model that does not override it fails at engine construction.
    """
    fn.__oasr_unimplemented__ = True  # type: ignore[attr-defined]
    return fn


class Undeclared:
    """A member each subclass declares as a plain attribute (on its class, or set in its
    ``__init__``, which an instance attribute overrides): read undeclared, it raises
    ``NotImplementedError`` naming the member, and ``require_capability`` counts it missing."""

    __oasr_unimplemented__ = True

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        raise NotImplementedError(f"{type(obj).__name__} must declare {self.name}")


def is_unimplemented(member: Any) -> bool:
    """True when ``member`` is a method (or property getter) still marked ``@unimplemented``."""
    fn = getattr(member, "__func__", member)
    if isinstance(fn, property):
        fn = fn.fget
    return bool(getattr(fn, "__oasr_unimplemented__", False))


# ---------------------------------------------------------------------------
# Streaming / cache declarations


@dataclass(frozen=True)
class StreamStateSpec:
    """One extra fixed-extent per-stream tensor an encoder keeps between chunks.

    Attributes:
        name: the state's name (unique within the encoder).
        shape: the per-stream shape, without the slot axis.
        dtype: storage dtype; ``None`` means the model's compute dtype.
        slot_axis: where the engine inserts the slot (stream) axis.
        init_value: value a fresh stream starts from.
        persistent: kept across an endpoint reset (it describes the request, not the audio).
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype | None = None
    slot_axis: int = 0
    init_value: float = 0.0
    persistent: bool = False


@dataclass(frozen=True)
class CacheSpec:
    """What the streaming cache of an encoder holds (``None`` for offline-only models).

    Attributes:
        n_layers: attention layers with a K/V cache.
        n_kv_heads, head_dim: K/V geometry per layer.
        conv_cache: (channels, frames) of the per-layer convolution tail, if any.
        stream_states: extra per-stream tensors (``BaseEncoder.streaming_state_specs``).
        fixed_attention_window: a trained attention span that pre-fills the K/V window.
    """

    n_layers: int
    n_kv_heads: int
    head_dim: int
    conv_cache: tuple[int, int] | None = None
    stream_states: tuple[StreamStateSpec, ...] = ()
    fixed_attention_window: int | None = None


StreamingStates = list[torch.Tensor]
"""The stateful streaming form's per-batch state: a flat list of tensors whose layout the
encoder owns (icefall's ``get_init_states`` / ``streaming_forward`` convention)."""


@dataclass
class PagedCacheView:
    """What one paged streaming chunk reads and writes, for a batch of streams.

    The encoder reads each row's history (frames ``[cache_lens - history, cache_lens)`` of
    its stream; ``oasr.layers.paged`` does the indexing) and writes the chunk's own K/V at
    frames ``[cache_lens, cache_lens + new frames)``; the runtime allocates the blocks those
    frames land in before the call and advances ``cache_lens`` after it.

    Attributes:
        k, v: the K/V pool, (n_layers, n_blocks, block_size, n_kv_heads, head_dim).
        block_tables: (B, max_blocks) the pool blocks of each stream, in order (-1: none).
        cache_lens: (B,) encoder frames already cached per stream.
        conv: per-layer convolution tails, (n_layers, n_slots, channels, frames), or None.
        slots: (B,) each stream's slot in ``conv`` and in the stream-state buffers.
        states: the ``StreamStateSpec`` buffers by name, each with its slot axis.
        block_size: frames per pool block.
        history_frames: the most cached frames a chunk attends to (None: all of them; the
            engine's left chunks times the chunk, or the model's fixed window).
        final: (B,) bool, rows whose chunk is the last of their stream (a short one).
    """

    k: torch.Tensor
    v: torch.Tensor
    block_tables: torch.Tensor
    cache_lens: torch.Tensor
    conv: torch.Tensor | None
    slots: torch.Tensor
    states: dict[str, torch.Tensor] = field(default_factory=dict)
    block_size: int = 16
    history_frames: int | None = None
    final: torch.Tensor | None = None


@dataclass(frozen=True)
class StreamingGeometry:
    """Feature frames a streaming encoder consumes per chunk.

    Attributes:
        window_frames: feature frames the encoder reads for one chunk of output.
        stride_frames: feature frames the window advances per chunk.
    """

    window_frames: int
    stride_frames: int


# ---------------------------------------------------------------------------
# Load accounting


@dataclass(frozen=True)
class LoadReport:
    """Which checkpoint tensors went where.

    Attributes:
        mapped: model tensors that received a checkpoint tensor.
        dropped: checkpoint tensors the model did not use (unexpected ones included).
        missing: model tensors that received nothing.
    """

    mapped: frozenset[str]
    dropped: frozenset[str]
    missing: frozenset[str]

    @classmethod
    def build(
        cls,
        model_keys: Iterable[str],
        mapped: Iterable[str],
        dropped: Iterable[str] = (),
        unexpected: Iterable[str] = (),
    ) -> LoadReport:
        """Build a report; ``unexpected`` is folded into ``dropped``."""
        mapped_set = frozenset(mapped)
        model_set = frozenset(model_keys)
        return cls(
            mapped=mapped_set,
            dropped=frozenset(dropped) | frozenset(unexpected),
            missing=frozenset(k for k in model_set if k not in mapped_set),
        )

    @property
    def ok(self) -> bool:
        return not self.missing

    def summary(self) -> str:
        return f"{len(self.mapped)} mapped, {len(self.dropped)} dropped, {len(self.missing)} missing"


# ---------------------------------------------------------------------------
# Compute dtypes


DTYPE_NAMES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}
# What a caller passes for "the family's choice on this device".
AUTO_DTYPE = "auto"
# Full-precision dtypes every family runs in (float64 for reference comparisons).
FULL_PRECISION: tuple[torch.dtype, ...] = (torch.float32, torch.float64)


def parse_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """A dtype name ("float32", "bf16", ...) or a torch dtype as a torch dtype; None and
    "auto" as None (the family's choice, ``select_compute_dtype``).

    Raises:
        ValueError: an unknown name or a dtype that is not floating point.
    """
    if dtype is None or dtype == AUTO_DTYPE:
        return None
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"dtype {dtype} is not a floating-point compute dtype")
        return dtype
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {dtype!r}; expected {AUTO_DTYPE!r} or one of {sorted(DTYPE_NAMES)}")
    return DTYPE_NAMES[dtype]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class ComputeDtypeModule(nn.Module):
    """A module that declares the dtype its activations run in (``compute_dtype``).

    The declaration is set when the module is built (torch's default dtype) and follows
    every cast of the module (``.to(dtype)``, ``.half()``, ``.bfloat16()``, ...), which
    reach it through ``nn.Module._apply``; moving it to a device or quantising its linear
    layers to int8 leaves it as it is. Code that needs the compute dtype asks this, never a
    weight: an int8 layer has no float ``weight``, and a family may keep some weights in
    another dtype than its activations.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._compute_dtype: torch.dtype = torch.get_default_dtype()

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype activations run in (not the storage dtype of quantized weights)."""
        return self._compute_dtype

    def _apply(self, fn, recurse: bool = True):
        out = super()._apply(fn, recurse)
        # What the cast does to a floating tensor of the current compute dtype is the new one
        # (an empty probe: a device move keeps the dtype, a dtype cast changes it).
        probe = fn(torch.empty(0, dtype=self._compute_dtype))
        if isinstance(probe, torch.Tensor) and probe.is_floating_point():
            self._compute_dtype = probe.dtype
        return out


# ---------------------------------------------------------------------------
# Encoder and model


def chunk_units(chunk_ms: float, unit_ms: float, who: str) -> int:
    """``chunk_ms`` as a whole number of ``unit_ms`` units; ``ValueError`` when it is not one."""
    units = chunk_ms / unit_ms
    if chunk_ms <= 0 or abs(units - round(units)) > 1e-6:
        raise ValueError(f"chunk of {chunk_ms:g} ms is not a whole number of {who}'s {unit_ms:g}-ms streaming units")
    return int(round(units))


class BaseEncoder(ComputeDtypeModule):
    """An acoustic encoder: features -> hidden states, plus streaming geometry.

    Subclasses implement ``forward(feats, feat_lens) -> (hidden, hidden_lens)`` and declare
    ``subsampling_rate`` / ``output_size`` (and ``right_context``) as attributes. Streaming
    encoders additionally declare ``streaming_kind`` and implement the paged or stateful
    members. ``compute_dtype`` is the dtype an encoder casts its input features to.
    """

    @property
    def streaming_kind(self) -> StreamingKind:
        """What this config's weights can do when streaming; "none" for offline-only."""
        return "none"

    # The geometry every encoder declares, as plain attributes (set in its ``__init__``, or on
    # its class): feature frames per output frame, the width of the hidden states, and the
    # feature frames of look-ahead it needs past a chunk.
    subsampling_rate: int = Undeclared()  # type: ignore[assignment]
    output_size: int = Undeclared()  # type: ignore[assignment]
    right_context: int = 0

    def set_attention(self, attention_model: str | None, att_context_size: tuple[int, int] | None) -> None:
        """Switch the attention at load (``EngineConfig.attention_model`` / ``att_context_size``).

        Raises:
            ValueError: this encoder has no such choice (a family that has one overrides this).
        """
        raise ValueError(
            f"{type(self).__name__} has no attention model or context to choose "
            f"(attention_model={attention_model!r}, att_context_size={att_context_size!r})"
        )

    @property
    @unimplemented
    def num_attention_layers(self) -> int:
        """Attention layers with a K/V cache (``CacheSpec.n_layers``; paged streaming)."""
        raise StreamingNotSupported(
            f"{type(self).__name__}.num_attention_layers is a paged-streaming member; this encoder "
            f"declares streaming_kind={self.streaming_kind!r} and keeps no paged K/V cache"
        )

    @property
    @unimplemented
    def n_kv_head(self) -> int:
        """K/V heads per layer of the paged streaming cache."""
        raise StreamingNotSupported(
            f"{type(self).__name__}.n_kv_head is a paged-streaming member; this encoder "
            f"declares streaming_kind={self.streaming_kind!r} and keeps no paged K/V cache"
        )

    @property
    @unimplemented
    def head_dim(self) -> int:
        """Per-head width of the paged streaming cache."""
        raise StreamingNotSupported(
            f"{type(self).__name__}.head_dim is a paged-streaming member; this encoder "
            f"declares streaming_kind={self.streaming_kind!r} and keeps no paged K/V cache"
        )

    @unimplemented
    def forward_packed(self, feats: torch.Tensor, cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode packed rows (sequence packing; see ``oasr.layers.packing``).

        Shapes:
            feats: (N, F) the rows' frames end to end, cu_seqlens: (B + 1,) cumulative
            frames per row -> hidden (N', D) packed, cu_seqlens (B + 1,) of the hidden rows
        """
        raise NotImplementedError(f"{type(self).__name__} does not encode packed rows")

    # Optional declarations: "nothing declared" defaults.

    # Feature value a short final streaming window is padded with, and feature frames of it
    # appended when a stream finishes (icefall's causal Zipformer: log(1e-10), 30 frames).
    streaming_pad_value: float = 0.0
    streaming_tail_frames: int = 0
    # Feature frames of ``streaming_pad_value`` put before a stream's first frame (and again
    # after an endpoint reset): an encoder whose chunk grid starts before the audio (Nemotron's
    # causal subsampling: ``subsampling_rate - 1``, so that a chunk ends on the newest frame
    # its last output reads) sees them as its first window's head and treats them as padding.
    streaming_head_frames: int = 0

    def streaming_chunk_size(self, chunk_ms: float | None, frame_shift_s: float) -> int:
        """The chunk (in the encoder's streaming unit, as ``streaming_geometry`` takes it) for
        a chunk of ``chunk_ms`` ms of audio; None: the encoder's published default.

        The default unit is one output frame (``subsampling_rate`` feature frames: WeNet's
        ``decoding_chunk_size``, 40 ms at a 4x subsampling of 10-ms frames), 16 frames
        (640 ms) unless asked. Raises ``ValueError`` for a chunk that is not a whole number
        of units.
        """
        unit_ms = self.subsampling_rate * frame_shift_s * 1000.0
        if chunk_ms is None:
            return 16
        return chunk_units(chunk_ms, unit_ms, type(self).__name__)

    @property
    def conv_cache_shape(self) -> tuple[int, int] | None:
        """(channels, frames) of each layer's convolution tail a paged stream keeps
        (``CacheSpec.conv_cache``), or None."""
        return None

    @property
    def streaming_min_final_frames(self) -> int:
        """The fewest feature frames a stream's short final window may hold to be encoded
        (fewer are dropped, as WeNet's chunk loop drops them); default: one output frame's."""
        return int(getattr(self, "right_context", 0)) + 1

    @property
    def streaming_left_chunks(self) -> bool:
        """Whether the caller chooses the attention history (``left_chunks``); an encoder whose
        history is fixed by its weights (a trained window) says False and refuses it."""
        return self.streaming_kind == "paged" and self.fixed_attention_window is None

    @property
    def streaming_state_specs(self) -> tuple[StreamStateSpec, ...]:
        """Extra fixed-extent per-stream tensors (become ``CacheSpec.stream_states``)."""
        return ()

    @property
    def fixed_attention_window(self) -> int | None:
        """A trained attention span the engine pre-fills, or ``None``."""
        return None

    def streaming_geometry(self, chunk_size: int) -> StreamingGeometry:
        """Feature frames per chunk of ``chunk_size`` output frames.

        The default is the generic ``(chunk_size - 1) * sub + right_context + 1``
        window advancing ``chunk_size * sub`` frames; an encoder whose front end it
        does not describe overrides this, and refuses chunk sizes it cannot serve.
        """
        if self.streaming_kind == "none":
            raise StreamingNotSupported(
                f"{type(self).__name__} declares streaming_kind='none': it has no streaming geometry"
            )
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        sub = self.subsampling_rate
        return StreamingGeometry(
            window_frames=(chunk_size - 1) * sub + self.right_context + 1,
            stride_frames=chunk_size * sub,
        )

    @unimplemented
    def forward_chunk_paged(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, cache: PagedCacheView
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One streaming chunk of a batch of streams over the paged K/V pool (paged-streaming
        encoders): reads each stream's history from ``cache`` and appends the chunk's K/V and
        convolution tails to it.

        Shapes:
            feats: (B, T, F) the chunk's feature frames (``streaming_geometry`` window),
            feat_lens: (B,) -> hidden (B, T', D), hidden_lens (B,)
        """
        raise StreamingNotSupported(
            f"{type(self).__name__} declares streaming_kind={self.streaming_kind!r}: it has no "
            f"paged chunk forward; serve it offline"
        )

    @unimplemented
    def get_streaming_init_states(self, batch_size: int, device: torch.device | str | None = None) -> StreamingStates:
        """Fresh states for ``batch_size`` streams (stateful-streaming encoders)."""
        raise StreamingNotSupported(
            f"{type(self).__name__} declares streaming_kind={self.streaming_kind!r}: it keeps "
            f"no per-stream state; serve it offline"
        )

    @unimplemented
    def streaming_forward(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, states: StreamingStates
    ) -> tuple[torch.Tensor, torch.Tensor, StreamingStates]:
        """One chunk of a batch of streams: a pure function of the chunk and the states.

        Shapes:
            feats: (B, T, F), feat_lens: (B,) -> hidden (B, T', D), hidden_lens (B,), new states
        """
        raise StreamingNotSupported(
            f"{type(self).__name__} declares streaming_kind={self.streaming_kind!r}: it has no "
            f"stateful streaming forward; serve it offline"
        )

    @unimplemented
    def stack_streaming_states(self, states: list[StreamingStates]) -> StreamingStates:
        """One batch state from the states of single streams (stateful streaming)."""
        raise StreamingNotSupported(f"{type(self).__name__} keeps no per-stream state to stack")

    @unimplemented
    def unstack_streaming_states(self, states: StreamingStates) -> list[StreamingStates]:
        """The states of single streams from one batch state (stateful streaming)."""
        raise StreamingNotSupported(f"{type(self).__name__} keeps no per-stream state to unstack")


class BaseAsrModel(ComputeDtypeModule):
    """What the engine may assume about a model.

    Class attributes a family sets:
        architecture: its registry key.
        capabilities: the decode families its weights can serve.
        default_decode_type: the one used when the engine is not told (a class that declares
            exactly one capability and no default gets that one).
        safe_dtypes: the compute dtypes the family is numerically safe in, in the order
            ``dtype="auto"`` prefers them on a GPU (the first one the device has; a CPU
            always gets float32). float32 (and float64) are always accepted; a half dtype
            left out is refused at load (``check_compute_dtype``).
        unsafe_dtype_reason: why the half dtypes left out of ``safe_dtypes`` are unsafe.
        config_class: the family's config dataclass (a ``ModelConfig``): a plain mapping given
            to the constructor is built into it (``from_dict``) before ``self.config`` is set.
        token_timing: how the frame-synchronous strategies (CTC, transducer) time tokens, words
            and segments: "spikes" (oasr's own: around each token's emission frame, segments cut
            at pauses, ``engine/decode/words.py``) or "nemo" (NeMo's ``timestamps=True`` offsets,
            words and sentence segments, ``engine/decode/nemo_times.py``).
    """

    architecture: ClassVar[str] = ""
    token_timing: ClassVar[str] = "spikes"
    capabilities: ClassVar[frozenset[DecodeType]] = frozenset()
    default_decode_type: ClassVar[DecodeType | None] = None
    safe_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float16, torch.bfloat16, torch.float32)
    unsafe_dtype_reason: ClassVar[str] = ""
    config_class: ClassVar[type[ModelConfig] | None] = None

    encoder: BaseEncoder

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        caps = cls.__dict__.get("capabilities")
        if "default_decode_type" not in cls.__dict__ and isinstance(caps, frozenset) and len(caps) == 1:
            cls.default_decode_type = next(iter(caps))

    def __init__(self, config: Any) -> None:
        super().__init__()
        if self.config_class is not None and not isinstance(config, self.config_class):
            config = self.config_class.from_dict(config)
        self.config = config

    @classmethod
    def from_config(cls, config: Any) -> BaseAsrModel:
        """Build the model (randomly initialised) from its config."""
        return cls(config)

    # -- decode families -------------------------------------------------------

    @property
    def decode_type(self) -> DecodeType:
        """The decode family the engine uses unless told otherwise."""
        if self.default_decode_type is None:
            raise NotImplementedError(f"{type(self).__name__} declares no default_decode_type")
        return self.default_decode_type

    @property
    def encoder_options(self) -> frozenset[str]:
        """Per-request encoder options this checkpoint accepts (e.g. "language")."""
        return frozenset()

    @property
    def languages(self) -> tuple[str, ...] | None:
        """The languages a request may name (``oasr.languages.resolve_language`` maps a code, a
        name or a locale to one of them): ISO codes (``"de"``), or locales (``"de-DE"``) where
        the model tells them apart. None: the model has no language control; the engine then
        falls back to what the checkpoint declares it transcribes (``LoadedModel.languages``)."""
        return None

    # -- offline forwards --------------------------------------------------------

    def encode_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder only.

        Shapes:
            feats: (B, T, F) or the family's feature layout; feat_lens: (B,)
            -> hidden (B, T', D), hidden_lens (B,)
        """
        return self.encoder(feats, feat_lens)

    @unimplemented
    def forward_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Fused encoder + head -> log-probs (B, T', V), lens (B,) (CTC-style models)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no fused encoder+head forward; it decodes through {str(self.decode_type)!r}"
        )

    @property
    def supports_packing(self) -> bool:
        """Whether the model encodes packed rows (``CtcMixin.forward_offline_packed``); False
        unless a family says otherwise."""
        return False

    # -- streaming ----------------------------------------------------------------

    @property
    def cache_spec(self) -> CacheSpec | None:
        """The streaming cache, or ``None`` when ``encoder.streaming_kind == "none"``."""
        if self.encoder.streaming_kind == "none":
            return None
        if self.encoder.streaming_kind != "paged":
            return CacheSpec(0, 0, 0, stream_states=self.encoder.streaming_state_specs)
        return CacheSpec(
            n_layers=self.encoder.num_attention_layers,
            n_kv_heads=self.encoder.n_kv_head,
            head_dim=self.encoder.head_dim,
            conv_cache=self.encoder.conv_cache_shape,
            stream_states=self.encoder.streaming_state_specs,
            fixed_attention_window=self.encoder.fixed_attention_window,
        )

    def encode_chunk_paged(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, cache: PagedCacheView
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder-only streaming chunk over the paged pool (``BaseEncoder.forward_chunk_paged``)."""
        return self.encoder.forward_chunk_paged(feats, feat_lens, cache)

    def encode_chunk(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, states: StreamingStates
    ) -> tuple[torch.Tensor, torch.Tensor, StreamingStates]:
        """Encoder-only streaming chunk of the stateful / slot forms (``BaseEncoder.streaming_forward``)."""
        return self.encoder.streaming_forward(feats, feat_lens, states)

    @unimplemented
    def forward_chunk_paged(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, cache: PagedCacheView
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Fused encoder + head streaming chunk over the paged pool -> log-probs (B, T', V), lens."""
        raise StreamingNotSupported(
            f"{type(self).__name__} declares streaming_kind={self.encoder.streaming_kind!r}: "
            f"streaming service mode needs a paged-streaming encoder"
        )

    # -- weights and dtypes ---------------------------------------------------------

    # ``compute_dtype`` (``ComputeDtypeModule``): the declared activation dtype, set at build
    # and by casts, kept by int8 quantisation; every family and strategy asks it.

    @property
    def device(self) -> torch.device:
        for p in self.parameters():
            return p.device
        return torch.device("cpu")

    def quantization_layout(self) -> Any:
        """Which norms feed which GEMMs and which layers stay full precision.

        The default declares nothing smoothable; round-to-nearest quantization
        works without it.
        """
        return None

    def load_weights(
        self, state_dict: Mapping[str, torch.Tensor], *, copied: Callable[[torch.Tensor], None] | None = None
    ) -> LoadReport:
        """Copy checkpoint tensors (already in this model's names) into the model.

        Shapes are checked; tensors the model does not have are reported as dropped,
        model tensors the checkpoint lacks as missing. Nothing is raised here: the
        registry decides what a drop or a miss means for this converter. A CTC head
        (``ctc_projection``) may come at its real (V, D) width: it is widened to the
        GEMM-aligned width the model allocates.

        Args:
            copied: called with each checkpoint tensor once it is copied in (the bundle's
                ``release``: its host pages go back as the load goes, not after it).

        Raises:
            LoadError: a tensor whose shape does not match the model's.
        """
        state_dict = self._adapt_checkpoint(state_dict)
        own = dict(self.named_parameters())
        own.update({k: v for k, v in self.named_buffers() if k not in own and self._is_persistent(k)})
        mapped, unexpected = [], []
        mismatched = []
        with torch.no_grad():
            for name, tensor in state_dict.items():
                target = own.get(name)
                if target is None:
                    unexpected.append(name)
                    continue
                if tuple(target.shape) != tuple(tensor.shape):
                    mismatched.append(f"{name}: checkpoint {tuple(tensor.shape)} vs model {tuple(target.shape)}")
                    continue
                target.copy_(tensor)  # casts as it copies: no whole-tensor temporary in the model's dtype
                if copied is not None:
                    copied(tensor)
                mapped.append(name)
        if mismatched:
            raise LoadError(
                f"{type(self).__name__}: {len(mismatched)} tensor(s) have the wrong shape:\n  "
                + "\n  ".join(mismatched[:20])
            )
        return LoadReport.build(own.keys(), mapped, unexpected=unexpected)

    def _adapt_checkpoint(self, state_dict: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        """Let each submodule that declares ``adapt_checkpoint(prefix, state_dict)`` bring its
        tensors to its own layout (e.g. ``CtcProjection`` widens a head to its GEMM-aligned
        width); a module that cannot raises ``ValueError``, reported as a ``LoadError``."""
        for name, module in self.named_modules():
            adapt = getattr(module, "adapt_checkpoint", None)
            if adapt is None or module is self:
                continue
            try:
                state_dict = adapt(f"{name}." if name else "", state_dict)
            except ValueError as e:
                raise LoadError(f"{type(self).__name__}: {e}") from e
        return state_dict

    def _is_persistent(self, buffer_name: str) -> bool:
        module_name, _, leaf = buffer_name.rpartition(".")
        module = self.get_submodule(module_name) if module_name else self
        return leaf not in module._non_persistent_buffers_set


# ---------------------------------------------------------------------------
# Which compute dtype a family runs in


def _family_name(model_class: type[BaseAsrModel]) -> str:
    family = getattr(model_class, "family", "")
    return f"{family} ({model_class.architecture})" if isinstance(family, str) and family else model_class.architecture


def device_supports(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``device`` runs ``dtype`` natively (bfloat16 on CUDA: compute capability 8.0,
    Ampere, or later; emulated bfloat16 is slower than float32)."""
    if device.type == "cuda" and dtype == torch.bfloat16:
        return torch.cuda.get_device_capability(device) >= (8, 0)
    return True


def check_compute_dtype(model_class: type[BaseAsrModel], dtype: torch.dtype) -> None:
    """Refuse a compute dtype the family is not safe in.

    Raises:
        ValueError: naming the family, the dtype, why, and the dtypes it takes.
    """
    if dtype in FULL_PRECISION or dtype in model_class.safe_dtypes:
        return
    reason = model_class.unsafe_dtype_reason or "the family does not declare it safe"
    takes = " or ".join(_dtype_name(d) for d in dict.fromkeys((*model_class.safe_dtypes, torch.float32)))
    raise ValueError(
        f"{_family_name(model_class)} does not run in {_dtype_name(dtype)}: {reason}. Use dtype={takes} "
        f"(or 'auto': float32 on CPU, {_dtype_name(model_class.safe_dtypes[0])} on a GPU that has it)"
    )


def select_compute_dtype(
    model_class: type[BaseAsrModel], dtype: torch.dtype | str | None, device: torch.device | str | None
) -> torch.dtype:
    """The compute dtype a model of ``model_class`` is loaded in on ``device``.

    ``dtype`` None or "auto" is the family's choice: float32 off CUDA (half precision on
    a CPU is slower and some kernels lack it), and on CUDA the first of its
    ``safe_dtypes`` the device runs natively (``device_supports``). An explicit dtype is
    taken as asked once ``check_compute_dtype`` accepts it.

    Raises:
        ValueError: an unknown dtype name, or one the family is not safe in.
    """
    requested = parse_dtype(dtype)
    if requested is not None:
        check_compute_dtype(model_class, requested)
        return requested
    target = torch.device(device) if device is not None else torch.device("cpu")
    if target.type != "cuda":
        return torch.float32
    for candidate in model_class.safe_dtypes:
        if device_supports(target, candidate):
            return candidate
    return torch.float32
