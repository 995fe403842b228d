"""The model registry: architecture names -> (model class, checkpoint converters).

Built-in families come from one ``_BUILTIN`` table of lazy ``"module:Class"``
references, registered through the same ``register_model`` call as plugins, so a
family's modules are imported only when it is asked for. Out-of-tree architectures arrive
through the ``oasr.models`` entry-point group (an entry point is a callable that
registers, or a module whose import registers); a broken plugin warns and is
skipped rather than taking the built-ins down.

Loading a checkpoint goes: converter (sniffs the directory, reads the native
format, returns a ``CheckpointBundle`` in the model's tensor names) -> model built
from the config without random init -> every float tensor checked finite (a NaN / inf
is a ``LoadError`` naming the file and tensor) -> ``load_weights`` -> ``LoadReport``
accounting against the converter's declarations:

* ``expected_unused_prefixes``: dropped silently (e.g. training-only heads);
* ``capability_drop_hints``: dropped with a warning naming what is lost;
* anything else dropped: a warning listing the tensors;
* a model tensor left missing: ``LoadError``, carrying the hints that fired.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import math
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # torch and the model contract load on first use: `oasr models` lists names without them
    import torch

    from oasr.models.base import BaseAsrModel, DecodingSpec, FeatureSpec, LoadReport, TokenizerSpec

ENTRY_POINT_GROUP = "oasr.models"

# The built-in families: (architecture, model class, converters), as lazy "module:Class"
# references: a family's modules are imported only when it is asked for.
_BUILTIN: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "whisper",
        "oasr.models.whisper.model:WhisperModel",
        (
            "oasr.models.whisper.convert:HFWhisperConverter",
            "oasr.models.whisper.convert:CT2WhisperConverter",
            "oasr.models.whisper.convert:OpenAIWhisperConverter",
        ),
    ),
    ("conformer", "oasr.models.conformer.model:ConformerModel", ("oasr.models.conformer.convert:WenetConverter",)),
    (
        "moonshine",
        "oasr.models.moonshine.model:MoonshineModel",
        ("oasr.models.moonshine.convert:HFMoonshineConverter",),
    ),
    ("lasr", "oasr.models.lasr.model:LasrModel", ("oasr.models.lasr.convert:HFLasrConverter",)),
    (
        "granite_speech5",
        "oasr.models.granite_speech5.model:GraniteSpeech5Model",
        ("oasr.models.granite_speech5.convert:HFGraniteSpeech5Converter",),
    ),
    # wav2vec2, HuBERT and data2vec-audio CTC checkpoints.
    ("wav2vec2", "oasr.models.wav2vec2.model:Wav2Vec2CtcModel", ("oasr.models.wav2vec2.convert:HFWav2Vec2Converter",)),
    # MMS: wav2vec2 with per-language adapters (adapter.<lang>.safetensors).
    ("mms", "oasr.models.wav2vec2.mms:MmsCtcModel", ("oasr.models.wav2vec2.mms_convert:HFMmsConverter",)),
    ("wavlm", "oasr.models.wav2vec2.wavlm:WavLMCtcModel", ("oasr.models.wav2vec2.wavlm:HFWavLMConverter",)),
    (
        "parakeet",
        "oasr.models.parakeet.model:ParakeetCtcModel",
        ("oasr.models.parakeet.convert:HFParakeetConverter", "oasr.models.parakeet.convert_nemo:NemoParakeetConverter"),
    ),
    # Transducer and hybrid checkpoints are detected through "parakeet" (its converters route them here).
    (
        "parakeet_transducer",
        "oasr.models.parakeet.model:ParakeetTransducerModel",
        (
            "oasr.models.parakeet.convert:HFParakeetTransducerConverter",
            "oasr.models.parakeet.convert_nemo:NemoParakeetTransducerConverter",
        ),
    ),
    (
        "parakeet_hybrid",
        "oasr.models.parakeet.model:ParakeetHybridModel",
        ("oasr.models.parakeet.convert_nemo:NemoParakeetHybridConverter",),
    ),
    ("canary", "oasr.models.canary.model:CanaryModel", ("oasr.models.canary.convert:NemoCanaryConverter",)),
    (
        "moonshine_streaming",
        "oasr.models.moonshine_streaming.model:MoonshineStreamingModel",
        ("oasr.models.moonshine_streaming.convert:HFMoonshineStreamingConverter",),
    ),
    # NeMo's cache-aware streaming FastConformer under each head (detected through "parakeet" too).
    (
        "parakeet_cache_aware",
        "oasr.models.parakeet.cache_aware:CacheAwareCtcModel",
        ("oasr.models.parakeet.convert_nemo:NemoCacheAwareCtcConverter",),
    ),
    (
        "parakeet_cache_aware_transducer",
        "oasr.models.parakeet.cache_aware:CacheAwareTransducerModel",
        ("oasr.models.parakeet.convert_nemo:NemoCacheAwareTransducerConverter",),
    ),
    (
        "parakeet_cache_aware_hybrid",
        "oasr.models.parakeet.cache_aware:CacheAwareHybridModel",
        ("oasr.models.parakeet.convert_nemo:NemoCacheAwareHybridConverter",),
    ),
    ("nemotron", "oasr.models.nemotron.model:NemotronRnntModel", ("oasr.models.nemotron.convert:HFNemotronConverter",)),
    (
        "qwen3_asr",
        "oasr.models.qwen3_asr.model:Qwen3AsrModel",
        (
            "oasr.models.qwen3_asr.convert:HFQwen3AsrConverter",
            "oasr.models.qwen3_asr.convert:OriginalQwen3AsrConverter",
        ),
    ),
    # Voxtral Realtime: a causal tower and a Mistral LM decoding in lockstep with the audio.
    (
        "voxtral_realtime",
        "oasr.models.voxtral_realtime.model:VoxtralRealtimeModel",
        ("oasr.models.voxtral_realtime.convert:HFVoxtralRealtimeConverter",),
    ),
    (
        "canary_qwen",
        "oasr.models.canary_qwen.model:CanaryQwenModel",
        ("oasr.models.canary_qwen.convert:SalmConverter",),
    ),
    (
        "granite_speech",
        "oasr.models.granite_speech.model:GraniteSpeechModel",
        ("oasr.models.granite_speech.convert:HFGraniteSpeechConverter",),
    ),
    (
        "speech_llm",
        "oasr.models.speech_llm.model:Qwen2AudioModel",
        ("oasr.models.speech_llm.convert:HFQwen2AudioConverter",),
    ),
    ("voxtral", "oasr.models.voxtral.model:VoxtralModel", ("oasr.models.voxtral.convert:HFVoxtralConverter",)),
    (
        "paraformer",
        "oasr.models.paraformer.model:ParaformerModel",
        ("oasr.models.paraformer.convert:FunasrParaformerConverter",),
    ),
    (
        "sensevoice",
        "oasr.models.sensevoice.model:SenseVoiceModel",
        ("oasr.models.sensevoice.convert:FunasrSenseVoiceConverter",),
    ),
    (
        "zipformer",
        "oasr.models.zipformer.model:ZipformerCtcModel",
        (
            "oasr.models.zipformer.convert:IcefallConverter",
            "oasr.models.zipformer.convert:IcefallExplicitConverter",
        ),
    ),
    (
        "transducer",
        "oasr.models.transducer.model:TransducerModel",
        (
            "oasr.models.transducer.convert:IcefallTransducerConverter",
            "oasr.models.transducer.convert:IcefallHybridTransducerConverter",
        ),
    ),
)


@dataclass
class CheckpointBundle:
    """A checkpoint read into oasr's terms, before any model is built.

    Attributes:
        architecture: registry key of the family that reads it.
        config: the family config object.
        state_dict: tensors in the model's own names (host memory).
        tokenizer, features, decoding: the specs the checkpoint carries.
        source: where it was read from; format: its native format.
        release: called with each checkpoint tensor once the model holds its contents: hands
            its host pages back (a mapped file's), so the checkpoint and the model are not both
            resident at the end of a load; None: nothing to hand back.
    """

    architecture: str
    config: Any
    state_dict: dict[str, torch.Tensor]
    tokenizer: TokenizerSpec | None = None
    features: FeatureSpec | None = None
    decoding: DecodingSpec | None = None
    source: str = ""
    format: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    release: Callable[[torch.Tensor], None] | None = None


@runtime_checkable
class CheckpointConverter(Protocol):
    """Reads one native checkpoint format for one architecture.

    Attributes:
        architecture: the registry key it produces bundles for.
        expected_unused_prefixes: checkpoint tensor prefixes dropped silently.
        capability_drop_hints: prefix -> what is lost when tensors under it are dropped.
        auto_detect: whether ``can_load`` takes part in architecture sniffing.
    """

    architecture: str
    expected_unused_prefixes: tuple[str, ...]
    capability_drop_hints: Mapping[str, str]
    auto_detect: bool

    def can_load(self, path: Path) -> bool:
        """Whether ``path`` looks like this converter's format (cheap: read configs only)."""
        ...

    def load(self, path: Path) -> CheckpointBundle:
        """Read the checkpoint into a bundle (tensors on the host)."""
        ...


def _import_object(ref: str | type | Any) -> Any:
    if not isinstance(ref, str):
        return ref
    module, _, attr = ref.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


@dataclass
class ModelInfo:
    """One registered architecture."""

    name: str
    model: str | type[BaseAsrModel]
    converters: tuple[str | type, ...]
    origin: str = "builtin"

    def model_class(self) -> type[BaseAsrModel]:
        from oasr.models.base import BaseAsrModel

        cls = _import_object(self.model)
        if not (isinstance(cls, type) and issubclass(cls, BaseAsrModel)):
            raise TypeError(f"architecture {self.name!r}: {self.model!r} is not a BaseAsrModel subclass")
        return cls

    def converter_objects(self) -> list[CheckpointConverter]:
        out = []
        for ref in self.converters:
            obj = _import_object(ref)
            out.append(obj() if isinstance(obj, type) else obj)
        return out


def run_entry_points(group: str, what: str) -> Iterator[str]:
    """Run every entry point of ``group`` (a callable that registers is called; a module
    registers on import), yielding its origin ("plugin:<distribution>") just before it runs and
    "builtin" after, so the caller can record who registered what. A broken plugin warns
    ("oasr: skipping <what> plugin ...") and is skipped, never taking the built-ins down."""
    for ep in importlib.metadata.entry_points(group=group):
        dist = getattr(ep, "dist", None)
        yield f"plugin:{dist.name if dist is not None else ep.value}"
        try:
            obj = ep.load()
            if callable(obj):
                obj()
        except Exception as exc:  # a broken plugin must not take the built-ins down
            warnings.warn(
                f"oasr: skipping {what} plugin {ep.name!r} ({ep.value}): {type(exc).__name__}: {exc}",
                RuntimeWarning,
                stacklevel=3,
            )
        finally:
            yield "builtin"


class PluginTable:
    """A registry's table, name -> registration, filled on first use: the built-ins
    (``register_builtins``), then each plugin of the entry-point group ``group``
    (``run_entry_points``); every entry records who registered it (``origins``: "builtin" or
    "plugin:<distribution>"). The model and decode-strategy registries are two of these.
    """

    def __init__(self, group: str, what: str, register_builtins: Callable[[], None]) -> None:
        self.group, self.what = group, what
        self._register_builtins = register_builtins
        self.entries: dict[str, Any] = {}
        self.origins: dict[str, str] = {}
        self.lock = threading.RLock()
        self._loaded = False
        self.current_origin = "builtin"  # who is registering now

    def put(self, name: str, value: Any, *, overwrite: bool, kind: str) -> None:
        """Register ``value`` under ``name``.

        Raises:
            ValueError: ``name`` is taken (naming who took it) and not ``overwrite``.
        """
        with self.lock:
            if name in self.entries and not overwrite:
                raise ValueError(f"{kind} {name!r} is already registered ({self.origins[name]})")
            self.entries[name] = value
            self.origins[name] = self.current_origin

    def loaded(self) -> dict[str, Any]:
        """The table, with the built-ins and the plugins registered on the first call."""
        with self.lock:
            if not self._loaded:
                self._loaded = True
                self._register_builtins()
                for origin in run_entry_points(self.group, self.what):
                    self.current_origin = origin
        return self.entries

    def reload(self) -> None:
        """Forget every registration and discover the built-ins and plugins again."""
        with self.lock:
            self.entries.clear()
            self.origins.clear()
            self._loaded = False
        self.loaded()


def _register_builtin_models() -> None:
    for name, model, converters in _BUILTIN:
        register_model(name, model, converters, overwrite=True)


_REGISTRY = PluginTable(ENTRY_POINT_GROUP, "model", _register_builtin_models)


def register_model(
    name: str,
    model: str | type[BaseAsrModel],
    converters: str | type | tuple[str | type, ...] | list = (),
    *,
    overwrite: bool = False,
) -> None:
    """Register an architecture.

    Args:
        name: registry key (e.g. "whisper").
        model: the ``BaseAsrModel`` subclass or a lazy ``"module:Class"`` string.
        converters: ``CheckpointConverter`` classes / instances / lazy strings.
        overwrite: replace an existing registration of ``name``.

    Raises:
        ValueError: ``name`` is already registered and ``overwrite`` is False.
    """
    if isinstance(converters, (str, type)) or not isinstance(converters, (tuple, list)):
        converters = (converters,)
    info = ModelInfo(name, model, tuple(converters), origin=_REGISTRY.current_origin)
    _REGISTRY.put(name, info, overwrite=overwrite, kind="architecture")


def reload_registry() -> None:
    """Forget all registrations and re-discover built-ins and plugins (after installing one)."""
    _REGISTRY.reload()


def list_models() -> list[str]:
    """Registered architecture names, built-ins first, then plugins, in registration order."""
    return list(_REGISTRY.loaded())


def get_model_info(name: str) -> ModelInfo:
    """The registration of ``name``.

    Raises:
        KeyError: naming the known architectures.
    """
    table = _REGISTRY.loaded()
    try:
        return table[name]
    except KeyError:
        raise KeyError(f"unknown architecture {name!r}; registered: {list(table)}") from None


def detect_architecture(path: str | Path) -> tuple[str, CheckpointConverter]:
    """Find the (single) auto-detecting converter that can read ``path``.

    Raises:
        ValueError: nothing recognises it, or several architectures do.
    """
    path = Path(path)
    table = _REGISTRY.loaded()
    hits: list[tuple[str, CheckpointConverter]] = []
    for name, info in table.items():
        for conv in info.converter_objects():
            if getattr(conv, "auto_detect", True) and conv.can_load(path):
                hits.append((name, conv))
                break
    if not hits:
        raise ValueError(
            f"no registered architecture recognises {path} (registered: {list(table)}); "
            f"name the architecture (Python: architecture=...; command line: --architecture NAME) "
            f"if it is an explicit-only format"
        )
    if len({h[0] for h in hits}) > 1:
        raise ValueError(
            f"{path} is recognised by several architectures {[h[0] for h in hits]}; name one "
            f"(Python: architecture=...; command line: --architecture NAME)"
        )
    return hits[0]


def load_checkpoint_bundle(
    path: str | Path, architecture: str | None = None
) -> tuple[CheckpointBundle, CheckpointConverter]:
    """Read a checkpoint with its architecture's converter (detected when not given)."""
    path = Path(path)
    if architecture is None:
        _, conv = detect_architecture(path)
    else:
        convs = get_model_info(architecture).converter_objects()
        usable = [c for c in convs if c.can_load(path)]
        if not usable:
            raise ValueError(f"no {architecture!r} converter can read {path}")
        conv = usable[0]
    return conv.load(path), conv


def _linears_deferred(quantize: str | None):
    """With ``quantize``, linear weights are built on the meta device (quantised from the
    checkpoint before the load, never allocated in float)."""
    if quantize is None:
        return contextlib.nullcontext()
    from oasr.layers.quant import linear_weights_on_meta

    return linear_weights_on_meta()


@contextlib.contextmanager
def _skip_init() -> Iterator[None]:
    """Build modules without random initialisation: every tensor is about to be loaded."""
    import torch

    names = (
        "kaiming_uniform_",
        "kaiming_normal_",
        "uniform_",
        "normal_",
        "xavier_uniform_",
        "xavier_normal_",
        "trunc_normal_",
        "zeros_",
        "ones_",
        "constant_",
    )
    saved = {n: getattr(torch.nn.init, n) for n in names}
    try:
        for n in names:
            setattr(torch.nn.init, n, lambda tensor, *a, **k: tensor)
        yield
    finally:
        for n, fn in saved.items():
            setattr(torch.nn.init, n, fn)


def account_load(report: LoadReport, converter: Any, architecture: str) -> list[str]:
    """Apply the converter's drop declarations to a report.

    Returns:
        the capability hints that fired.

    Raises:
        LoadError: a model tensor is missing (the message carries the hints that fired).
    """
    from oasr.models.base import LoadError

    expected = tuple(getattr(converter, "expected_unused_prefixes", ()))
    hints: Mapping[str, str] = getattr(converter, "capability_drop_hints", {}) or {}
    fired: dict[str, list[str]] = {}
    unexplained: list[str] = []
    for name in sorted(report.dropped):
        if expected and name.startswith(expected):
            continue
        for prefix, hint in hints.items():
            if name.startswith(prefix):
                fired.setdefault(hint, []).append(name)
                break
        else:
            unexplained.append(name)
    for hint, names in fired.items():
        warnings.warn(
            f"{architecture}: dropped {len(names)} tensor(s) ({names[0]}, ...): {hint}", UserWarning, stacklevel=3
        )
    if unexplained:
        warnings.warn(
            f"{architecture}: {len(unexplained)} checkpoint tensor(s) were not used by the model: "
            f"{unexplained[:10]}{' ...' if len(unexplained) > 10 else ''}",
            UserWarning,
            stacklevel=3,
        )
    if report.missing:
        missing = sorted(report.missing)
        msg = (
            f"{architecture}: {len(missing)} model tensor(s) missing from the checkpoint: "
            f"{missing[:20]}{' ...' if len(missing) > 20 else ''}"
        )
        if fired:
            msg += "; drop hints that fired: " + "; ".join(fired)
        raise LoadError(msg)
    return list(fired)


_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".nemo", ".onnx")


