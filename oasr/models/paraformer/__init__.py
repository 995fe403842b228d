"""FunASR Paraformer / BiCifParaformer: SANM encoder, CIF predictor, non-autoregressive
SANM decoder, decoded by the ``paraformer`` strategy with CIF timestamps."""

from oasr.models.paraformer.config import CifPredictorConfig, ParaformerConfig, SanmDecoderConfig, SanmEncoderConfig

__all__ = ["CifPredictorConfig", "ParaformerConfig", "SanmDecoderConfig", "SanmEncoderConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "paraformer",
        "oasr.models.paraformer.model:ParaformerModel",
        ("oasr.models.paraformer.convert:FunasrParaformerConverter",),
    )
