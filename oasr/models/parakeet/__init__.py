"""Parakeet (NVIDIA FastConformer + CTC, RNN-T or TDT; Hugging Face ``parakeet_ctc`` /
``parakeet_rnnt`` / ``parakeet_tdt`` layouts)."""

from oasr.models.parakeet.config import ParakeetConfig, ParakeetEncoderConfig, ParakeetTransducerConfig

__all__ = ["ParakeetConfig", "ParakeetEncoderConfig", "ParakeetTransducerConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "parakeet",
        "oasr.models.parakeet.model:ParakeetCtcModel",
        ("oasr.models.parakeet.convert:HFParakeetConverter",),
    )
    # Transducer checkpoints are detected through "parakeet" (its converter routes them here).
    register_model(
        "parakeet_transducer",
        "oasr.models.parakeet.model:ParakeetTransducerModel",
        ("oasr.models.parakeet.convert:HFParakeetTransducerConverter",),
    )
