"""Decoder contracts and shared decoders."""

from oasr.models.decoders.base import BaseDecoder, Joiner, PredictionNetwork, TransducerPredictor
from oasr.models.decoders.kv_pool import DecoderState, KVPool, PoolExhausted, RowGroups

__all__ = [
    "BaseDecoder",
    "DecoderState",
    "Joiner",
    "KVPool",
    "PoolExhausted",
    "PredictionNetwork",
    "RowGroups",
    "TransducerPredictor",
]
