"""LASR (MedASR) configuration: a conformer-CTC encoder with RoPE attention and
scaled residuals, in the field names of Hugging Face's ``LasrEncoderConfig`` plus the
two ``LasrCTCConfig`` fields the CTC head needs."""

from __future__ import annotations

from dataclasses import dataclass

from oasr.layers import ACTIVATIONS
from oasr.models.configs import ModelConfig


@dataclass
class LasrConfig(ModelConfig):
    """LASR's architecture (defaults are google/medasr's).

    Attributes:
        vocab_size: CTC output classes (blank included).
        blank_id: the CTC blank (Hugging Face's ``pad_token_id``; MedASR's ``<epsilon>``).
        hidden_size: model width.
        num_hidden_layers: conformer blocks.
        num_attention_heads: attention heads (keys and values have as many).
        head_dim: per-head width (``hidden_size // num_attention_heads`` when None).
        intermediate_size: feed-forward hidden width.
        hidden_act: activation of the feed-forwards and of the convolution module.
        attention_bias: whether the attention and feed-forward projections carry biases.
        convolution_bias: whether the convolution module's convolutions carry biases.
        conv_kernel_size: depthwise kernel width (32: even, padded 15 left / 16 right).
        num_mel_bins: input features per frame.
        subsampling_conv_channels: output channels of the second subsampling convolution.
        subsampling_conv_kernel_size, subsampling_conv_stride: the two subsampling
            convolutions (unpadded), 4x downsampling with stride 2.
        max_position_embeddings: positions the rotary table was trained for.
        rope_theta: rotary base.
        layer_norm_eps: epsilon of every (bias-free) LayerNorm.
        batch_norm_eps: epsilon of the convolution module's batch norm.
        feed_forward_residual_weights: (residual, branch) scales of both feed-forwards.
        conv_residual_weights: (residual, branch) scales of the convolution module.
    """

    vocab_size: int = 512
    blank_id: int = 0
    hidden_size: int = 512
    num_hidden_layers: int = 17
    num_attention_heads: int = 8
    head_dim: int | None = None
    intermediate_size: int = 2048
    hidden_act: str = "silu"
    attention_bias: bool = False
    convolution_bias: bool = False
    conv_kernel_size: int = 32
    num_mel_bins: int = 128
    subsampling_conv_channels: int = 256
    subsampling_conv_kernel_size: int = 5
    subsampling_conv_stride: int = 2
    max_position_embeddings: int = 10000
    rope_theta: float = 10000.0
    layer_norm_eps: float = 1e-6
    batch_norm_eps: float = 1e-5
    feed_forward_residual_weights: tuple[float, float] = (1.5, 0.5)
    conv_residual_weights: tuple[float, float] = (2.0, 1.0)

    def __post_init__(self) -> None:
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(
                    f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}"
                )
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.head_dim % 2:
            raise ValueError(f"rotary attention needs an even head_dim, got {self.head_dim}")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act={self.hidden_act!r} is not one of {sorted(ACTIVATIONS)}")
        if not 0 <= self.blank_id < self.vocab_size:
            raise ValueError(f"blank_id={self.blank_id} is outside the vocabulary of {self.vocab_size}")
        if self.subsampling_conv_stride < 1 or self.subsampling_conv_kernel_size < 1:
            raise ValueError("subsampling kernel and stride must be positive")

    @property
    def subsampling_rate(self) -> int:
        """Feature frames per encoder frame (two strided convolutions)."""
        return self.subsampling_conv_stride**2

    def output_lengths(self, lengths):
        """Encoder frames of ``lengths`` feature frames (ints or a tensor; negative -> 0)."""
        k, s = self.subsampling_conv_kernel_size, self.subsampling_conv_stride
        for _ in range(2):
            lengths = (lengths - k) // s + 1
        return lengths.clamp(min=0) if hasattr(lengths, "clamp") else max(int(lengths), 0)

    @property
    def min_input_frames(self) -> int:
        """Fewest feature frames that give one encoder frame."""
        k, s = self.subsampling_conv_kernel_size, self.subsampling_conv_stride
        return k + (k - 1) * s
