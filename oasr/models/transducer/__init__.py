"""icefall stateless transducer: a Zipformer2 encoder, the stateless predictor and the joiner
(transducer-only releases auto-detect here; hybrids load with ``architecture="transducer"``)."""

from oasr.models.transducer.config import TransducerConfig

__all__ = ["TransducerConfig", "register"]


def register() -> None:
    from oasr.models.registry import register_model

    register_model(
        "transducer",
        "oasr.models.transducer.model:TransducerModel",
        (
            "oasr.models.transducer.convert:IcefallTransducerConverter",
            "oasr.models.transducer.convert:IcefallHybridTransducerConverter",
        ),
    )
