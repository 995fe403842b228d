"""Moonshine Streaming (Useful Sensors): a sliding-window "ergodic" encoder over 5-ms frames of
the raw waveform, and a rotary decoder with cross-attention, decoded by the ``llm`` strategy.
Reads the transformers ``moonshine_streaming`` layout."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["MoonshineStreamingConfig"]

# The config module loads no torch; it is still imported on first use, as every family's is.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.moonshine_streaming.config"))
