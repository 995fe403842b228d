"""icefall Zipformer2 with a CTC head (``zipformer`` recipes; hybrid checkpoints too)."""

from oasr.models.zipformer.config import ZipformerConfig, ZipformerEncoderConfig

__all__ = ["ZipformerConfig", "ZipformerEncoderConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "zipformer",
        "oasr.models.zipformer.model:ZipformerCtcModel",
        (
            "oasr.models.zipformer.convert:IcefallConverter",
            "oasr.models.zipformer.convert:IcefallExplicitConverter",
        ),
    )
