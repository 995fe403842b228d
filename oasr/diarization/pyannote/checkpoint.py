"""Reading a pyannote.audio 4 pipeline directory as released, without pyannote installed.

A released pipeline (``pyannote/speaker-diarization-community-1``) is a folder:

    config.yaml          pipeline.name: pyannote.audio.pipelines.SpeakerDiarization
                         pipeline.params: segmentation / embedding / plda as "$model/<subfolder>",
                             clustering (VBxClustering | AgglomerativeClustering), segmentation_step,
                             embedding_exclude_overlap, batch sizes
                         params: clustering {threshold, Fa, Fb} or {method, min_cluster_size, threshold};
                             segmentation {min_duration_off}
    segmentation/pytorch_model.bin
    embedding/pytorch_model.bin
    plda/xvec_transform.npz, plda/plda.npz     (VBx only)

Each ``pytorch_model.bin`` is a Lightning checkpoint (``torch.save`` pickle): ``state_dict``,
``hyper_parameters`` (the model's constructor arguments; absent in WeSpeaker conversions, which use
the defaults) and pyannote's own record ``"pyannote.audio"``: ``versions``, ``architecture``
(``module`` / ``class``) and ``specifications`` (a pickled ``pyannote.audio.core.task.Specifications``
dataclass with ``Problem`` / ``Resolution`` enums). The pickle is read with an unpickler that
rebuilds tensors and plain containers and turns pyannote's / Lightning's objects into inert
records (``_Record``), so no class of theirs is imported or run. A model entry may also be a path
(absolute or relative to the config's folder) to a folder holding ``pytorch_model.bin`` or to the
file itself; a hub id (``pyannote/segmentation-3.0``) must be downloaded first.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

CONFIG_NAME = "config.yaml"
CHECKPOINT_NAME = "pytorch_model.bin"
PIPELINE_CLASS = "pyannote.audio.pipelines.SpeakerDiarization"

# pyannote.audio.core.task's enums, by value (what their pickles carry)
_PROBLEMS = {
    0: "BINARY_CLASSIFICATION",
    1: "MONO_LABEL_CLASSIFICATION",
    2: "MULTI_LABEL_CLASSIFICATION",
    3: "REPRESENTATION",
    4: "REGRESSION",
}
_RESOLUTIONS = {1: "FRAME", 2: "CHUNK"}


class _Record:
    """An object of a class we do not import (pyannote's, Lightning's): its constructor arguments
    and pickled state, nothing else."""

    qualname = "?"

    def __init__(self, *args: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state = {**(state[0] or {}), **state[1]}  # (dict, slots) form
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.state = state

    def __repr__(self) -> str:
        return f"<{self.qualname} {self.__dict__}>"


_TORCH_ALLOWED = {"Size", "device", "dtype"}
_BUILTINS_ALLOWED = {"set", "frozenset", "slice", "complex", "bytearray", "range"}


class _Unpickler(pickle.Unpickler):
    """Tensors, containers and numpy scalars as usual; pyannote / Lightning objects as ``_Record``s;
    anything else refused (a checkpoint naming other code is not one this reader knows)."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "collections" and name == "OrderedDict":
            return super().find_class(module, name)
        if module == "torch._utils" and name.startswith("_rebuild_"):
            return super().find_class(module, name)
        if module == "torch" and (name in _TORCH_ALLOWED or name.endswith("Storage")):
            return super().find_class(module, name)
        if module == "builtins" and name in _BUILTINS_ALLOWED:
            return super().find_class(module, name)
        if module in ("numpy", "numpy.core.multiarray", "numpy._core.multiarray") and name in (
            "scalar",
            "dtype",
            "_reconstruct",
            "ndarray",
        ):
            return super().find_class(module, name)
        if module.startswith(("pyannote.", "lightning", "pytorch_lightning", "omegaconf")):
            return type(name, (_Record,), {"qualname": f"{module}.{name}"})
        raise pickle.UnpicklingError(f"a pyannote checkpoint should not name {module}.{name}")


