"""WeNet U2 / U2++ conformer: CTC decoding, plus attention rescoring when the
checkpoint's attention decoder loads."""

from __future__ import annotations

import importlib

__all__ = ["ConformerEncoderConfig", "ConformerModelConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "conformer",
        "oasr.models.conformer.model:ConformerModel",
        ("oasr.models.conformer.convert:WenetConverter",),
    )


# The config module loads torch (through the model contract); import it on first use so that
# registering the family (`oasr models`) needs no torch.
_CONFIG_NAMES = ("ConformerEncoderConfig", "ConformerModelConfig")


def __getattr__(name: str):
    if name in _CONFIG_NAMES:
        return getattr(importlib.import_module("oasr.models.conformer.config"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
