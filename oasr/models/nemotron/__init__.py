"""Nemotron 3.5 ASR (NVIDIA cache-aware FastConformer + language prompt + LSTM RNN-T,
Hugging Face ``nemotron3_5_asr`` layout)."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["NemotronConfig", "NemotronEncoderConfig"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.nemotron.config"))
