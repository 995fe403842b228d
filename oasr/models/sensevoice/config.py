"""SenseVoiceSmall (FunASR) configuration: Paraformer's SANM encoder geometry plus the ``tp``
blocks, the CTC vocabulary and the LFR front end (``convert.py`` maps and checks a FunASR
``config.yaml`` onto it)."""

from __future__ import annotations

from dataclasses import dataclass

from oasr.models.configs import ModelConfig
from oasr.models.paraformer.config import SanmEncoderConfig

SENSEVOICE_NORM_EPS = 1e-5  # SenseVoice's LayerNorm is torch's (ESPnet's, in Paraformer: 1e-12)


@dataclass
class SenseVoiceEncoderConfig(SanmEncoderConfig):
    """FunASR's ``SenseVoiceEncoderSmall``: ``num_blocks`` SANM blocks and ``after_norm`` (as
    Paraformer's encoder), then ``tp_blocks`` more blocks and ``tp_norm``.

    Attributes:
        tp_blocks: the blocks after ``after_norm`` (20 in SenseVoiceSmall).
    """

    tp_blocks: int = 0
    norm_eps: float = SENSEVOICE_NORM_EPS

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tp_blocks < 0:
            raise ValueError(f"tp_blocks must be >= 0, got {self.tp_blocks}")


@dataclass
class SenseVoiceConfig(ModelConfig):
    """A FunASR SenseVoiceSmall.

    Attributes:
        encoder: the encoder.
        vocab_size: CTC outputs (the sentencepiece model's pieces, tags included).
        blank_id: the CTC blank (0, which is also the tokenizer's ``<unk>``).
        lfr_m / lfr_n: low-frame-rate stacking of the front end (7 / 6).
    """

    encoder: SenseVoiceEncoderConfig
    vocab_size: int
    blank_id: int = 0
    lfr_m: int = 7
    lfr_n: int = 6

    def __post_init__(self) -> None:
        if self.encoder.input_size % self.lfr_m:
            raise ValueError(f"encoder input_size {self.encoder.input_size} is not lfr_m={self.lfr_m} stacked frames")
        if not 0 <= self.blank_id < self.vocab_size:
            raise ValueError(f"blank_id {self.blank_id} is outside the vocabulary of {self.vocab_size}")

    @property
    def n_mels(self) -> int:
        return self.encoder.input_size // self.lfr_m
