"""FunASR Paraformer / BiCifParaformer: SANM encoder, CIF predictor, non-autoregressive
SANM decoder, decoded by the ``paraformer`` strategy with CIF timestamps."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["CifPredictorConfig", "ParaformerConfig", "SanmDecoderConfig", "SanmEncoderConfig"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.paraformer.config"))
