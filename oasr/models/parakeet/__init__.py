"""Parakeet (NVIDIA FastConformer + CTC, RNN-T, TDT or hybrid transducer + CTC; Hugging Face
``parakeet_ctc`` / ``parakeet_rnnt`` / ``parakeet_tdt`` layouts and NeMo ``.nemo`` archives)."""

from __future__ import annotations

import importlib

__all__ = ["ParakeetConfig", "ParakeetEncoderConfig", "ParakeetHybridConfig", "ParakeetTransducerConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "parakeet",
        "oasr.models.parakeet.model:ParakeetCtcModel",
        ("oasr.models.parakeet.convert:HFParakeetConverter", "oasr.models.parakeet.convert_nemo:NemoParakeetConverter"),
    )
    # Transducer checkpoints are detected through "parakeet" (its converter routes them here).
    register_model(
        "parakeet_transducer",
        "oasr.models.parakeet.model:ParakeetTransducerModel",
        (
            "oasr.models.parakeet.convert:HFParakeetTransducerConverter",
            "oasr.models.parakeet.convert_nemo:NemoParakeetTransducerConverter",
        ),
    )
    register_model(
        "parakeet_hybrid",
        "oasr.models.parakeet.model:ParakeetHybridModel",
        ("oasr.models.parakeet.convert_nemo:NemoParakeetHybridConverter",),
    )


# The config module loads torch (through the model contract); import it on first use so that
# registering the family (`oasr models`) needs no torch.
_CONFIG_NAMES = ("ParakeetConfig", "ParakeetEncoderConfig", "ParakeetHybridConfig", "ParakeetTransducerConfig")


def __getattr__(name: str):
    if name in _CONFIG_NAMES:
        return getattr(importlib.import_module("oasr.models.parakeet.config"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
