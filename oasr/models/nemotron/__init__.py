"""Nemotron 3.5 ASR (NVIDIA cache-aware FastConformer + language prompt + LSTM RNN-T,
Hugging Face ``nemotron3_5_asr`` layout)."""

from __future__ import annotations

import importlib

__all__ = ["NemotronConfig", "NemotronEncoderConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "nemotron",
        "oasr.models.nemotron.model:NemotronRnntModel",
        ("oasr.models.nemotron.convert:HFNemotronConverter",),
    )


# The config module loads torch (through the model contract); import it on first use so that
# registering the family (`oasr models`) needs no torch.
_CONFIG_NAMES = ("NemotronConfig", "NemotronEncoderConfig")


def __getattr__(name: str):
    if name in _CONFIG_NAMES:
        return getattr(importlib.import_module("oasr.models.nemotron.config"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
