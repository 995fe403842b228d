"""LASR (Google's MedASR, Hugging Face ``lasr``): conformer-CTC with rotary attention,
decoded by the ``ctc`` strategy."""

from oasr.models.lasr.config import LasrConfig

__all__ = ["LasrConfig", "register"]


def register() -> None:
    """Register the "lasr" architecture (idempotent: a second call re-registers the same references)."""
    from oasr.models.registry import register_model

    register_model(
        "lasr",
        "oasr.models.lasr.model:LasrModel",
        ("oasr.models.lasr.convert:HFLasrConverter",),
        overwrite=True,
    )