class _PickleModule:
    Unpickler = _Unpickler

    @staticmethod
    def load(f, **kwargs):  # torch's legacy (non-zip) format path
        return _Unpickler(f, **kwargs).load()


@dataclass(frozen=True)
class Specifications:
    """What pyannote's ``Specifications`` record says about a model (the fields oasr reads)."""

    problem: str  # a Problem name: MONO_LABEL_CLASSIFICATION, REPRESENTATION, ...
    resolution: str  # FRAME | CHUNK
    duration: float  # seconds per chunk (the segmentation window)
    classes: list[str] | None = None
    powerset_max_classes: int | None = None
    warm_up: tuple[float, float] = (0.0, 0.0)

    @property
    def powerset(self) -> bool:
        return self.powerset_max_classes is not None and self.problem == "MONO_LABEL_CLASSIFICATION"


@dataclass
class ModelCheckpoint:
    """One model of the pipeline: its class, constructor arguments, specifications and weights."""

    path: Path
    architecture: str  # "module.Class", e.g. pyannote.audio.models.segmentation.PyanNet.PyanNet
    hyper_parameters: dict[str, Any]
    specifications: Specifications | None
    state_dict: dict[str, torch.Tensor]
    version: str | None = None

    @property
    def class_name(self) -> str:
        return self.architecture.rsplit(".", 1)[-1]


def _enum_name(record: Any, names: dict[int, str], what: str) -> str:
    args = getattr(record, "args", ())
    if len(args) == 1 and args[0] in names:
        return names[args[0]]
    raise ValueError(f"unreadable {what} in the checkpoint's specifications: {record!r}")


def _specifications(record: Any) -> Specifications | None:
    if record is None:
        return None
    if isinstance(record, tuple):  # multi-task models: pyannote's diarization pipeline uses single-task ones
        raise ValueError("multi-task pyannote models (a tuple of specifications) are not supported")
    d = getattr(record, "__dict__", {})
    if "duration" not in d:
        raise ValueError(f"unreadable specifications in the checkpoint: {record!r}")
    return Specifications(
        problem=_enum_name(d.get("problem"), _PROBLEMS, "problem"),
        resolution=_enum_name(d.get("resolution"), _RESOLUTIONS, "resolution"),
        duration=float(d["duration"]),
        classes=list(d["classes"]) if d.get("classes") is not None else None,
        powerset_max_classes=d.get("powerset_max_classes"),
        warm_up=tuple(d.get("warm_up") or (0.0, 0.0)),
    )


def read_model_checkpoint(path: str | Path) -> ModelCheckpoint:
    """Read one pyannote ``pytorch_model.bin`` (or the folder holding it)."""
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no pyannote model checkpoint at {path}")
    raw = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_PickleModule)
    if not isinstance(raw, dict) or "state_dict" not in raw or "pyannote.audio" not in raw:
        raise ValueError(f"{path} is not a pyannote.audio checkpoint (no state_dict / pyannote.audio record)")
    record = raw["pyannote.audio"]
    arch = record.get("architecture", {})
    if "module" not in arch or "class" not in arch:
        raise ValueError(f"{path}: the pyannote.audio record names no architecture")
    hparams = raw.get("hyper_parameters") or {}
    if not isinstance(hparams, dict):
        hparams = dict(getattr(hparams, "__dict__", {}))
    return ModelCheckpoint(
        path=path,
        architecture=f"{arch['module']}.{arch['class']}",
        hyper_parameters=dict(hparams),
        specifications=_specifications(record.get("specifications")),
        state_dict={k: v for k, v in raw["state_dict"].items() if isinstance(v, torch.Tensor)},
        version=record.get("versions", {}).get("pyannote.audio"),
    )


