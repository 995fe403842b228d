"""The engine: batched decoding behind one model contract."""

from oasr.engine.config import EngineConfig, TranscribeOptions
from oasr.engine.decode.base import EngineOverloaded, Request
from oasr.engine.engine import ASREngine
from oasr.engine.outputs import RequestOutput, Segment, Word

__all__ = [
    "ASREngine",
    "EngineConfig",
    "EngineOverloaded",
    "Request",
    "RequestOutput",
    "Segment",
    "TranscribeOptions",
    "Word",
]
