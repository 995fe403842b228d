"""Parakeet CTC configuration (NVIDIA FastConformer, Hugging Face ``parakeet_ctc`` layout).

Field names follow the Hugging Face ``ParakeetEncoderConfig`` / ``ParakeetCTCConfig``
so a ``config.json`` maps onto them one to one; training-only fields (dropouts,
layerdrop, initializer range, loss reduction) are not kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oasr.layers.activation import ACTIVATIONS
from oasr.models.configs import ModelConfig

ATTENTION_MODELS = ("rel_pos", "rel_pos_local_attn")


def check_attention(attention_model: str, att_context_size: tuple[int, int]) -> None:
    """Refuse an attention model or context oasr does not implement.

    Raises:
        ValueError: naming the value: another model, a context that is not two integers, a
            local attention without a positive context, or a band with one side unlimited.
    """
    if attention_model not in ATTENTION_MODELS:
        raise ValueError(f"attention_model={attention_model!r} is not one of {ATTENTION_MODELS}")
    if len(att_context_size) != 2 or not all(isinstance(c, int) for c in att_context_size):
        raise ValueError(f"att_context_size={att_context_size!r} is not (left, right)")
    left, right = att_context_size
    full = left < 0 and right < 0
    if attention_model == "rel_pos_local_attn" and (min(left, right) < 0 or max(left, right) == 0):
        raise ValueError(
            f"attention_model='rel_pos_local_attn' needs att_context_size=(left, right) >= 0, not both 0 "
            f"(e.g. (128, 128)); got {att_context_size}"
        )
    if not full and min(left, right) < 0:
        raise ValueError(f"att_context_size={att_context_size}: a band with one side unlimited is not implemented")


@dataclass
class ParakeetEncoderConfig(ModelConfig):
    """The FastConformer encoder.

    Attributes:
        hidden_size: model width D.
        num_hidden_layers: conformer blocks.
        num_attention_heads: attention heads.
        intermediate_size: feed-forward hidden width.
        hidden_act: feed-forward and convolution-module activation.
        attention_bias: biases on the attention and feed-forward projections.
        convolution_bias: biases on the convolution-module convolutions.
        conv_kernel_size: depthwise kernel of the convolution module (odd).
        subsampling_factor: time reduction of the front end (a power of the stride).
        subsampling_conv_channels: channels of the subsampling convolutions.
        num_mel_bins: input features per frame.
        subsampling_conv_kernel_size / subsampling_conv_stride: the subsampling convolutions' geometry.
        scale_input: multiply the subsampled input by sqrt(hidden_size) (NeMo's ``xscaling``).
        attention_model: NeMo's ``self_attention_model``: ``rel_pos`` (Transformer-XL attention,
            full context unless ``att_context_size`` limits it: NeMo's ``regular`` band mask) or
            ``rel_pos_local_attn`` (NeMo's local attention over ``att_context_size``, for long audio).
        att_context_size: (left, right) frames each query sees; (-1, -1): all of them.
    """

    hidden_size: int = 1024
    num_hidden_layers: int = 24
    num_attention_heads: int = 8
    intermediate_size: int = 4096
    hidden_act: str = "silu"
    attention_bias: bool = True
    convolution_bias: bool = True
    conv_kernel_size: int = 9
    subsampling_factor: int = 8
    subsampling_conv_channels: int = 256
    num_mel_bins: int = 80
    subsampling_conv_kernel_size: int = 3
    subsampling_conv_stride: int = 2
    scale_input: bool = True
    attention_model: str = "rel_pos"
    att_context_size: tuple[int, int] = (-1, -1)

    def __post_init__(self) -> None:
        check_attention(self.attention_model, self.att_context_size)
        if self.hidden_act == "swish":
            self.hidden_act = "silu"
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act={self.hidden_act!r} is not supported; expected one of {sorted(ACTIVATIONS)}")
        if self.hidden_size % self.num_attention_heads or self.hidden_size % 2:
            raise ValueError(
                f"hidden_size={self.hidden_size} must be even and divisible by num_attention_heads="
                f"{self.num_attention_heads}"
            )
        if self.conv_kernel_size % 2 == 0:
            raise ValueError(f"conv_kernel_size={self.conv_kernel_size} must be odd ('same' depthwise padding)")
        n = self.num_subsampling_layers
        if n < 1 or self.subsampling_conv_stride**n != self.subsampling_factor:
            raise ValueError(
                f"subsampling_factor={self.subsampling_factor} is not a power of "
                f"subsampling_conv_stride={self.subsampling_conv_stride}"
            )

    @property
    def attention_context(self) -> tuple[int, int] | None:
        """The (left, right) band each query attends within; None for full attention."""
        left, right = self.att_context_size
        return None if left < 0 and right < 0 else (left, right)

    @property
    def num_subsampling_layers(self) -> int:
        """Strided convolutions in the front end (log2 of the factor for stride 2)."""
        n, f = 0, self.subsampling_factor
        while f > 1 and f % self.subsampling_conv_stride == 0:
            f //= self.subsampling_conv_stride
            n += 1
        return n


@dataclass
class ParakeetConfig(ModelConfig):
    """A FastConformer encoder with a CTC head.

    Attributes:
        encoder: the encoder.
        vocab_size: CTC output width, blank included.
        blank_id: the CTC blank (Hugging Face's ``pad_token_id``: the last id).
    """

    encoder: ParakeetEncoderConfig = field(default_factory=ParakeetEncoderConfig)
    vocab_size: int = 1025
    blank_id: int | None = None

    def __post_init__(self) -> None:
        if self.blank_id is None:
            self.blank_id = self.vocab_size - 1
        if not 0 <= self.blank_id < self.vocab_size:
            raise ValueError(f"blank_id={self.blank_id} is outside the vocabulary (size {self.vocab_size})")


@dataclass
class ParakeetTransducerConfig(ModelConfig):
    """A FastConformer encoder with NeMo's LSTM transducer (RNN-T, or TDT with ``durations``).

    Attributes:
        encoder: the encoder.
        vocab_size: joint token logits, blank included.
        blank_id: the transducer blank (the last id).
        decoder_hidden_size: predictor and joint width.
        num_decoder_layers: LSTM layers.
        max_symbols_per_step: labels greedy search may emit on one frame.
        durations: TDT duration values, in the order of the joint's duration logits (empty: RNN-T).
    """

    encoder: ParakeetEncoderConfig = field(default_factory=ParakeetEncoderConfig)
    vocab_size: int = 8193
    blank_id: int | None = None
    decoder_hidden_size: int = 640
    num_decoder_layers: int = 2
    max_symbols_per_step: int = 10
    durations: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.blank_id is None:
            self.blank_id = self.vocab_size - 1
        if not 0 <= self.blank_id < self.vocab_size:
            raise ValueError(f"blank_id={self.blank_id} is outside the vocabulary (size {self.vocab_size})")
        if self.max_symbols_per_step < 1:
            raise ValueError(f"max_symbols_per_step={self.max_symbols_per_step} must be >= 1")
        if any(d < 0 for d in self.durations):
            raise ValueError(f"durations {self.durations} must be >= 0")
        if self.durations and max(self.durations) < 1:
            raise ValueError(f"durations {self.durations} never move past a frame")

    @property
    def is_tdt(self) -> bool:
        return bool(self.durations)


@dataclass
class ParakeetHybridConfig(ParakeetTransducerConfig):
    """A NeMo hybrid: the transducer of ``ParakeetTransducerConfig`` and a CTC head on the same
    encoder, over the same vocabulary and blank (``EncDecHybridRNNTCTCBPEModel``)."""
