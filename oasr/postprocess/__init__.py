"""Text post-processors applied to finished transcripts (docs/architecture.md): punctuation
restoration with FunASR's CT-Transformer (``punctuation.py``)."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["Punctuator", "load_punctuator"]

# torch and the SANM blocks load on first use.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.postprocess.punctuation"))