@dataclass
class PipelineConfig:
    """``config.yaml`` of a SpeakerDiarization pipeline, its model references resolved to paths."""

    root: Path
    segmentation: Path
    embedding: Path
    plda: Path | None
    clustering: str  # VBxClustering | AgglomerativeClustering
    segmentation_step: float = 0.1  # fraction of the segmentation window
    embedding_exclude_overlap: bool = False
    embedding_batch_size: int = 1
    segmentation_batch_size: int = 1
    params: dict[str, dict[str, Any]] = field(default_factory=dict)


def _resolve(value: Any, root: Path, what: str) -> Path:
    """A model reference of the config: "$model/<subfolder>", a local path, or a dict with
    ``checkpoint`` (and ``subfolder``), as pyannote's ``expand_subfolders`` / ``get_model`` accept."""
    if isinstance(value, dict):
        if "checkpoint" not in value:
            raise ValueError(f"config.yaml: {what} has no 'checkpoint': {value!r}")
        base = _resolve(value["checkpoint"], root, what)
        return base / value["subfolder"] if value.get("subfolder") else base
    if not isinstance(value, str) or not value:
        raise ValueError(f"config.yaml: {what} must be '$model/<subfolder>' or a path, got {value!r}")
    if value.startswith("$model/"):
        sub = value[len("$model/") :].split("@", 1)[0]
        return root / sub
    path = Path(value).expanduser()
    path = path if path.is_absolute() else root / path
    if not path.exists():
        raise FileNotFoundError(
            f"config.yaml: {what} {value!r} is neither '$model/<subfolder>' nor an existing path; "
            "a Hugging Face id must be downloaded and named by its local folder"
        )
    return path


def find_config(path: str | Path) -> Path | None:
    """The pipeline's ``config.yaml`` for a directory or a YAML file, None when there is none."""
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_NAME
    return path if path.is_file() and path.suffix in (".yaml", ".yml") else None


def read_pipeline_config(path: str | Path) -> PipelineConfig:
    """Parse a SpeakerDiarization pipeline's config (a directory holding ``config.yaml``, or the file)."""
    import yaml

    config_path = find_config(path)
    if config_path is None:
        raise FileNotFoundError(f"no pyannote pipeline config.yaml at {path}")
    with open(config_path, encoding="utf-8") as f:
        config = yaml.safe_load(f)
    pipeline = (config or {}).get("pipeline") or {}
    if pipeline.get("name") != PIPELINE_CLASS:
        raise ValueError(f"{config_path}: pipeline.name is {pipeline.get('name')!r}; oasr reads {PIPELINE_CLASS}")
    p = pipeline.get("params") or {}
    root = config_path.parent
    clustering = p.get("clustering", "VBxClustering")
    if clustering not in ("VBxClustering", "AgglomerativeClustering"):
        raise ValueError(
            f"{config_path}: clustering {clustering!r} is not supported "
            "(VBxClustering and AgglomerativeClustering are; KMeans / Oracle need the speaker count or a reference)"
        )
    if "segmentation" not in p or "embedding" not in p:
        raise ValueError(f"{config_path}: pipeline.params needs 'segmentation' and 'embedding'")
    plda = _resolve(p["plda"], root, "plda") if clustering == "VBxClustering" else None
    if plda is None and clustering == "VBxClustering":
        raise ValueError(f"{config_path}: VBxClustering needs a 'plda'")
    return PipelineConfig(
        root=root,
        segmentation=_resolve(p["segmentation"], root, "segmentation"),
        embedding=_resolve(p["embedding"], root, "embedding"),
        plda=plda,
        clustering=clustering,
        segmentation_step=float(p.get("segmentation_step", 0.1)),
        embedding_exclude_overlap=bool(p.get("embedding_exclude_overlap", False)),
        embedding_batch_size=int(p.get("embedding_batch_size", 1)),
        segmentation_batch_size=int(p.get("segmentation_batch_size", 1)),
        params={k: dict(v or {}) for k, v in (config.get("params") or {}).items()},
    )
