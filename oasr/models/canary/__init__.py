"""Canary (NVIDIA ``EncDecMultiTaskModel``: FastConformer encoder + transformer decoder, prompted
for source / target language, punctuation and, in ``canary2``, ITN / timestamps / diarisation),
read from NeMo ``.nemo`` archives."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["CanaryConfig", "CanaryDecoderConfig"]

__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.canary.config"))
