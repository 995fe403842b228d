"""Qwen3-ASR (Qwen team): a windowed audio tower feeding a Qwen3 causal LM, decoded by the
``llm`` strategy. Reads the transformers ``qwen3_asr`` layout and the original release."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["QWEN3_ASR_SIZES", "Qwen3AsrAudioConfig", "Qwen3AsrConfig"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.qwen3_asr.config"))
