"""WeNet U2 / U2++ conformer: CTC decoding, plus attention rescoring when the
checkpoint"s attention decoder loads."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["ConformerEncoderConfig", "ConformerModelConfig"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.conformer.config"))
