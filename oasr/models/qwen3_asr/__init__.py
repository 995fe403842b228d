"""Qwen3-ASR (Qwen team): a windowed audio tower feeding a Qwen3 causal LM, decoded by the
``llm`` strategy. Reads the transformers ``qwen3_asr`` layout and the original release."""

from oasr.models.qwen3_asr.config import QWEN3_ASR_SIZES, Qwen3AsrAudioConfig, Qwen3AsrConfig

__all__ = ["QWEN3_ASR_SIZES", "Qwen3AsrAudioConfig", "Qwen3AsrConfig", "register"]


def register() -> None:
    """Register the architecture (idempotent: a second call replaces the first)."""
    from oasr.models.registry import register_model

    register_model(
        "qwen3_asr",
        "oasr.models.qwen3_asr.model:Qwen3AsrModel",
        (
            "oasr.models.qwen3_asr.convert:HFQwen3AsrConverter",
            "oasr.models.qwen3_asr.convert:OriginalQwen3AsrConverter",
        ),
        overwrite=True,
    )
