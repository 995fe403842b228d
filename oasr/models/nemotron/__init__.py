"""Nemotron 3.5 ASR (NVIDIA cache-aware FastConformer + language prompt + LSTM RNN-T,
Hugging Face ``nemotron3_5_asr`` layout)."""

from oasr.models.nemotron.config import NemotronConfig, NemotronEncoderConfig

__all__ = ["NemotronConfig", "NemotronEncoderConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "nemotron",
        "oasr.models.nemotron.model:NemotronRnntModel",
        ("oasr.models.nemotron.convert:HFNemotronConverter",),
    )
