"""Qwen2-Audio (speech LLM): a Whisper-geometry audio tower feeding a Qwen2 causal LM,
decoded by the ``llm`` strategy."""

from oasr.models.speech_llm.config import Qwen2AudioConfig, Qwen2AudioEncoderConfig

__all__ = ["Qwen2AudioConfig", "Qwen2AudioEncoderConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "speech_llm",
        "oasr.models.speech_llm.model:Qwen2AudioModel",
        ("oasr.models.speech_llm.convert:HFQwen2AudioConverter",),
        overwrite=True,
    )
