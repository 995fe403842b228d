"""Qwen2-Audio (speech LLM): a Whisper-geometry audio tower feeding a Qwen2 causal LM,
decoded by the ``llm`` strategy."""

from __future__ import annotations

import importlib

__all__ = ["Qwen2AudioConfig", "Qwen2AudioEncoderConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "speech_llm",
        "oasr.models.speech_llm.model:Qwen2AudioModel",
        ("oasr.models.speech_llm.convert:HFQwen2AudioConverter",),
        overwrite=True,
    )


# The config module loads torch (through the model contract); import it on first use so that
# registering the family (`oasr models`) needs no torch.
_CONFIG_NAMES = ("Qwen2AudioConfig", "Qwen2AudioEncoderConfig")


def __getattr__(name: str):
    if name in _CONFIG_NAMES:
        return getattr(importlib.import_module("oasr.models.speech_llm.config"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
