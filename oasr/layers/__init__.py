"""Shared building blocks ("the waist"). Every architecture is built from these,
not from bare ``nn.Linear`` / ``nn.LayerNorm`` / ``nn.Embedding``; each has a
plain-PyTorch path that runs anywhere."""

from oasr.layers.activation import ACTIVATIONS, Activation, Gelu, Relu, Silu, Tanh, apply_activation
from oasr.layers.attention import attention, attention_weights, key_padding_mask
from oasr.layers.conformer import ConformerConvolution, FeedForward
from oasr.layers.ctc import CtcProjection
from oasr.layers.embedding import Conv1d, Conv2d, Embedding, sinusoids
from oasr.layers.linear import Linear, LinearActivation
from oasr.layers.norm import BatchNorm1d, LayerNorm, MaskedGroupNorm, RMSNorm
from oasr.layers.recurrent import LSTM
from oasr.layers.relpos import PositionalEncoding, RelPositionalEncoding, RelPositionMultiHeadedAttention
from oasr.layers.relpos_gated import GatedRelativePositionBias
from oasr.layers.relpos_xl import RelPositionMultiHeadAttentionXL, rel_shift, xl_relative_positions
from oasr.layers.rotary import NeoxRotaryEmbedding
from oasr.layers.zipformer import BiasNorm, Bypass, ChunkCausalDepthwiseConv1d, SimpleDownsample

__all__ = [
    "ACTIVATIONS",
    "Activation",
    "BatchNorm1d",
    "BiasNorm",
    "Bypass",
    "ChunkCausalDepthwiseConv1d",
    "ConformerConvolution",
    "Conv1d",
    "Conv2d",
    "CtcProjection",
    "Embedding",
    "FeedForward",
    "GatedRelativePositionBias",
    "Gelu",
    "LayerNorm",
    "LSTM",
    "Linear",
    "LinearActivation",
    "MaskedGroupNorm",
    "NeoxRotaryEmbedding",
    "PositionalEncoding",
    "RelPositionMultiHeadAttentionXL",
    "RelPositionMultiHeadedAttention",
    "RelPositionalEncoding",
    "RMSNorm",
    "Relu",
    "Silu",
    "SimpleDownsample",
    "Tanh",
    "apply_activation",
    "attention",
    "attention_weights",
    "key_padding_mask",
    "rel_shift",
    "sinusoids",
    "xl_relative_positions",
]
