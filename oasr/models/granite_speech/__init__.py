"""Granite Speech (IBM's speech LLM): a conformer encoder, a Q-Former window projector and
a Granite causal LM (its LoRA merged at load), decoded by the ``llm`` strategy."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["GraniteSpeechConfig", "GraniteSpeechEncoderConfig", "QFormerConfig"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.granite_speech.config"))
