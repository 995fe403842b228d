"""Voxtral (Mistral's speech LLM): a Whisper-style audio tower over 30-s windows, a
two-layer projector over groups of four frames, and a Mistral (Llama) causal LM, decoded
by the ``llm`` strategy."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["VoxtralConfig", "VoxtralEncoderConfig"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.voxtral.config"))
