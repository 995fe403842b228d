"""Nemotron 3.5 ASR configuration (Hugging Face ``nemotron3_5_asr`` layout).

Field names follow transformers' ``Nemotron3_5AsrConfig`` and its
``NemotronAsrStreamingEncoderConfig`` so a ``config.json`` maps onto them one to one;
training-only fields (dropouts, layerdrop, initializer range) are not kept. The prompt
table (language -> prompt id) comes from the directory's ``processor_config.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oasr.models.configs import ModelConfig
from oasr.models.parakeet.config import ParakeetEncoderConfig


@dataclass
class NemotronEncoderConfig(ParakeetEncoderConfig):
    """The cache-aware FastConformer encoder: Parakeet's fields plus the trained attention window.

    Attributes:
        sliding_window: keys a query may see to its left, itself included (left context + 1).
        default_num_lookahead_tokens: right context; the ``chunked_limited`` chunk is
            ``default_num_lookahead_tokens + 1`` frames.
    """

    sliding_window: int = 71
    default_num_lookahead_tokens: int = 13

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sliding_window < 1:
            raise ValueError(f"sliding_window={self.sliding_window} must be >= 1")
        if self.default_num_lookahead_tokens < 0:
            raise ValueError(f"default_num_lookahead_tokens={self.default_num_lookahead_tokens} must be >= 0")

    @property
    def attention_chunk(self) -> int:
        """Frames of one ``chunked_limited`` chunk (lookahead + 1)."""
        return self.default_num_lookahead_tokens + 1

    @property
    def left_chunks(self) -> int:
        """Whole chunks a query sees before its own."""
        return (self.sliding_window - 1) // self.attention_chunk


@dataclass
class NemotronConfig(ModelConfig):
    """FastConformer encoder + language-prompt projector + LSTM RNN-T.

    Attributes:
        encoder: the encoder.
        vocab_size: joint output width, blank included.
        blank_id: the RNN-T blank (past the tokenizer's pieces).
        decoder_hidden_size: predictor and joint width.
        num_decoder_layers: LSTM layers.
        max_symbols_per_step: labels greedy search may emit on one frame.
        num_prompts: prompt slots of the one-hot the projector was trained on (0: no prompt
            projector, the English ``nemotron_asr_streaming`` release).
        prompt_intermediate_size: hidden width of the prompt projector.
        default_prompt_id: the prompt used when a request names no language.
        prompt_dictionary: language string -> prompt id (the checkpoint's processor table).
    """

    encoder: NemotronEncoderConfig = field(default_factory=NemotronEncoderConfig)
    vocab_size: int = 13088
    blank_id: int = 13087
    decoder_hidden_size: int = 640
    num_decoder_layers: int = 2
    max_symbols_per_step: int = 10
    num_prompts: int = 128
    prompt_intermediate_size: int = 2048
    default_prompt_id: int = 101
    prompt_dictionary: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.blank_id < self.vocab_size:
            raise ValueError(f"blank_id={self.blank_id} is outside the vocabulary (size {self.vocab_size})")
        if self.num_prompts < 0:
            raise ValueError(f"num_prompts={self.num_prompts} must be >= 0")
        if self.num_prompts and not 0 <= self.default_prompt_id < self.num_prompts:
            raise ValueError(f"default_prompt_id={self.default_prompt_id} is not one of {self.num_prompts} prompts")
        bad = {k: v for k, v in self.prompt_dictionary.items() if not 0 <= v < self.num_prompts}
        if bad:
            raise ValueError(f"prompt_dictionary ids {bad} are outside the {self.num_prompts} prompts")
        if self.max_symbols_per_step < 1:
            raise ValueError(f"max_symbols_per_step={self.max_symbols_per_step} must be >= 1")
