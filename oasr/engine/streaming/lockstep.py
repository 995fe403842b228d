"""``LockstepCore``: live streams of a model that decodes in lockstep with its audio (one token
per audio token, the LM's input the token plus that audio's vector: Voxtral Realtime), through
the model's own live session (``model.open_live(max_new_tokens)``: ``feed(samples)``,
``finish()``, ``tokens``, ``text()``, ``done``, ``finish_reason``).

Each session holds its stream's whole state (the tower's convolution tails and windowed K/V,
the LM's K/V: the "stateful" runtime's per-stream state), so a step feeds every stream its new
samples, one stream after another, and sends a ``partial`` when its text grew; at the end of
the input the session decodes the model's closing padding, and the stream sends its one
``final`` (the whole text, its tokens) and ``done``. The stream's text is what the model's
whole-clip decode of the same audio writes. Endpointing is refused: the model's stream is one
utterance (its LM context, a sliding window of minutes, bounds it; past it the session stops
with ``finish_reason="length"``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from oasr.engine.decode.base import EngineOverloaded
from oasr.engine.outputs import Segment
from oasr.engine.streaming.core import StreamEvent, StreamOptions, StreamTable


class _Live:
    def __init__(self, sid: str, options: Any, sopts: StreamOptions, session: Any) -> None:
        self.id = sid
        self.options = options
        self.sopts = sopts
        self.session = session
        self.pending: list[np.ndarray] = []
        self.pending_samples = 0
        self.resampler = None
        self.samples_in = 0
        self.input_done = False
        self.closed = False
        self.segment = 0
        self.finals: list[Segment] = []
        self.language = None
        self.last_partial = ""
        self.feeds = 0


class LockstepCore(StreamTable):
    """Live streams of a lockstep model; ``StreamingCore``'s interface.

    Args:
        engine: the ``EngineCore`` (loaded model, config, option validation).
    """

    def __init__(self, engine) -> None:
        self._refuse_encoder_chunks(engine, "takes one audio token (80 ms) per step, as its reference does")
        self.engine = engine
        self.model = engine.model
        self.sampling_rate = int(engine.sampling_rate)
        self.max_batch = max(1, int(engine.config.max_streams))
        self._init_table()
        self.feeds = 0
        self.steps = 0

    # -- streams ----------------------------------------------------------------------

    def open(self, options: Any, sopts: StreamOptions, stream_id: str | None = None) -> str:
        """Admit a stream (its decoding ``options`` already validated). Raises ``EngineOverloaded``."""
        resampler = self._admission_checks(sopts)
        name = type(self.model).__name__
        if sopts.endpoint or sopts.endpoint_vad:
            raise ValueError(f"endpoint does not apply to {name}: its stream is one utterance")
        if sopts.min_chunk_s is not None or sopts.buffer_trimming_s is not None:
            raise ValueError(f"min_chunk_s / buffer_trimming_s are local agreement's; {name} streams in lockstep")
        if options.temperature is not None and options.temperatures[0] > 0:
            raise ValueError(
                f"{name}'s live stream decodes greedily (its reference's default); leave temperature unset"
            )
        if options.word_timestamps:
            raise ValueError(f"{name} gives no word times")
        with self.lock:
            if len(self.streams) >= self.max_batch:
                raise EngineOverloaded(f"all {self.max_batch} live streams (max_streams) are in use")
            sid = self._new_id(stream_id)
            stream = _Live(sid, options, sopts, self.model.open_live(options.max_new_tokens))
            stream.resampler = resampler
            self.streams[sid] = stream
        return sid

    def backlog_s(self, sid: str) -> float:
        with self.lock:
            s = self.streams.get(sid)
            return 0.0 if s is None else self._queued_s(s)

    def has_work(self) -> bool:
        with self.lock:
            return any(s.pending or s.input_done for s in self.streams.values())

    # -- the step -------------------------------------------------------------------------

    def step(self) -> list[StreamEvent]:
        """Feed every stream its new samples (ending those whose input is done); the events."""
        events: list[StreamEvent] = []
        with self.lock:
            streams = [s for s in self.streams.values() if s.pending or s.input_done]
            self.steps += bool(streams)
            for s in streams:
                self._guarded(s, events, self._advance, s, events)
        return events

    def _advance(self, s: _Live, events: list[StreamEvent]) -> None:
        x = self._take_pending(s)
        if x.size:
            s.session.feed(x)
            s.feeds += 1
            self.feeds += 1
        if s.input_done and not s.pending and s.resampler is None:
            s.session.finish()
            self._end(s, events)
            return
        if s.sopts.partials:
            text = s.session.text().strip()
            if text != s.last_partial:
                s.last_partial = text
                events.append(StreamEvent("partial", s.id, s.segment, text, 0.0, self._now(s)))

    def _now(self, s: _Live) -> float:
        return round(s.samples_in / self.sampling_rate, 3)

    def _end(self, s: _Live, events: list[StreamEvent]) -> None:
        """The last ``final`` (the whole text and its tokens), then ``done``; the stream leaves."""
        tokens = s.session.tokens
        text = s.session.text().strip()
        end = self._now(s)
        if text:
            s.finals.append(Segment(id=0, seek=0, start=0.0, end=end, text=text, tokens=list(tokens)))
        events.append(StreamEvent("final", s.id, s.segment, text, 0.0, end, list(tokens)))
        events.append(StreamEvent("done", s.id, s.segment))
        self._retire(s)

    def _retire(self, s: _Live) -> None:
        s.closed = True
        result = self._result(s)
        result.finish_reason = s.session.finish_reason
        self.result_cache[s.id] = result
        self.streams.pop(s.id, None)

    # -- results --------------------------------------------------------------------------

    def chunks_encoded_of(self, sid: str) -> int:
        s = self.streams.get(sid)
        return s.feeds if s is not None else 0

    def stats(self) -> dict[str, Any]:
        return {
            "streams_active": len(self.streams),
            "streams_capacity": self.max_batch,
            "stream_chunks_encoded": self.feeds,
            "stream_steps": self.steps,
            "stream_cache_bytes": 0,
        }
