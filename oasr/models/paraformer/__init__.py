"""FunASR Paraformer / BiCifParaformer: SANM encoder, CIF predictor, non-autoregressive
SANM decoder, decoded by the ``paraformer`` strategy with CIF timestamps."""

from __future__ import annotations

import importlib

__all__ = ["CifPredictorConfig", "ParaformerConfig", "SanmDecoderConfig", "SanmEncoderConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "paraformer",
        "oasr.models.paraformer.model:ParaformerModel",
        ("oasr.models.paraformer.convert:FunasrParaformerConverter",),
    )


# The config module loads torch (through the model contract); import it on first use so that
# registering the family (`oasr models`) needs no torch.
_CONFIG_NAMES = ("CifPredictorConfig", "ParaformerConfig", "SanmDecoderConfig", "SanmEncoderConfig")


def __getattr__(name: str):
    if name in _CONFIG_NAMES:
        return getattr(importlib.import_module("oasr.models.paraformer.config"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
