"""Parakeet (NVIDIA FastConformer + CTC, RNN-T, TDT or hybrid transducer + CTC; Hugging Face
``parakeet_ctc`` / ``parakeet_rnnt`` / ``parakeet_tdt`` layouts and NeMo ``.nemo`` archives)."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["ParakeetConfig", "ParakeetEncoderConfig", "ParakeetHybridConfig", "ParakeetTransducerConfig"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.parakeet.config"))
