"""Qwen3-ASR (Qwen team): a windowed audio tower feeding a Qwen3 causal LM, decoded by the
``llm`` strategy. Reads the transformers ``qwen3_asr`` layout and the original release."""

from __future__ import annotations

import importlib

__all__ = ["QWEN3_ASR_SIZES", "Qwen3AsrAudioConfig", "Qwen3AsrConfig", "register"]


def register() -> None:
    """Register the architecture (idempotent: a second call replaces the first)."""
    from oasr.models.registry import register_model

    register_model(
        "qwen3_asr",
        "oasr.models.qwen3_asr.model:Qwen3AsrModel",
        (
            "oasr.models.qwen3_asr.convert:HFQwen3AsrConverter",
            "oasr.models.qwen3_asr.convert:OriginalQwen3AsrConverter",
        ),
        overwrite=True,
    )


# The config module loads torch (through the model contract); import it on first use so that
# registering the family (`oasr models`) needs no torch.
_CONFIG_NAMES = ("QWEN3_ASR_SIZES", "Qwen3AsrAudioConfig", "Qwen3AsrConfig")


def __getattr__(name: str):
    if name in _CONFIG_NAMES:
        return getattr(importlib.import_module("oasr.models.qwen3_asr.config"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
