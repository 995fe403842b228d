"""Paraformer (FunASR) configuration: the SANM encoder, the CIF predictor and the SANM
non-autoregressive decoder (``convert.py`` maps and checks a FunASR ``config.yaml`` onto it)."""

from __future__ import annotations

from dataclasses import dataclass

from oasr.models.configs import ModelConfig

PREDICTORS = ("CifPredictorV2", "CifPredictorV3")
UPSAMPLE_TYPES = ("cnn", "cnn_blstm")
NORM_EPS = 1e-12  # FunASR (ESPnet) LayerNorm


@dataclass
class SanmEncoderConfig(ModelConfig):
    """FunASR's ``SANMEncoder`` with ``input_layer: pe`` (sinusoids, no subsampling: LFR
    features come in already stacked).

    Attributes:
        input_size: features per frame (``lfr_m * n_mels``, 560).
        output_size: model width D.
        attention_heads / linear_units / num_blocks: heads, feed-forward width, blocks
            (the first block maps ``input_size`` -> D).
        kernel_size / sanm_shfit: FSMN memory kernel and its extra left shift.
        norm_eps: the LayerNorms' eps (FunASR's ESPnet LayerNorm: 1e-12).
    """

    input_size: int = 560
    output_size: int = 512
    attention_heads: int = 4
    linear_units: int = 2048
    num_blocks: int = 50
    kernel_size: int = 11
    sanm_shfit: int = 0
    norm_eps: float = NORM_EPS

    def __post_init__(self) -> None:
        if self.output_size % self.attention_heads:
            raise ValueError(f"output_size {self.output_size} is not a multiple of attention_heads")
        if self.num_blocks < 1:
            raise ValueError("the SANM encoder needs at least one block")


@dataclass
class SanmDecoderConfig(ModelConfig):
    """FunASR's ``ParaformerSANMDecoder``: ``att_layer_num`` blocks with FSMN self-attention and
    cross-attention, ``num_blocks - att_layer_num`` FSMN-only blocks, one feed-forward-only block.

    Attributes:
        attention_heads / linear_units / num_blocks / att_layer_num: geometry.
        kernel_size / sanm_shfit: FSMN kernel and the first blocks' extra left shift.
    """

    attention_heads: int = 4
    linear_units: int = 2048
    num_blocks: int = 16
    att_layer_num: int = 16
    kernel_size: int = 11
    sanm_shfit: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.att_layer_num <= self.num_blocks:
            raise ValueError(f"att_layer_num {self.att_layer_num} must be in [1, num_blocks={self.num_blocks}]")


@dataclass
class CifPredictorConfig(ModelConfig):
    """FunASR's ``CifPredictorV2`` (``kind``) or ``CifPredictorV3`` (BiCif: a second,
    upsampled alpha head used only for timestamps).

    Attributes:
        l_order / r_order: context of the CIF convolution.
        threshold: firing threshold (1.0; the prefix-sum CIF assumes it, as FunASR's does).
        smooth_factor / noise_threshold: ``relu(sigmoid(.) * smooth - noise)``.
        tail_threshold: weight added one frame past the end so a trailing token fires.
        upsample_times / upsample_type / use_cif1_cnn / smooth_factor2 / noise_threshold2: the V3 head.
    """

    kind: str = "CifPredictorV2"
    l_order: int = 1
    r_order: int = 1
    threshold: float = 1.0
    smooth_factor: float = 1.0
    noise_threshold: float = 0.0
    tail_threshold: float = 0.45
    upsample_times: int = 3
    upsample_type: str = "cnn_blstm"
    use_cif1_cnn: bool = False
    smooth_factor2: float = 1.0
    noise_threshold2: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in PREDICTORS:
            raise ValueError(f"predictor {self.kind!r} is not one of {PREDICTORS}")
        if self.threshold != 1.0:
            raise ValueError(f"CIF threshold {self.threshold} is not supported (FunASR's prefix-sum CIF fires at 1.0)")
        if self.kind == "CifPredictorV3" and self.upsample_type not in UPSAMPLE_TYPES:
            raise ValueError(f"upsample_type {self.upsample_type!r} is not one of {UPSAMPLE_TYPES}")

    @property
    def bicif(self) -> bool:
        return self.kind == "CifPredictorV3"


@dataclass
class ParaformerConfig(ModelConfig):
    """A FunASR Paraformer / BiCifParaformer.

    Attributes:
        encoder / decoder / predictor: the three parts.
        vocab_size: output tokens (the token list's length).
        blank_id / sos / eos: FunASR's ids (0, 1, 2 in the releases), never text.
        lfr_m / lfr_n: low-frame-rate stacking of the front end (7 / 6).
    """

    encoder: SanmEncoderConfig
    decoder: SanmDecoderConfig
    predictor: CifPredictorConfig
    vocab_size: int
    blank_id: int = 0
    sos: int = 1
    eos: int = 2
    lfr_m: int = 7
    lfr_n: int = 6

    def __post_init__(self) -> None:
        if self.lfr_m * 80 != self.encoder.input_size and self.encoder.input_size % self.lfr_m:
            raise ValueError(f"encoder input_size {self.encoder.input_size} is not lfr_m={self.lfr_m} stacked frames")
        for name in ("blank_id", "sos", "eos"):
            if not 0 <= getattr(self, name) < self.vocab_size:
                raise ValueError(f"{name} {getattr(self, name)} is outside the vocabulary of {self.vocab_size}")

    @property
    def n_mels(self) -> int:
        return self.encoder.input_size // self.lfr_m
