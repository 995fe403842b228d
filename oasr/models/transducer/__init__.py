"""icefall stateless transducer: a Zipformer2 encoder, the stateless predictor and the joiner
(transducer-only releases auto-detect here; hybrids load with ``architecture="transducer"``)."""

from __future__ import annotations

import importlib

__all__ = ["TransducerConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "transducer",
        "oasr.models.transducer.model:TransducerModel",
        (
            "oasr.models.transducer.convert:IcefallTransducerConverter",
            "oasr.models.transducer.convert:IcefallHybridTransducerConverter",
        ),
    )


# The config module loads torch (through the model contract); import it on first use so that
# registering the family (`oasr models`) needs no torch.
_CONFIG_NAMES = ("TransducerConfig",)


def __getattr__(name: str):
    if name in _CONFIG_NAMES:
        return getattr(importlib.import_module("oasr.models.transducer.config"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
