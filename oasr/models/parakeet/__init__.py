"""Parakeet CTC (NVIDIA FastConformer + CTC, Hugging Face ``parakeet_ctc`` layout)."""

from oasr.models.parakeet.config import ParakeetConfig, ParakeetEncoderConfig

__all__ = ["ParakeetConfig", "ParakeetEncoderConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "parakeet",
        "oasr.models.parakeet.model:ParakeetCtcModel",
        ("oasr.models.parakeet.convert:HFParakeetConverter",),
    )
