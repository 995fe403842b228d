"""The model layer: contract, capabilities, registry, loaders and families."""

from __future__ import annotations

import importlib
import importlib.util

# name -> defining module; imported on first access so that the registry listing needs no torch
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(
        ("BaseAsrModel", "BaseEncoder", "CacheSpec", "DecodeType", "LoadError", "LoadReport", "StreamStateSpec"),
        "oasr.models.base",
    ),
    **dict.fromkeys(("ModelConfig", "coerce_config"), "oasr.models.configs"),
    **dict.fromkeys(("CAPABILITIES", "CapabilityError", "require_capability"), "oasr.models.interfaces"),
    **dict.fromkeys(("LoadedModel", "from_pretrained", "load_pretrained"), "oasr.models.loaders"),
    **dict.fromkeys(
        (
            "CheckpointBundle",
            "CheckpointConverter",
            "build_model_from_checkpoint",
            "list_models",
            "load_checkpoint_bundle",
            "register_model",
        ),
        "oasr.models.registry",
    ),
}

__all__ = [
    "CAPABILITIES",
    "BaseAsrModel",
    "BaseEncoder",
    "CacheSpec",
    "CapabilityError",
    "CheckpointBundle",
    "CheckpointConverter",
    "DecodeType",
    "LoadError",
    "LoadReport",
    "LoadedModel",
    "ModelConfig",
    "StreamStateSpec",
    "build_model_from_checkpoint",
    "coerce_config",
    "from_pretrained",
    "list_models",
    "load_checkpoint_bundle",
    "load_pretrained",
    "register_model",
    "require_capability",
]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")  # a submodule, as eager imports left it
        raise AttributeError(f"module 'oasr.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
