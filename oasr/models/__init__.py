"""The model layer: contract, capabilities, registry, loaders and families."""

from __future__ import annotations

from oasr.lazy import lazy_exports

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
    # Whisper in sherpa-onnx's ONNX layout, for `oasr models export-sherpa-onnx` and `oasr bench --peer sherpa-onnx`
    "export_sherpa_onnx": "oasr.models.whisper.export_onnx",
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
    "export_sherpa_onnx",
    "from_pretrained",
    "list_models",
    "load_checkpoint_bundle",
    "load_pretrained",
    "register_model",
    "require_capability",
]


__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
