"""LASR (Google's MedASR, Hugging Face ``lasr``): conformer-CTC with rotary attention,
decoded by the ``ctc`` strategy."""

from __future__ import annotations

import importlib

__all__ = ["LasrConfig", "register"]


def register() -> None:
    """Register the "lasr" architecture (idempotent: a second call re-registers the same references)."""
    from oasr.models.registry import register_model

    register_model(
        "lasr",
        "oasr.models.lasr.model:LasrModel",
        ("oasr.models.lasr.convert:HFLasrConverter",),
        overwrite=True,
    )


# The config module loads torch (through the model contract); import it on first use so that
# registering the family (`oasr models`) needs no torch.
_CONFIG_NAMES = ("LasrConfig",)


def __getattr__(name: str):
    if name in _CONFIG_NAMES:
        return getattr(importlib.import_module("oasr.models.lasr.config"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
