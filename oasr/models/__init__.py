"""The model layer: contract, capabilities, registry, loaders and families."""

from oasr.models.base import (
    BaseAsrModel,
    BaseEncoder,
    CacheSpec,
    DecodeType,
    LoadError,
    LoadReport,
    StreamStateSpec,
    coerce_config,
)
from oasr.models.interfaces import CAPABILITIES, CapabilityError, require_capability
from oasr.models.loaders import LoadedModel, from_pretrained, load_pretrained
from oasr.models.registry import (
    CheckpointBundle,
    CheckpointConverter,
    build_model_from_checkpoint,
    list_models,
    load_checkpoint_bundle,
    register_model,
)

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
