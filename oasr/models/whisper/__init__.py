"""Whisper (OpenAI): encoder-decoder ASR, decoded by the ``aed`` strategy."""

from oasr.models.whisper.config import WHISPER_SIZES, WhisperConfig

__all__ = ["WHISPER_SIZES", "WhisperConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "whisper",
        "oasr.models.whisper.model:WhisperModel",
        (
            "oasr.models.whisper.convert:HFWhisperConverter",
            "oasr.models.whisper.convert:CT2WhisperConverter",
            "oasr.models.whisper.convert:OpenAIWhisperConverter",
        ),
    )
