"""Autoregressive encoder-decoder (Whisper-style) decoding."""

from oasr.engine.decode.aed.strategy import AedDecodeStrategy

__all__ = ["AedDecodeStrategy"]
