"""The ``paraformer`` decode strategy (FunASR Paraformer / BiCifParaformer)."""

from oasr.engine.decode.paraformer.strategy import ParaformerDecodeStrategy

__all__ = ["ParaformerDecodeStrategy"]
