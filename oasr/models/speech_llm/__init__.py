"""Qwen2-Audio (speech LLM): a Whisper-geometry audio tower feeding a Qwen2 causal LM,
decoded by the ``llm`` strategy."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["Qwen2AudioConfig", "Qwen2AudioEncoderConfig"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.speech_llm.config"))
