"""WeNet U2 / U2++ conformer configuration (the subset of WeNet's ``encoder_conf`` this
Conformer implements; ``convert.py`` maps and checks a ``train.yaml`` onto it)."""

from __future__ import annotations

from dataclasses import dataclass

from oasr.models.configs import ModelConfig
from oasr.models.decoders.transformer_decoder import TransformerDecoderConfig

# WeNet ``input_layer`` -> (subsampling rate, right context in feature frames)
SUBSAMPLING: dict[str, tuple[int, int]] = {
    "conv2d": (4, 6),
    "conv2d6": (6, 10),
    "conv2d8": (8, 14),
}


@dataclass
class ConformerEncoderConfig(ModelConfig):
    """WeNet's ``ConformerEncoder`` (rel-pos self-attention, macaron feed-forwards,
    convolution module).

    Attributes:
        input_dim: features per frame (fbank bins).
        output_size: model width D.
        attention_heads / linear_units / num_blocks: heads, feed-forward width, blocks.
        input_layer: subsampling front end ("conv2d" = 1/4, "conv2d6", "conv2d8").
        normalize_before: pre-norm blocks (and the final ``after_norm``).
        final_norm: apply ``after_norm`` after the blocks (pre-norm only, as WeNet).
        static_chunk_size: trained static chunk (>0: that chunk mask is always applied
            unless ``use_dynamic_chunk``).
        use_dynamic_chunk: trained with dynamic chunks (the decoding chunk is a choice).
        macaron_style: a half-step feed-forward before the attention.
        activation: "silu" (WeNet's swish) or "relu", for feed-forwards and conv module.
        use_cnn_module / cnn_module_kernel / causal / cnn_module_norm: the convolution
            module ("batch_norm" or "layer_norm"; ``causal`` pads the kernel on the left).
        query_bias / key_bias / value_bias / conv_bias / mlp_bias: projection biases.
        norm_eps / conv_norm_eps: LayerNorm and conv-module norm epsilons.
        global_cmvn: the encoder holds global CMVN statistics (``global_cmvn.mean`` / ``istd``).
    """

    input_dim: int = 80
    output_size: int = 256
    attention_heads: int = 4
    linear_units: int = 2048
    num_blocks: int = 12
    input_layer: str = "conv2d"
    normalize_before: bool = True
    final_norm: bool = True
    static_chunk_size: int = 0
    use_dynamic_chunk: bool = False
    macaron_style: bool = True
    activation: str = "silu"
    use_cnn_module: bool = True
    cnn_module_kernel: int = 15
    causal: bool = False
    cnn_module_norm: str = "batch_norm"
    query_bias: bool = True
    key_bias: bool = True
    value_bias: bool = True
    conv_bias: bool = True
    mlp_bias: bool = True
    norm_eps: float = 1e-5
    conv_norm_eps: float = 1e-5
    global_cmvn: bool = True

    def __post_init__(self) -> None:
        if self.input_layer not in SUBSAMPLING:
            raise ValueError(f"input_layer {self.input_layer!r} is not one of {sorted(SUBSAMPLING)}")
        if self.output_size % self.attention_heads:
            raise ValueError(f"output_size {self.output_size} is not a multiple of attention_heads")
        if self.activation not in ("silu", "relu"):
            raise ValueError(f"activation {self.activation!r} is not 'silu' (swish) or 'relu'")
        if self.cnn_module_norm not in ("batch_norm", "layer_norm"):
            raise ValueError(f"cnn_module_norm {self.cnn_module_norm!r} is not 'batch_norm' or 'layer_norm'")
        if self.use_cnn_module and not self.causal and self.cnn_module_kernel % 2 == 0:
            raise ValueError(f"a non-causal conv module needs an odd kernel, got {self.cnn_module_kernel}")

    @property
    def subsampling_rate(self) -> int:
        return SUBSAMPLING[self.input_layer][0]

    @property
    def right_context(self) -> int:
        return SUBSAMPLING[self.input_layer][1]


@dataclass
class ConformerModelConfig(ModelConfig):
    """A WeNet U2 / U2++ model: conformer encoder, CTC head and, optionally, the
    attention decoder used for rescoring.

    Attributes:
        encoder: the encoder.
        vocab_size: output units (WeNet's ``output_dim``).
        blank_id: the CTC blank (WeNet's ``ctc_conf.ctc_blank_id``).
        decoder: the attention decoder, carrying ``sos`` / ``eos`` and the trained
            ``reverse_weight``; ``None`` serves CTC only.
    """

    encoder: ConformerEncoderConfig
    vocab_size: int
    blank_id: int = 0
    decoder: TransformerDecoderConfig | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.blank_id < self.vocab_size:
            raise ValueError(f"blank_id {self.blank_id} is outside the vocabulary of {self.vocab_size}")
        if self.decoder is not None:
            if self.decoder.vocab_size != self.vocab_size:
                raise ValueError(f"decoder vocab {self.decoder.vocab_size} != CTC vocab {self.vocab_size}")
            if self.decoder.d_model != self.encoder.output_size:
                raise ValueError(f"decoder width {self.decoder.d_model} != encoder width {self.encoder.output_size}")
