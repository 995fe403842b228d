"""Canary's config: a Parakeet FastConformer encoder, NeMo's transformer decoder and head, the
prompt format and the aggregate tokenizer's pieces."""

from __future__ import annotations

from dataclasses import dataclass, field

from oasr.models.configs import ModelConfig
from oasr.models.parakeet.config import ParakeetEncoderConfig

PROMPT_FORMATS = ("canary", "canary2")


@dataclass
class CanaryDecoderConfig(ModelConfig):
    """NeMo's ``TransformerDecoderNM`` (``transf_decoder.config_dict``) and ``TokenClassifier`` head.

    Attributes:
        vocab_size: decoder / head rows (the tokenizer's size rounded up to a multiple of 8).
        hidden_size / inner_size / num_layers / num_attention_heads: the decoder's geometry.
        max_sequence_length: positions of the fixed sine table (NeMo's decoding caps a
            transcript there).
        hidden_act: the feed-forward activation (``relu`` or ``gelu``).
        pre_ln: pre-LayerNorm blocks (with a final LayerNorm when ``pre_ln_final_layer_norm``).
        encoder_hidden: the encoder's width (a linear projection when it differs).
    """

    vocab_size: int
    hidden_size: int = 1024
    inner_size: int = 4096
    num_layers: int = 4
    num_attention_heads: int = 8
    max_sequence_length: int = 512
    hidden_act: str = "relu"
    pre_ln: bool = True
    pre_ln_final_layer_norm: bool = True
    encoder_hidden: int = 1024

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}"
            )
        if self.hidden_act not in ("relu", "gelu"):
            raise ValueError(f"hidden_act={self.hidden_act!r} is not NeMo's relu or gelu")


@dataclass
class CanaryConfig(ModelConfig):
    """A Canary checkpoint.

    Attributes:
        encoder: the FastConformer encoder.
        decoder: the transformer decoder and head.
        prompt_format: ``canary`` (canary-1b) or ``canary2`` (canary-1b-flash, -180m-flash, 1b-v2).
        tokenizers: the aggregate tokenizer's parts in id order: (name, SentencePiece model path),
            ``spl_tokens`` (the prompt tokens) first, then one per language.
        prompt_defaults: the archive's ``prompt_defaults`` user slots (slot -> value).
        decoding: NeMo's ``decoding`` defaults read by the search (``strategy``, ``beam_size``,
            ``length_penalty``, ``max_generation_delta``).
        window_stride: the front end's hop in seconds (``preprocessor.window_stride``): a frame
            token ``<|N|>`` is at N * window_stride * the encoder's subsampling.
    """

    encoder: ParakeetEncoderConfig
    decoder: CanaryDecoderConfig
    prompt_format: str = "canary2"
    tokenizers: tuple[tuple[str, str], ...] = ()
    prompt_defaults: dict[str, str] = field(default_factory=dict)
    decoding: dict[str, float | int | str] = field(default_factory=dict)
    window_stride: float = 0.01

    def __post_init__(self) -> None:
        if self.prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format={self.prompt_format!r} is not implemented (supported: {PROMPT_FORMATS})")
