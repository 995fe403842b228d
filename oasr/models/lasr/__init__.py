"""LASR (Google"s MedASR, Hugging Face ``lasr``): conformer-CTC with rotary attention,
decoded by the ``ctc`` strategy."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["LasrConfig"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.lasr.config"))
