"""icefall stateless transducer: a Zipformer2 encoder, the stateless predictor and the joiner
(transducer-only releases auto-detect here; hybrids load with ``architecture="transducer"``)."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["TransducerConfig"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.transducer.config"))
