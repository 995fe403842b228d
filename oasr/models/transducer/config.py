"""icefall stateless transducer configuration: a Zipformer2 encoder, the stateless
predictor (``decoder.*``), the joiner (``joiner.*``) and, in a hybrid checkpoint, a CTC head."""

from __future__ import annotations

from dataclasses import dataclass, field

from oasr.models.configs import ModelConfig
from oasr.models.zipformer.config import ZipformerEncoderConfig


@dataclass
class TransducerConfig(ModelConfig):
    """Attributes:
    encoder: the Zipformer2 encoder.
    vocab_size: output width, blank included.
    blank_id: the blank (icefall: 0).
    decoder_dim: predictor width (its embedding and its grouped convolution).
    context_size: labels the predictor looks at (1 = no convolution).
    joiner_dim: width of the joiner's projections.
    use_ctc: the checkpoint also carries icefall's CTC head (a hybrid).
    """

    encoder: ZipformerEncoderConfig = field(default_factory=ZipformerEncoderConfig)
    vocab_size: int = 500
    blank_id: int = 0
    decoder_dim: int = 512
    context_size: int = 2
    joiner_dim: int = 512
    use_ctc: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.blank_id < self.vocab_size:
            raise ValueError(f"blank_id={self.blank_id} is outside the vocabulary (size {self.vocab_size})")
        if self.context_size < 1:
            raise ValueError(f"context_size={self.context_size} must be at least 1")
        if self.context_size > 1 and self.decoder_dim % 4:
            raise ValueError(f"decoder_dim={self.decoder_dim} must be a multiple of 4 (the conv's groups of 4)")
