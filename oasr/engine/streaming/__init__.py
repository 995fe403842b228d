"""Live streams: cached-state encoder runtimes, searches carried across chunks, endpointing,
and the ``open_stream`` API of the engines (see ``core.py`` for the scheduler)."""

from oasr.engine.streaming.core import StreamError, StreamEvent, StreamingCore, StreamOptions
from oasr.engine.streaming.endpoint import EndpointConfig, EndpointRule

__all__ = ["EndpointConfig", "EndpointRule", "StreamError", "StreamEvent", "StreamOptions", "StreamingCore"]
