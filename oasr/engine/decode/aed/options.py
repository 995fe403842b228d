"""The options the Whisper (``aed``) strategy reads, with faster-whisper's defaults."""

from __future__ import annotations

from dataclasses import dataclass

from oasr.engine.config import StrategyOptions


@dataclass(frozen=True)
class WhisperOptions(StrategyOptions):
    """faster-whisper's ``WhisperModel.transcribe`` defaults (what its users get by default);
    the meaning of each field is in ``TranscribeOptions``."""

    beam_size: int = 5
    best_of: int = 5
    patience: float = 1.0
    length_penalty: float = 1.0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    temperature: float | tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    compression_ratio_threshold: float | None = 2.4
    log_prob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    condition_on_previous_text: bool = True
    prompt_reset_on_temperature: float = 0.5
    initial_prompt: str | tuple[int, ...] | None = None
    prefix: str | None = None
    suppress_blank: bool = True
    suppress_tokens: tuple[int, ...] | None = (-1,)
    without_timestamps: bool = False
    max_initial_timestamp: float = 1.0
    prepend_punctuations: str = "\"'“¿([{-"
    append_punctuations: str = "\"'.。,，!！?？:：”)]}、"
    max_new_tokens: int | None = None
    language_detection_threshold: float | None = 0.5
    language_detection_segments: int = 1
    hallucination_silence_threshold: float | None = None
    multilingual: bool = False
    seed: int | None = None  # a fresh seed per request, as CTranslate2 draws one
