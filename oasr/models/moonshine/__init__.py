"""Moonshine (Useful Sensors): a small encoder-decoder over the raw waveform (a conv front, no mel,
no 30-s padding: a clip costs its length), decoded by the ``llm`` strategy. Reads the transformers
``moonshine`` layout (``MoonshineForConditionalGeneration``)."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["MoonshineConfig"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.moonshine.config"))