def check_finite(state_dict: Mapping[str, torch.Tensor], source: str) -> None:
    """Refuse a checkpoint with NaN / inf in any floating-point tensor (a corrupted file
    loads otherwise, and every request decodes garbage or fails). One reduction per tensor: a
    float64 sum, which any NaN or inf makes non-finite and real weights cannot overflow (half the
    time of ``isfinite(t).all()``, which writes a mask of the whole tensor first).

    Raises:
        LoadError: naming the weight file(s) and the first non-finite tensor.
    """
    import torch

    from oasr.models.base import LoadError

    for name, tensor in state_dict.items():
        if tensor.is_floating_point() and not _all_finite(tensor):
            bad = int((~torch.isfinite(tensor)).sum())
            raise LoadError(
                f"{_weight_files(source)}: tensor {name!r} {tuple(tensor.shape)} has {bad} non-finite value(s) "
                "(NaN or inf); the checkpoint is corrupted"
            )


_FINITE_BLOCK = 1 << 20  # elements per float64 partial sum


def _all_finite(tensor: torch.Tensor) -> bool:
    """Whether a tensor holds no NaN / inf: float64 sums over blocks of rows (a sum over the whole
    tensor converts all of it at once: a temporary as large as the tensor)."""
    import torch

    if tensor.dim() == 0 or tensor.numel() <= _FINITE_BLOCK:
        return math.isfinite(torch.sum(tensor, dtype=torch.float64))
    rows = max(1, _FINITE_BLOCK * tensor.shape[0] // tensor.numel())
    return all(math.isfinite(torch.sum(block, dtype=torch.float64)) for block in tensor.split(rows))


def _weight_files(source: str) -> str:
    path = Path(source)
    if not path.is_dir():
        return str(path)
    files = sorted(str(p) for p in path.iterdir() if p.name.endswith(_WEIGHT_SUFFIXES) or ".bin.part" in p.name)
    return ", ".join(files) if files else str(path)


def build_model_from_checkpoint(
    path: str | Path,
    *,
    architecture: str | None = None,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
    quantize: str | None = None,
) -> tuple[BaseAsrModel, CheckpointBundle, LoadReport]:
    """Read a checkpoint and build its model.

    The compute dtype is ``dtype`` as the family accepts it, or for None / "auto" the
    family's choice on ``device`` (``oasr.models.base.select_compute_dtype``). The
    checkpoint is read and cast to it on the host, the model is built without random
    init and filled, and only then moved to ``device`` (a large checkpoint otherwise
    double-books device memory). With ``quantize`` ("int8") the linear layers are
    quantised from the checkpoint's tensors before the rest is loaded
    (``oasr.layers.quant.quantize_linears_from_checkpoint_``), so their float32 weights
    are never materialised.

    Returns:
        (model in eval mode, the bundle with its specs, the LoadReport).

    Raises:
        ValueError: a dtype the family is not safe in (before the model is built).
    """
    from oasr.models.base import select_compute_dtype

    bundle, converter = load_checkpoint_bundle(path, architecture)
    info = get_model_info(bundle.architecture)
    cls = info.model_class()
    compute_dtype = select_compute_dtype(cls, dtype, device)
    with _skip_init(), _linears_deferred(quantize):
        model = cls.from_config(bundle.config)
    if model.compute_dtype != compute_dtype:
        model.to(dtype=compute_dtype)
    check_finite(bundle.state_dict, bundle.source)
    if quantize is not None:
        from oasr.layers.quant import quantize_linears_from_checkpoint_
        from oasr.models.base import LoadReport

        used, int8_buffers = quantize_linears_from_checkpoint_(
            model, bundle.state_dict, quantize, release=bundle.release
        )
        report = model.load_weights(bundle.state_dict, copied=bundle.release)
        report = LoadReport(mapped=report.mapped | used, dropped=report.dropped, missing=report.missing - int8_buffers)
    else:
        report = model.load_weights(bundle.state_dict, copied=bundle.release)
    account_load(report, converter, bundle.architecture)
    bundle.state_dict = {}  # the model owns the weights now; free the host copy
    model.eval()
    if device is not None:
        model.to(device)
    return model, bundle, report
