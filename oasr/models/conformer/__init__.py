"""WeNet U2 / U2++ conformer: CTC decoding, plus attention rescoring when the
checkpoint's attention decoder loads."""

from oasr.models.conformer.config import ConformerEncoderConfig, ConformerModelConfig

__all__ = ["ConformerEncoderConfig", "ConformerModelConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "conformer",
        "oasr.models.conformer.model:ConformerModel",
        ("oasr.models.conformer.convert:WenetConverter",),
    )
