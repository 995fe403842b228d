"""Whisper (OpenAI): encoder-decoder ASR, decoded by the ``aed`` strategy."""

from __future__ import annotations

import importlib

__all__ = ["WHISPER_SIZES", "WhisperConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "whisper",
        "oasr.models.whisper.model:WhisperModel",
        (
            "oasr.models.whisper.convert:HFWhisperConverter",
            "oasr.models.whisper.convert:CT2WhisperConverter",
            "oasr.models.whisper.convert:OpenAIWhisperConverter",
        ),
    )


# The config module loads torch (through the model contract); import it on first use so that
# registering the family (`oasr models`) needs no torch.
_CONFIG_NAMES = ("WHISPER_SIZES", "WhisperConfig")


def __getattr__(name: str):
    if name in _CONFIG_NAMES:
        return getattr(importlib.import_module("oasr.models.whisper.config"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
