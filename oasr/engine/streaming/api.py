"""The streaming API of the engines: ``ASREngine.open_stream`` and ``AsyncEngine.open_stream``.

``open_stream(**options)`` takes the engine's decoding options (validated by its decode
strategy, as ``transcribe`` does: ``beam_size``, ``ctc_weight``, ``language``,
``word_timestamps``, ...) and the stream's own (``StreamOptions``: ``sample_rate``,
``endpoint``, the endpoint rules, ``partials``; for an offline model, streamed by local
agreement, ``min_chunk_s`` and ``buffer_trimming_s``). Options a live stream cannot honour
(``vad_filter``, ``clip_timestamps``, ``task="translate"``) are refused. ``build_stream_core``
picks the scheduler (``StreamingCore`` for an encoder that streams, ``LocalAgreementCore`` for
an offline one) and ``stream_support`` says why a model cannot stream at all.

Sync: ``Stream.feed(samples)`` queues samples and runs the engine's streaming steps until
nothing is ready, returning this stream's events (the other open streams advanced in the
same batched steps; their events wait in their own ``Stream``). Async: ``AsyncStream.feed``
only queues; a streaming thread steps every open stream, and ``async for event in stream``
yields events as they come.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from oasr.engine.config import is_set
from oasr.engine.outputs import RequestOutput
from oasr.engine.streaming.core import StreamEvent, StreamingCore, StreamOptions
from oasr.engine.streaming.endpoint import EndpointConfig

__all__ = ["AsyncStream", "Stream", "StreamingLoop", "build_stream_core", "split_stream_options", "stream_support"]

log = logging.getLogger("oasr.engine")

_ENDPOINT_FIELDS = ("rule1_min_trailing_silence", "rule2_min_trailing_silence", "rule3_min_utterance_length")
_LIVE_FIELDS = ("min_chunk_s", "buffer_trimming_s")  # the local-agreement policy's (offline models)
STREAM_OPTION_NAMES = frozenset(
    {"sample_rate", "endpoint", "partials", "endpoint_vad", "endpoint_config", *_ENDPOINT_FIELDS, *_LIVE_FIELDS}
)


def split_stream_options(options: dict[str, Any]) -> tuple[dict[str, Any], StreamOptions]:
    """A stream's options -> (decoding options for the strategy, ``StreamOptions``)."""
    decode = {k: v for k, v in options.items() if k not in STREAM_OPTION_NAMES}
    rules = {k: options[k] for k in _ENDPOINT_FIELDS if options.get(k) is not None}
    config = options.get("endpoint_config")
    if config is None:
        config = EndpointConfig(**rules)
    elif rules:
        raise TypeError("give either endpoint_config or the rule*_ options, not both")
    elif isinstance(config, dict):  # the JSON form: {"rule2_min_trailing_silence": 0.8, ...}
        unknown = sorted(set(config) - set(_ENDPOINT_FIELDS))
        if unknown:
            raise ValueError(f"endpoint_config: unknown rule(s) {unknown}; known: {list(_ENDPOINT_FIELDS)}")
        config = EndpointConfig(**config)
    elif not isinstance(config, EndpointConfig):
        raise ValueError(
            f"endpoint_config must be an EndpointConfig or an object of {list(_ENDPOINT_FIELDS)} (seconds), "
            f"got {config!r}"
        )
    endpoint = options.get("endpoint", False)
    partials = options.get("partials", True)
    endpoint_vad = options.get("endpoint_vad", False)
    for name, value in (("endpoint", endpoint), ("partials", partials), ("endpoint_vad", endpoint_vad)):
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}")
    rate = options.get("sample_rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int)):
        raise ValueError(f"sample_rate must be an integer number of Hz, got {rate!r}")
    if endpoint_vad and not endpoint:
        raise ValueError("endpoint_vad chooses how endpoints are detected: it needs endpoint=true")
    live = {k: options[k] for k in _LIVE_FIELDS if options.get(k) is not None}
    for name, value in live.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return decode, StreamOptions(
        sample_rate=rate,
        endpoint=endpoint,
        endpoint_config=config,
        partials=partials,
        endpoint_vad=endpoint_vad,
        **live,
    )


def stream_support(engine) -> str | None:
    """Why ``engine`` cannot stream, or None when it can: an encoder that streams
    (``StreamingCore``), or an offline model whose decode strategy times words (the
    local-agreement policy, ``LocalAgreementCore``)."""
    model = engine.model
    if model.encoder.streaming_kind != "none" or callable(getattr(model, "open_live", None)):
        return None
    if not engine.strategy.word_timing_modes:
        return (
            f"{type(model).__name__} cannot stream: its encoder is offline-only and its decode strategy "
            f"({str(engine.strategy.decode_type)!r}) cannot time words, which live streaming by local agreement "
            f"needs; transcribe it offline instead"
        )
    return None


def build_stream_core(engine):
    """The live-stream scheduler for ``engine``'s model: ``LockstepCore`` for a model with its own
    live session (``open_live``), ``StreamingCore`` over an encoder that streams,
    ``LocalAgreementCore`` over an offline one (the one place that chooses).

    Raises:
        ValueError: the model cannot stream (``stream_support``'s reason) or the engine's
            streaming settings do not fit it.
    """
    reason = stream_support(engine)
    if reason is not None:
        raise ValueError(reason)
    if callable(getattr(engine.model, "open_live", None)):  # a model that decodes in lockstep with its audio
        from oasr.engine.streaming.lockstep import LockstepCore

        return LockstepCore(engine)
    if engine.model.encoder.streaming_kind == "none":
        from oasr.engine.streaming.local_agreement import LocalAgreementCore

        return LocalAgreementCore(engine)
    return StreamingCore(engine)


def validate_stream_options(engine, options: dict[str, Any]):
    """(validated ``TranscribeOptions``, ``StreamOptions``) of an ``open_stream`` call."""
    decode, sopts = split_stream_options(options)
    opts = engine.make_options(**decode)
    if opts.vad_filter:
        raise ValueError("vad_filter does not apply to a live stream; use endpoint=True to cut it into segments")
    if is_set(opts.clip_timestamps) and opts.clip_timestamps not in ("0", "", None, [], [0], [0.0]):
        raise ValueError("clip_timestamps does not apply to a live stream")
    if opts.task != "transcribe":
        raise ValueError(f"task={opts.task!r}: a live stream only transcribes")
    return opts, sopts


class Stream:
    """A live stream of an ``ASREngine`` (see the module)."""

    def __init__(self, owner: StreamingEngineMixin, sid: str) -> None:
        self._owner = owner
        self.id = sid
        self._events: deque[StreamEvent] = deque()
        self.done = False
        self.output: RequestOutput | None = None

    def feed(self, samples: np.ndarray) -> list[StreamEvent]:
        """Queue samples (float32 mono at the stream's ``sample_rate``) and run the steps they
        make ready; this stream's events. Raises ``StreamError`` for bad samples."""
        self._owner._streaming().push(self.id, samples)
        self._owner.run_streams()
        return self.events()

    def finish(self) -> list[StreamEvent]:
        """End the input: the rest is encoded, the last final and ``done`` come back."""
        self._owner._streaming().finish(self.id)
        while not self.done:
            if not self._owner.run_streams():
                break
        return self.events()

    def events(self) -> list[StreamEvent]:
        """Events not yet taken."""
        out = list(self._events)
        self._events.clear()
        return out

    def close(self) -> None:
        """Drop the stream now (its cache is freed)."""
        if not self.done:
            self._owner._streaming().close(self.id)
            self._owner._open.pop(self.id, None)
            self.done = True

    def _deliver(self, event: StreamEvent) -> None:
        self._events.append(event)
        if event.type in ("done", "error"):
            self.done = True
            self.output = self._owner._streaming().pop_result(self.id)
            self._owner._open.pop(self.id, None)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class StreamingEngineMixin:
    """``open_stream`` for the synchronous engine (``ASREngine``)."""

    _stream_core: StreamingCore | None = None

    def _streaming(self) -> StreamingCore:
        if self._stream_core is None:
            self._stream_core = build_stream_core(self)
            self._open: dict[str, Stream] = {}
        return self._stream_core

    def open_stream(self, **options: Any) -> Stream:
        """Open a live stream (see ``oasr.engine.streaming.api``).

        Example:
            >>> engine = ASREngine("path/to/wenet-u2pp", stream_chunk_ms=640)
            >>> stream = engine.open_stream(sample_rate=16000, endpoint=True)
            >>> for piece in pieces:                    # any lengths
            ...     for event in stream.feed(piece):
            ...         print(event.type, event.text)
            >>> events = stream.finish()                 # the last final, then "done"

        Raises:
            EngineOverloaded: every streaming slot is in use.
            ValueError / TypeError: a bad or unknown option, or a model that cannot stream.
        """
        core = self._streaming()
        opts, sopts = validate_stream_options(self, options)
        sid = core.open(opts, sopts)
        stream = Stream(self, sid)
        self._open[sid] = stream
        return stream

    def run_streams(self) -> bool:
        """Run streaming steps until none is ready; False when there was nothing to do."""
        core = self._streaming()
        did = False
        while core.has_work():
            did = True
            for event in core.step():
                stream = self._open.get(event.stream_id)
                if stream is not None:
                    stream._deliver(event)
        return did


class AsyncStream:
    """A live stream of an ``AsyncEngine``: ``feed`` / ``finish`` queue, ``async for`` events."""

    def __init__(self, loop: StreamingLoop, sid: str, aio: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.id = sid
        self._queue: asyncio.Queue[StreamEvent] = asyncio.Queue()
        self._aio = aio
        self.done = False
        self.output: RequestOutput | None = None

    def feed(self, samples: np.ndarray) -> None:
        """Queue samples (raises ``StreamError`` for bad ones)."""
        self._loop.core.push(self.id, samples)
        self._loop.wake()

    def finish(self) -> None:
        self._loop.core.finish(self.id)
        self._loop.wake()

    def close(self) -> None:
        """Drop the stream now (a hang-up): its cache is freed at once."""
        if not self.done:
            self.done = True
            self._loop.close(self.id)

    @property
    def backlog_s(self) -> float:
        """Seconds of audio fed and not yet encoded."""
        return self._loop.core.backlog_s(self.id)

    async def next_event(self, timeout: float | None = None) -> StreamEvent:
        event = await (asyncio.wait_for(self._queue.get(), timeout) if timeout else self._queue.get())
        if event.type in ("done", "error"):
            self.done = True
            self.output = self._loop.core.pop_result(self.id)
        return event

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        while True:
            event = await self.next_event()
            yield event
            if event.type in ("done", "error"):
                return

    def _put(self, event: StreamEvent) -> None:
        self._aio.call_soon_threadsafe(self._queue.put_nowait, event)


class StreamingLoop:
    """The thread that steps an ``AsyncEngine``'s live streams.

    A fault the core's per-stream guards did not contain (an exception out of ``step``) fails
    the streams open at that moment (``engine_error``) and the loop goes on with the next
    streams, as if restarted (``faults`` counts them). Only a ``BaseException`` that is not an
    ``Exception`` ends the thread: ``alive`` turns False, every open stream hears of it and
    ``open`` refuses (the server's ``/health`` answers 503 then).
    """

    def __init__(self, engine) -> None:
        self.core = build_stream_core(engine)
        self._streams: dict[str, AsyncStream] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.death: BaseException | None = None
        self.faults = 0
        self._thread = threading.Thread(target=self._run, name="oasr-streams", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the loop is stepping streams (False once it died or was shut down)."""
        return self.death is None and self._thread.is_alive() and not self._stop.is_set()

    def open(self, opts, sopts, aio: asyncio.AbstractEventLoop) -> AsyncStream:
        if not self.alive:
            raise RuntimeError(f"the streaming loop is not running ({self.death!r})")
        sid = self.core.open(opts, sopts)
        stream = AsyncStream(self, sid, aio)
        self._streams[sid] = stream
        return stream

    def close(self, sid: str) -> None:
        self.core.close(sid)
        self._streams.pop(sid, None)

    def wake(self) -> None:
        self._wake.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._wake.wait(0.5)
                self._wake.clear()
                while not self._stop.is_set() and self.core.has_work():
                    try:
                        events = self.core.step()
                    except Exception as e:  # noqa: BLE001 - the loop must outlive any one step
                        self.faults += 1
                        log.error("a streaming step failed; its streams are failed, the loop goes on", exc_info=e)
                        message = f"the streaming step failed: {type(e).__name__}: {e}"
                        events = self.core.fail_all("engine_error", message)
                    self._deliver(events)
        except BaseException as e:  # noqa: BLE001 - every open stream hears of it
            self.death = e
            log.critical("the streaming loop stopped: %r", e)
            for sid, stream in list(self._streams.items()):
                stream._put(StreamEvent("error", sid, code="engine_error", message=f"the streaming loop failed: {e}"))
                self.core.close(sid)
            self._streams.clear()

    def _deliver(self, events: list[StreamEvent]) -> None:
        for event in events:
            stream = self._streams.get(event.stream_id)
            if stream is None:
                continue
            if event.type in ("done", "error"):
                self._streams.pop(event.stream_id, None)
            stream._put(event)
