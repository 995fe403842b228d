"""Granite Speech 5 (Hugging Face ``granite_speech5_ctc``, IBM's TurboCTC): a conformer-CTC
encoder with block-wise Shaw attention, stride-2 convolution blocks and self-conditioned CTC,
decoded by the ``ctc`` strategy."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["GraniteSpeech5Config"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.granite_speech5.config"))
