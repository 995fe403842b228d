"""icefall Zipformer2 configuration (the encoder of icefall's ``zipformer`` recipes).

Per-stack fields are tuples with one entry per encoder stack; field names follow
icefall's ``--downsampling-factor`` / ``--encoder-dim`` / ... training options, so a
``config.json`` override reads like the recipe's command line. ``IcefallConverter``
infers everything a checkpoint's tensor shapes show and takes icefall's training
defaults for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oasr.models.configs import ModelConfig

_PER_STACK = (
    "encoder_dim",
    "num_encoder_layers",
    "num_heads",
    "query_head_dim",
    "pos_head_dim",
    "value_head_dim",
    "feedforward_dim",
    "cnn_module_kernel",
)


@dataclass
class ZipformerEncoderConfig(ModelConfig):
    """The Zipformer2 encoder: a Conv2dSubsampling embed, stacks at their downsampling
    factors, and the output downsample.

    Attributes:
        num_mel_bins: features per input frame.
        embed_channels: channels of the embed's three convolutions (the last is the ConvNeXt's).
        downsampling_factor: per stack, frame-rate reduction past the embed (1 = none).
        encoder_dim: per stack, width.
        num_encoder_layers: per stack, layers.
        num_heads: per stack, attention heads.
        query_head_dim / pos_head_dim / value_head_dim: per stack, per-head widths of the
            query (= key), the positional query and the value.
        feedforward_dim: per stack, hidden width of the middle feed-forward (the first is
            3/4 of it, the last 5/4).
        cnn_module_kernel: per stack, depthwise kernel of the convolution modules (odd).
        pos_dim: width of the compact relative positional encoding.
        output_downsampling_factor: reduction of the final output downsample (icefall: 2).
        causal: chunk-causal convolution modules (a streaming release).
        chunk_size: for a causal model, the attention / convolution chunk in embed frames
            (icefall evaluates releases at 16; also the default streaming chunk); <= 0 means full context.
        left_context_frames: for a causal model, embed frames of left context (128; also each
            stream's attention cache when streaming); < 0 is unlimited (and cannot stream).
        tail_pad_frames: feature frames of log(1e-10) appended to every row before encoding, as
            icefall's decode.py does for causal models (30: it completes the last chunk); 0 = none.
    """

    num_mel_bins: int = 80
    embed_channels: tuple[int, int, int] = (8, 32, 128)
    downsampling_factor: tuple[int, ...] = (1, 2, 4, 8, 4, 2)
    encoder_dim: tuple[int, ...] = (192, 256, 384, 512, 384, 256)
    num_encoder_layers: tuple[int, ...] = (2, 2, 3, 4, 3, 2)
    num_heads: tuple[int, ...] = (4, 4, 4, 8, 4, 4)
    query_head_dim: tuple[int, ...] = (32, 32, 32, 32, 32, 32)
    pos_head_dim: tuple[int, ...] = (4, 4, 4, 4, 4, 4)
    value_head_dim: tuple[int, ...] = (12, 12, 12, 12, 12, 12)
    feedforward_dim: tuple[int, ...] = (512, 768, 1024, 1536, 1024, 768)
    cnn_module_kernel: tuple[int, ...] = (31, 31, 15, 15, 15, 31)
    pos_dim: int = 48
    output_downsampling_factor: int = 2
    causal: bool = False
    chunk_size: int = 16
    left_context_frames: int = 128
    tail_pad_frames: int = 0

    def __post_init__(self) -> None:
        n = len(self.downsampling_factor)
        if n == 0:
            raise ValueError("downsampling_factor needs one entry per encoder stack")
        for name in _PER_STACK:
            value = getattr(self, name)
            if len(value) == 1 and n > 1:
                setattr(self, name, tuple(value) * n)
            elif len(value) != n:
                raise ValueError(f"{name} has {len(value)} entries for {n} stacks")
        for i, k in enumerate(self.cnn_module_kernel):
            if k % 2 == 0:
                raise ValueError(f"cnn_module_kernel[{i}]={k} must be odd")
        if self.output_downsampling_factor != 2:
            raise ValueError(f"output_downsampling_factor={self.output_downsampling_factor}: icefall only uses 2")
        if self.num_mel_bins < 7:
            raise ValueError(f"num_mel_bins={self.num_mel_bins}: the embed needs at least 7 features")
        if self.tail_pad_frames < 0:
            raise ValueError(f"tail_pad_frames={self.tail_pad_frames} must be >= 0")
        if self.pos_dim % 2:
            raise ValueError(f"pos_dim={self.pos_dim} must be even")
        if self.chunked and any(self.chunk_size % d for d in self.downsampling_factor):
            raise ValueError(
                f"chunk_size={self.chunk_size} must be a multiple of every downsampling factor "
                f"{self.downsampling_factor}"
            )

    @property
    def num_stacks(self) -> int:
        return len(self.downsampling_factor)

    @property
    def output_dim(self) -> int:
        """Width of the encoder output (the widest stack)."""
        return max(self.encoder_dim)

    @property
    def chunked(self) -> bool:
        """Whether the encoder runs with chunked attention and chunk-causal convolutions."""
        return self.causal and self.chunk_size > 0

    @property
    def left_context_chunks(self) -> int:
        """Chunks of left context the attention mask keeps (icefall's rounding, at least one)."""
        if self.left_context_frames < 0:
            return -1
        return max(self.left_context_frames // self.chunk_size, 1)


@dataclass
class ZipformerConfig(ModelConfig):
    """A Zipformer2 encoder with icefall's CTC head (``ctc_output``).

    Attributes:
        encoder: the encoder.
        vocab_size: CTC output width, blank included.
        blank_id: the blank (icefall: 0, ``<blk>`` in tokens.txt).
    """

    encoder: ZipformerEncoderConfig = field(default_factory=ZipformerEncoderConfig)
    vocab_size: int = 500
    blank_id: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.blank_id < self.vocab_size:
            raise ValueError(f"blank_id={self.blank_id} is outside the vocabulary (size {self.vocab_size})")
