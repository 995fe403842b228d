"""wav2vec2-family configuration, in the field names of Hugging Face's ``Wav2Vec2Config``
(``HubertConfig`` and ``Data2VecAudioConfig`` differ only where noted)."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from oasr.layers import ACTIVATIONS
from oasr.models.configs import ModelConfig

POS_CONV_STYLES = ("wav2vec2", "data2vec")


@dataclass
class Wav2Vec2Config(ModelConfig):
    """One wav2vec2-family encoder and its CTC head (defaults are facebook/wav2vec2-base-960h's).

    Attributes:
        model_type: the checkpoint's ``model_type`` ("wav2vec2", "hubert", "data2vec-audio"),
            for messages and for the families that build on this one.
        vocab_size: CTC output classes (blank included).
        blank_id: the CTC blank (transformers' ``pad_token_id``, which its CTC decoding drops).
        hidden_size, num_hidden_layers, num_attention_heads, intermediate_size: the transformer.
        hidden_act: activation of the feed-forwards.
        layer_norm_eps: epsilon of the transformer's and the projection's LayerNorms.
        feat_extract_norm: "group" (a GroupNorm over time on the first conv layer only) or
            "layer" (a LayerNorm over channels after every conv layer).
        feat_extract_activation: activation of the conv layers and the position convolution.
        conv_dim, conv_stride, conv_kernel: the waveform conv layers (unpadded).
        conv_bias: whether the waveform conv layers carry biases.
        feat_proj_layer_norm: a LayerNorm ahead of the feature projection (HuBERT may omit it).
        pos_conv_style: "wav2vec2" (one weight-normed grouped convolution, HuBERT's too) or
            "data2vec" (``pos_conv_layers`` grouped convolutions, each followed by a LayerNorm
            without parameters and the activation).
        pos_conv_kernel: kernel width of the position convolution(s) (an even one drops its
            last output frame, as transformers' ``SamePad``).
        pos_conv_groups: groups of the position convolution(s).
        pos_conv_layers: how many position convolutions ("data2vec" style; 1 otherwise).
        pos_conv_batch_norm: a BatchNorm ahead of the position convolution, which then has no
            weight norm (HuBERT's ``conv_pos_batch_norm``).
        do_stable_layer_norm: pre-norm layers and a final LayerNorm (large checkpoints) rather
            than a LayerNorm ahead of post-norm layers.
    """

    model_type: str = "wav2vec2"
    vocab_size: int = 32
    blank_id: int = 0
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-5
    feat_extract_norm: str = "group"
    feat_extract_activation: str = "gelu"
    conv_dim: tuple[int, ...] = (512, 512, 512, 512, 512, 512, 512)
    conv_stride: tuple[int, ...] = (5, 2, 2, 2, 2, 2, 2)
    conv_kernel: tuple[int, ...] = (10, 3, 3, 3, 3, 2, 2)
    conv_bias: bool = False
    feat_proj_layer_norm: bool = True
    pos_conv_style: str = "wav2vec2"
    pos_conv_kernel: int = 128
    pos_conv_groups: int = 16
    pos_conv_layers: int = 1
    pos_conv_batch_norm: bool = False
    do_stable_layer_norm: bool = False

    def __post_init__(self) -> None:
        self.conv_dim, self.conv_stride, self.conv_kernel = (
            tuple(int(v) for v in self.conv_dim),
            tuple(int(v) for v in self.conv_stride),
            tuple(int(v) for v in self.conv_kernel),
        )
        if not len(self.conv_dim) == len(self.conv_stride) == len(self.conv_kernel) > 0:
            raise ValueError(
                f"conv_dim, conv_stride and conv_kernel must have one entry per conv layer, got "
                f"{len(self.conv_dim)}, {len(self.conv_stride)} and {len(self.conv_kernel)}"
            )
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}"
            )
        for name in ("hidden_act", "feat_extract_activation"):
            if getattr(self, name) not in ACTIVATIONS:
                raise ValueError(f"{name}={getattr(self, name)!r} is not one of {sorted(ACTIVATIONS)}")
        if self.feat_extract_norm not in ("group", "layer"):
            raise ValueError(f"feat_extract_norm={self.feat_extract_norm!r} is not 'group' or 'layer'")
        if self.pos_conv_style not in POS_CONV_STYLES:
            raise ValueError(f"pos_conv_style={self.pos_conv_style!r} is not one of {POS_CONV_STYLES}")
        if self.hidden_size % self.pos_conv_groups:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by pos_conv_groups={self.pos_conv_groups}"
            )
        if self.pos_conv_layers < 1 or (self.pos_conv_style == "wav2vec2" and self.pos_conv_layers != 1):
            raise ValueError(
                f"pos_conv_layers={self.pos_conv_layers}: 'wav2vec2' style has exactly one, 'data2vec' >= 1"
            )
        if not 0 <= self.blank_id < self.vocab_size:
            raise ValueError(f"blank_id={self.blank_id} is outside the vocabulary of {self.vocab_size}")

    @property
    def input_dim(self) -> int:
        """Features per input frame: one, the waveform's sample."""
        return 1

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def subsampling_rate(self) -> int:
        """Waveform samples per encoder frame (the product of the conv strides)."""
        return prod(self.conv_stride)

    def output_lengths(self, lengths):
        """Encoder frames of ``lengths`` samples (ints or a tensor; too short -> 0)."""
        for k, s in zip(self.conv_kernel, self.conv_stride):
            lengths = (lengths - k) // s + 1
        return lengths.clamp(min=0) if hasattr(lengths, "clamp") else max(int(lengths), 0)

    @property
    def receptive_field(self) -> int:
        """Fewest samples that give one encoder frame."""
        n = 1
        for k, s in reversed(list(zip(self.conv_kernel, self.conv_stride))):
            n = (n - 1) * s + k
        return n
