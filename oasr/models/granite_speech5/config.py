"""Granite Speech 5 configuration, in the field names of Hugging Face's
``GraniteSpeech5EncoderConfig`` plus the CTC fields (``vocab_size``, the blank)."""

from __future__ import annotations

from dataclasses import dataclass

from oasr.layers import ACTIVATIONS
from oasr.models.configs import ModelConfig


@dataclass
class GraniteSpeech5Config(ModelConfig):
    """Granite Speech 5's architecture (defaults are granite-speech-5.0-470m-turboctc's).

    Attributes:
        vocab_size: CTC output classes (blank included).
        blank_id: the CTC blank (Hugging Face's ``pad_token_id``).
        hidden_size: model width.
        intermediate_size: feed-forward hidden width.
        num_hidden_layers: conformer blocks.
        num_attention_heads: attention heads (keys and values have as many).
        head_dim: per-head width (``hidden_size // num_attention_heads`` when None).
        num_mel_bins: mel bands of the front end; a feature frame holds 4x as many
            (mel + delta, two frames stacked).
        hidden_act: activation of the feed-forwards (the convolution module's is SiLU).
        max_position_embeddings: largest relative distance of the Shaw table
            (``2 * max_position_embeddings + 1`` rows).
        context_size: frames per attention block.
        conv_kernel_size: depthwise kernel width (odd).
        conv_expansion_factor: convolution-module width over ``hidden_size``.
        subsample_layers: blocks whose convolution has stride 2 (time halved after each).
        attention_bias: whether the feed-forward projections carry biases.
        layer_norm_eps, batch_norm_eps: epsilons of the LayerNorms and the batch norm.
    """

    vocab_size: int = 16384
    blank_id: int = 0
    hidden_size: int = 1024
    intermediate_size: int = 4096
    num_hidden_layers: int = 16
    num_attention_heads: int = 8
    head_dim: int | None = None
    num_mel_bins: int = 80
    hidden_act: str = "silu"
    max_position_embeddings: int = 512
    context_size: int = 128
    conv_kernel_size: int = 7
    conv_expansion_factor: int = 2
    subsample_layers: tuple[int, ...] = (0, 1)
    attention_bias: bool = True
    layer_norm_eps: float = 1e-5
    batch_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(
                    f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}"
                )
            self.head_dim = self.hidden_size // self.num_attention_heads
        self.subsample_layers = tuple(sorted(set(self.subsample_layers)))
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act={self.hidden_act!r} is not one of {sorted(ACTIVATIONS)}")
        if not 0 <= self.blank_id < self.vocab_size:
            raise ValueError(f"blank_id={self.blank_id} is outside the vocabulary of {self.vocab_size}")
        if not 0 < self.context_size <= self.max_position_embeddings:
            raise ValueError(
                f"context_size={self.context_size} must be in "
                f"(0, max_position_embeddings={self.max_position_embeddings}]"
            )
        if self.conv_kernel_size % 2 == 0:
            raise ValueError(f"conv_kernel_size={self.conv_kernel_size} must be odd ('same' padding)")
        if any(not 0 <= i < self.num_hidden_layers for i in self.subsample_layers):
            raise ValueError(
                f"subsample_layers={self.subsample_layers} name blocks outside 0..{self.num_hidden_layers - 1}"
            )

    @property
    def input_dim(self) -> int:
        """Features per input frame: mel and delta of two stacked mel frames."""
        return 4 * self.num_mel_bins

    @property
    def subsampling_rate(self) -> int:
        """Feature frames per encoder frame."""
        return 2 ** len(self.subsample_layers)

    @property
    def self_conditioning_layer(self) -> int:
        """The block after which the mid-layer CTC posteriors are fed back."""
        return self.num_hidden_layers // 2 - 1
