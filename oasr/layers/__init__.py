"""Shared building blocks ("the waist"). Every architecture is built from these,
not from bare ``nn.Linear`` / ``nn.LayerNorm`` / ``nn.Embedding``; each has a
plain-PyTorch path that runs anywhere."""

from oasr.layers.activation import ACTIVATIONS, Activation, Gelu, Relu, Silu, Tanh, apply_activation
from oasr.layers.attention import attention, attention_weights, key_padding_mask
from oasr.layers.embedding import Conv1d, Embedding, sinusoids
from oasr.layers.linear import Linear, LinearActivation
from oasr.layers.norm import LayerNorm, RMSNorm

__all__ = [
    "ACTIVATIONS",
    "Activation",
    "Conv1d",
    "Embedding",
    "Gelu",
    "LayerNorm",
    "Linear",
    "LinearActivation",
    "RMSNorm",
    "Relu",
    "Silu",
    "Tanh",
    "apply_activation",
    "attention",
    "attention_weights",
    "key_padding_mask",
    "sinusoids",
]
