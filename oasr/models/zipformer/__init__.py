"""icefall Zipformer2 with a CTC head (``zipformer`` recipes; hybrid checkpoints too)."""

from __future__ import annotations

import importlib

__all__ = ["ZipformerConfig", "ZipformerEncoderConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "zipformer",
        "oasr.models.zipformer.model:ZipformerCtcModel",
        (
            "oasr.models.zipformer.convert:IcefallConverter",
            "oasr.models.zipformer.convert:IcefallExplicitConverter",
        ),
    )


# The config module loads torch (through the model contract); import it on first use so that
# registering the family (`oasr models`) needs no torch.
_CONFIG_NAMES = ("ZipformerConfig", "ZipformerEncoderConfig")


def __getattr__(name: str):
    if name in _CONFIG_NAMES:
        return getattr(importlib.import_module("oasr.models.zipformer.config"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
