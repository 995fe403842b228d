"""``/v1/audio/stream``: live transcription over a WebSocket.

The life of a session:

1. Upgrade. Refused before it, with an HTTP answer in OpenAI's error shape: 401 without the
   API key (when one is set; checked by ``GateMiddleware``), 400 ``streaming_unsupported`` when
   the model cannot stream (``oasr.engine.streaming.api.stream_support``: an offline-only encoder
   whose decode strategy cannot time words; Whisper streams by local agreement), 429
   ``streams_full`` with ``Retry-After`` when every stream slot (``--max-streams``) is taken by
   an open connection or the engine has no encoder cache slot (or K/V pool room) for one more
   stream, 503 when the engine or its streaming
   loop has stopped. A stream is refused before any of its audio is decoded, never cut later
   for want of room, except one whose unlimited attention history outgrows the shared pool.
2. The first message, text: a JSON object with ``sample_rate`` (Hz of the samples that follow;
   required), ``sample_format`` (``"pcm16"``: signed 16-bit little-endian, the default, or
   ``"float32"``: IEEE float little-endian in [-1, 1]), optionally ``model`` (one of the served
   names) and the stream's options: the decoding options ``/v1/audio/transcriptions`` takes
   (``language``, ``beam_size``, ``ctc_weight``, ``word_timestamps``, ...) and ``endpoint``,
   ``partials``, ``rule1_min_trailing_silence``, ``rule2_min_trailing_silence``,
   ``rule3_min_utterance_length``, and for an offline model (Whisper, streamed by local
   agreement) ``min_chunk_s`` and ``buffer_trimming_s``. What ``oasr serve`` set for every
   request (``--beam-size``) applies unless the message sets it. The stream opens then (its
   encoder cache slot is taken).
3. Binary messages: mono samples in that format, of any length. Messages shorter than
   ``MIN_PUSH_S`` of audio are joined before they reach the engine (held at most
   ``FLUSH_S``), so a flood of tiny messages costs the engine no more than their audio does.
4. Events back, one JSON text message each (``StreamEvent.to_dict``): ``partial`` (segment,
   text, start, end), ``final`` (segment, text, start, end, tokens, words with
   ``word_timestamps``), ``endpoint`` (segment, time), ``error`` (code, message, and
   ``retry_after_s`` when trying again later can succeed) and ``done``.
5. The text message ``"done"`` ends the input: the rest is decoded, the last ``final`` and
   ``done`` are sent and the server closes with 1000.

Speaker turns instead of text: when the server has a diarization model that streams
(``oasr serve --diarize-model DIR`` with Nemotron 3 Diarization), a session whose first message's
``model`` names it (``DIR`` as given, or its last path component; or the URL's ``?model=``, which
also spares the upgrade the transcription model's checks) is a diarization session: the first
message takes ``sample_rate``, ``sample_format`` and ``streaming_mode`` (one of the checkpoint's;
other options are ``invalid_options``, 1007), audio goes in as above (resampled to the model's
rate), and the events are ``turn_opened`` (speaker, time, start) and ``turn_closed`` (speaker,
start, time: the turn's end) as the turns open and close (``DiarizationStream``), then ``done``
after ``"done"`` (every open turn closed at the end of the audio).

Close codes (after an ``error`` event naming the problem, except for 1009):

====  =======================================================================
1000  the stream ended after ``"done"`` (the last final and ``done`` were sent)
1003  unsupported data: a first message that is not a JSON object (or is nested more than
      ``MAX_JSON_DEPTH`` deep), audio before it, a text message other than ``"done"``, a
      ``sample_format`` that is not one of the names, a binary message that is not whole
      samples, samples after ``"done"``
1007  invalid payload: non-finite samples (NaN / Inf) or samples past +-100 (``invalid_audio``),
      options / a sample rate the model refuses (``invalid_options``: a wrong type, a value out
      of range such as a ``beam_size`` over the strategy's bound, an unknown name), or a
      ``language`` it does not have (``invalid_language``)
1008  policy: the stream passed ``--max-audio-seconds`` (``audio_too_long``), sent nothing for
      ``--stream-idle-timeout`` seconds (``idle_timeout``), or named a model not served
1009  a message over ``--max-message-kb`` (closed by the WebSocket layer, no event)
1011  the stream failed inside the engine (``engine_error``); the server and the other
      streams go on
1012  the server is shutting down (SIGTERM): uvicorn closes open WebSockets at once, no event
1013  no encoder cache slot was free when the stream opened (``streams_full``: the upgrade
      passed, then another stream took the last slot), or the stream outgrew the shared
      attention cache (``cache_full``); the ``error`` event carries ``retry_after_s``
====  =======================================================================

A client that disconnects mid-stream has its stream dropped at once: its slot and encoder
cache are free for the next connection (``oasr_streams_active`` on ``/metrics``).

Keepalive: the server pings every ``--ws-ping-interval`` seconds and closes (1011, no event:
the peer is gone) a connection whose pong does not come within ``--ws-ping-timeout``, but
only while nothing else comes from it either: a client sending faster than the engine
decodes is not read from while ``MAX_BACKLOG_S`` of its audio wait, so its pong waits behind
its audio, and data still arriving proves it alive (``oasr.server.lifecycle``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from oasr.engine.async_engine import EngineStopped
from oasr.engine.decode.base import EngineOverloaded
from oasr.engine.streaming.api import stream_support
from oasr.engine.streaming.core import StreamError
from oasr.languages import LanguageError
from oasr.server.errors import APIError
from oasr.server.metrics import ServerMetrics
from oasr.server.protocol import MAX_JSON_DEPTH, json_too_deep
from oasr.server.serving import engine_alive
from oasr.server.settings import ServerSettings

log = logging.getLogger("oasr.server")

CLOSE_NORMAL = 1000
CLOSE_UNSUPPORTED_DATA = 1003
CLOSE_INVALID_PAYLOAD = 1007
CLOSE_POLICY = 1008
CLOSE_INTERNAL_ERROR = 1011
CLOSE_TRY_AGAIN_LATER = 1013

SAMPLE_FORMATS = {"pcm16": np.dtype("<i2"), "float32": np.dtype("<f4")}
END_OF_INPUT = "done"
MAX_BACKLOG_S = 10.0  # audio a connection may have queued ahead of the encoder before it stops reading
MIN_PUSH_S = 0.02  # shorter messages are joined before they reach the engine ...
FLUSH_S = 0.05  # ... and held at most this long waiting for the next one
RETRY_AFTER_S = 1  # the retry hint of a stream refused for want of room (429 Retry-After, 1013 retry_after_s)

# The engine's error codes (error events) -> close codes.
_ENGINE_CLOSE_CODES = {
    "invalid_audio": CLOSE_INVALID_PAYLOAD,
    "audio_too_long": CLOSE_POLICY,
    "bad_request": CLOSE_UNSUPPORTED_DATA,
    "cache_full": CLOSE_TRY_AGAIN_LATER,  # the stream outgrew the shared K/V pool
}


# Error codes whose stream may succeed if opened again later: their events carry ``retry_after_s``.
_RETRY_LATER = frozenset({"streams_full", "cache_full"})


class Refusal(Exception):
    """The session ends with an ``error`` event (``code``, message) and ``close_code``."""

    def __init__(self, close_code: int, code: str, message: str) -> None:
        super().__init__(message)
        self.close_code = close_code
        self.code = code

    def event(self) -> dict[str, Any]:
        return _error_event(self.code, str(self))


def _error_event(code: str, message: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "error", "code": code, "message": message}
    if code in _RETRY_LATER:
        out["retry_after_s"] = RETRY_AFTER_S
    return out


class _Gone(Exception):
    """The connection ended from the client's side; ``code``: how (``disconnect_label``)."""

    def __init__(self, code: int | None = None) -> None:
        super().__init__(code)
        self.code = code


def disconnect_label(code: int | None) -> int:
    """The ``oasr_stream_sessions_total`` code of a connection the client's side ended: 0 for a
    close frame from the client (1000, 1001, 1005 without a code, or an application code
    >= 3000: the client went away), else the code itself: 1006 for a connection dropped
    without a close frame (a TCP reset, EOF), 1002 / 1007 / 1009 for one the WebSocket layer
    failed (a protocol error, text that is not UTF-8, a message over ``--max-message-kb``)."""
    if code is None:
        return 1006  # a send failed under us: the connection is gone, how is not known
    if code in (1000, 1001, 1005) or code >= 3000:
        return 0
    return code


def streaming_alive(engine) -> bool:
    """Whether the engine's streaming loop can take streams (True before the first stream
    starts it; False once it died)."""
    loop = getattr(engine, "streaming", None)
    return loop is None or loop.alive


@dataclass(frozen=True)
class StreamConfig:
    """What a session's first message asked for.

    Attributes:
        sample_rate: Hz of the samples the client sends.
        dtype: their numpy dtype (``SAMPLE_FORMATS``).
        options: ``AsyncEngine.open_stream`` keyword options (the server's defaults under them).
    """

    sample_rate: int
    dtype: np.dtype
    options: dict[str, Any]
    model: str | None = None
    asked: frozenset[str] = frozenset()  # the options the message itself set

    def samples(self, data: bytes) -> np.ndarray:
        """A binary message's samples as float32.

        Raises:
            Refusal: (1003) the message is not a whole number of samples.
        """
        width = self.dtype.itemsize
        if len(data) % width:
            raise Refusal(
                CLOSE_UNSUPPORTED_DATA,
                "bad_frame",
                f"a binary message of {len(data)} bytes is not a whole number of {width}-byte samples",
            )
        x = np.frombuffer(data, dtype=self.dtype)
        if self.dtype.kind == "i":
            return x.astype(np.float32) / 32768.0
        return x.astype(np.float32)


def parse_config(text: str | None, settings: ServerSettings, diarizers: tuple[str, ...] = ()) -> StreamConfig:
    """The first message of a session -> ``StreamConfig`` (names and types; the engine checks values).
    ``diarizers``: the names of the served diarizer, also accepted as ``model``.

    Raises:
        Refusal: not a JSON object, or one nested too deep (1003), a ``sample_format`` that is
            not one of the names (1003), a missing or bad ``sample_rate`` (1007), a ``model``
            that is not a string (1007) or not served (1008).
    """
    if text is None:
        raise Refusal(
            CLOSE_UNSUPPORTED_DATA, "bad_frame", "the first message must be the JSON configuration, not audio"
        )
    if json_too_deep(text, MAX_JSON_DEPTH):
        raise Refusal(
            CLOSE_UNSUPPORTED_DATA, "bad_frame", f"the first message is nested more than {MAX_JSON_DEPTH} levels deep"
        )
    try:
        message = json.loads(text)
    except ValueError as e:
        raise Refusal(CLOSE_UNSUPPORTED_DATA, "bad_frame", f"the first message is not JSON: {e}") from None
    if not isinstance(message, dict):
        raise Refusal(CLOSE_UNSUPPORTED_DATA, "bad_frame", "the first message must be a JSON object")
    options = dict(message)
    fmt = options.pop("sample_format", "pcm16")
    if not isinstance(fmt, str) or fmt not in SAMPLE_FORMATS:
        raise Refusal(
            CLOSE_UNSUPPORTED_DATA,
            "bad_frame",
            f"sample_format {fmt!r} is not one of {sorted(SAMPLE_FORMATS)}",
        )
    rate = options.get("sample_rate")
    if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
        raise Refusal(
            CLOSE_INVALID_PAYLOAD, "invalid_options", f"sample_rate must be a positive integer (Hz), got {rate!r}"
        )
    model = options.pop("model", None)
    if model is not None and not isinstance(model, str):
        raise Refusal(CLOSE_INVALID_PAYLOAD, "invalid_options", f"model must be a string, got {model!r}")
    if model is not None and model not in settings.model_names and model not in diarizers:
        raise Refusal(
            CLOSE_POLICY,
            "model_not_found",
            settings.unknown_model(model),
        )
    return StreamConfig(rate, SAMPLE_FORMATS[fmt], {**settings.decode_options(), **options}, model, frozenset(options))


class OpenSessions:
    """The count of live WebSocket sessions open now, shared by the routes ``--max-streams`` bounds
    (``/v1/audio/stream`` and ``/v1/realtime``)."""

    def __init__(self) -> None:
        self.n = 0


class StreamingEndpoint:
    """Serves ``/v1/audio/stream`` sessions over one ``AsyncEngine`` (see the module).

    Args:
        engine: the ``AsyncEngine``.
        settings: the server's settings (limits).
        metrics: the server's metrics (sessions, open connections).
        sessions: the open-session count this route shares with the other live routes (None: its own).
    """

    def __init__(
        self, engine, settings: ServerSettings, metrics: ServerMetrics, sessions: OpenSessions | None = None
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.metrics = metrics
        self.sessions = sessions or OpenSessions()

    async def handle(self, ws: WebSocket) -> None:
        """One WebSocket session, from the upgrade to the close."""
        refusal = self.refusal(engine_stream=ws.query_params.get("model") not in self._diarizer_names())
        if refusal is not None:
            self.metrics.stream_sessions.labels(str(refusal.status)).inc()
            await ws.send_denial_response(refusal.response())
            return
        self.sessions.n += 1
        self.metrics.stream_connections.inc()
        close_code = CLOSE_INTERNAL_ERROR
        try:
            await ws.accept(subprotocol=self.subprotocol(ws))
            close_code = await self._session(ws)
        finally:
            self.sessions.n -= 1
            self.metrics.stream_connections.dec()
            self.metrics.stream_sessions.labels(str(close_code)).inc()

    def subprotocol(self, ws: WebSocket) -> str | None:
        """The WebSocket subprotocol the upgrade answers with (None: none)."""
        return None

    def refusal(self, engine_stream: bool = True) -> APIError | None:
        """Why an upgrade would be refused now (None: it would be accepted); ``engine_stream``: the session will
        hold one of the engine's live streams (its slot and the streaming loop are checked)."""
        if not engine_alive(self.engine):
            return APIError(503, "the engine is not running", code="engine_stopped")
        if engine_stream and not streaming_alive(self.engine):
            return APIError(503, "the engine's streaming loop has stopped", code="streaming_stopped")
        reason = stream_support(self.engine) if engine_stream else None
        if reason is not None:
            return APIError(400, f"{reason}; use /v1/audio/transcriptions", code="streaming_unsupported")
        retry = {"Retry-After": str(RETRY_AFTER_S)}
        if self.sessions.n >= self.settings.max_streams:
            return APIError(
                429,
                f"all {self.settings.max_streams} stream slots are in use; retry later",
                code="streams_full",
                headers=retry,
            )
        loop = self.engine.streaming
        if engine_stream and loop is not None and not loop.core.can_admit():
            return APIError(
                429,
                "the engine has no room for one more live stream (every encoder cache slot, or the K/V pool, "
                "is taken); retry later",
                code="streams_full",
                headers=retry,
            )
        return None

    async def _session(self, ws: WebSocket) -> int:
        """Run the session; the code it ended with (``disconnect_label`` when the client's side ended it)."""
        stream = None
        try:
            diarizers = self._diarizer_names()
            config = parse_config(await self._receive_text_or_none(ws), self.settings, diarizers)
            model = config.model or ws.query_params.get("model")
            if model is not None and model in diarizers and model not in self.settings.model_names:
                close_code = await self._diarize(ws, config)
            else:
                stream = await self._open(config)
                close_code = await self._pump(ws, stream, config)
        except Refusal as r:
            if stream is not None:
                stream.close()
            return await self._refuse(ws, r)
        except _Gone as g:
            return disconnect_label(g.code)
        except Exception as e:  # a bug: this session ends with 1011, the server goes on
            log.error("stream session failed", exc_info=e)
            if stream is not None:
                stream.close()
            return await self._refuse(
                ws, Refusal(CLOSE_INTERNAL_ERROR, "internal_error", f"internal error: {type(e).__name__}")
            )
        finally:
            if stream is not None:
                stream.close()  # a hang-up: the slot and cache are freed now (no-op once done)
        with contextlib.suppress(Exception):
            await ws.close(close_code)
        return close_code

    def _diarizer_names(self) -> tuple[str, ...]:
        """The names of the engine's diarizer when it streams (``--diarize-model`` as given and its
        last path component), else ()."""
        service = getattr(self.engine, "diarization", None)
        path = getattr(getattr(self.engine, "config", None), "diarize_model", None)
        if path is None or not callable(getattr(getattr(service, "diarizer", None), "stream", None)):
            return ()
        return (str(path), Path(str(path)).name)

    async def _diarize(self, ws: WebSocket, config: StreamConfig) -> int:
        """A diarization session (see the module): audio in, speaker-turn events out."""
        import soxr

        from oasr.audio.io import AudioDecodeError, check_samples

        diarizer = self.engine.diarization.diarizer
        unknown = sorted(config.asked - {"sample_rate", "streaming_mode"})
        if unknown:
            raise Refusal(CLOSE_INVALID_PAYLOAD, "invalid_options", f"a diarization stream takes no {unknown}")
        try:
            stream = diarizer.stream(config.options.get("streaming_mode"))
        except (TypeError, ValueError) as e:
            raise Refusal(CLOSE_INVALID_PAYLOAD, "invalid_options", str(e)) from None
        rate = diarizer.sampling_rate
        resampler = None if config.sample_rate == rate else soxr.ResampleStream(config.sample_rate, rate, 1, "float32")
        limit = self.settings.max_audio_s
        received = 0
        while True:
            message = await self._receive(ws)
            text = message.get("text")
            if text is not None:
                if text.strip() != END_OF_INPUT:
                    raise Refusal(CLOSE_UNSUPPORTED_DATA, "bad_frame", f"a text message must be {END_OF_INPUT!r}")
                tail = (
                    np.zeros(0, np.float32)
                    if resampler is None
                    else resampler.resample_chunk(np.zeros(0, np.float32), last=True)
                )
                events = await asyncio.to_thread(stream.feed, tail)
                events += await asyncio.to_thread(stream.close)
                for event in [*(e.to_dict() for e in events), {"type": "done"}]:
                    await self._send(ws, event)
                return CLOSE_NORMAL
            x = config.samples(message.get("bytes") or b"")
            received += x.size
            if limit is not None and received > math.ceil(limit * config.sample_rate):
                raise Refusal(CLOSE_POLICY, "audio_too_long", f"the stream is longer than the {limit:g}-s limit")
            try:
                check_samples(x, "the stream")
            except AudioDecodeError as e:
                raise Refusal(CLOSE_INVALID_PAYLOAD, "invalid_audio", str(e)) from None
            if resampler is not None:
                x = resampler.resample_chunk(x)
            for event in await asyncio.to_thread(stream.feed, x):
                await self._send(ws, event.to_dict())

    async def _open(self, config: StreamConfig):
        try:
            return await self.engine.open_stream(**config.options)
        except EngineOverloaded as e:
            raise Refusal(CLOSE_TRY_AGAIN_LATER, "streams_full", str(e)) from None
        except EngineStopped as e:
            raise Refusal(CLOSE_INTERNAL_ERROR, "engine_stopped", str(e)) from None
        except LanguageError as e:
            raise Refusal(CLOSE_INVALID_PAYLOAD, "invalid_language", str(e)) from None
        except (TypeError, ValueError, ImportError) as e:  # ImportError: endpoint_vad without silero-vad
            raise Refusal(CLOSE_INVALID_PAYLOAD, "invalid_options", str(e)) from None
        except RuntimeError as e:  # the streaming loop stopped (``/health`` says so too)
            raise Refusal(CLOSE_INTERNAL_ERROR, "streaming_stopped", str(e)) from None

    async def _receive(self, ws: WebSocket, wait_s: float | None = None) -> dict[str, Any] | None:
        """The next message; None when ``wait_s`` (shorter than the idle timeout) passed without one."""
        timeout = self.settings.stream_idle_s if wait_s is None else min(wait_s, self.settings.stream_idle_s)
        try:
            message = await _within(ws.receive(), timeout)
        except asyncio.TimeoutError:
            if wait_s is not None and wait_s < self.settings.stream_idle_s:
                return None
            raise Refusal(
                CLOSE_POLICY, "idle_timeout", f"nothing received for {self.settings.stream_idle_s:g} s"
            ) from None
        except (WebSocketDisconnect, RuntimeError) as e:
            raise _Gone(getattr(e, "code", None)) from None
        if message["type"] == "websocket.disconnect":
            raise _Gone(message.get("code"))
        return message

    async def _receive_text_or_none(self, ws: WebSocket) -> str | None:
        message = await self._receive(ws)
        return message.get("text")

    async def _pump(self, ws: WebSocket, stream, config: StreamConfig) -> int:
        """Feed the client's audio and send the stream's events until one side ends it."""
        receiver = asyncio.ensure_future(self._feed(ws, stream, config))
        sender = asyncio.ensure_future(self._send_events(ws, stream))
        try:
            done, _ = await asyncio.wait({receiver, sender}, return_when=asyncio.FIRST_COMPLETED)
            if sender in done:
                if isinstance(sender.exception(), _Gone) and receiver not in done:
                    # A send failed: the receiver hears how the connection ended (a close frame, a reset).
                    await asyncio.wait({receiver}, timeout=1.0)
                if receiver.done() and isinstance(receiver.exception(), _Gone):
                    receiver.result()
                return sender.result()
            receiver.result()  # raises Refusal / _Gone; returning means "done" was received
            return await sender
        finally:
            for task in (receiver, sender):
                task.cancel()
                with contextlib.suppress(BaseException):  # (also takes the exception of a task that ended too)
                    await task

    async def _feed(self, ws: WebSocket, stream, config: StreamConfig) -> None:
        max_samples = None
        if self.settings.max_audio_s is not None:
            max_samples = int(math.ceil(self.settings.max_audio_s * config.sample_rate))
        received = 0
        held = _Held(max(1, int(MIN_PUSH_S * config.sample_rate)))
        while True:
            # Backpressure: a client sending faster than the engine decodes waits here (its
            # frames stay in the socket) instead of piling audio up in memory.
            while not held.n and stream.backlog_s > MAX_BACKLOG_S and not stream.done:
                await asyncio.sleep(0.01)
            message = await self._receive(ws, FLUSH_S if held.n else None)
            if message is None:  # nothing more came soon: the held samples go to the engine
                if not self._push(stream, held.take()):
                    return
                continue
            text, data = message.get("text"), message.get("bytes")
            if text is not None:
                if text.strip() == END_OF_INPUT:
                    if self._push(stream, held.take()):
                        with contextlib.suppress(KeyError):  # already ended by the engine: its events say why
                            stream.finish()
                    return
                raise Refusal(
                    CLOSE_UNSUPPORTED_DATA,
                    "bad_frame",
                    f"a text message must be {END_OF_INPUT!r}; audio goes in binary messages",
                )
            x = config.samples(data or b"")
            received += x.size
            if max_samples is not None and received > max_samples:
                limit = self.settings.max_audio_s
                raise Refusal(CLOSE_POLICY, "audio_too_long", f"the stream is longer than the {limit:g}-s limit")
            if held.add(x) and not self._push(stream, held.take()):
                return

    @staticmethod
    def _push(stream, x: np.ndarray | None) -> bool:
        """Queue samples on the engine's stream; False once the engine has ended it (its error
        event is on the way)."""
        if x is None:
            return True
        try:
            stream.feed(x)
        except StreamError as e:
            raise Refusal(_ENGINE_CLOSE_CODES.get(e.code, CLOSE_UNSUPPORTED_DATA), e.code, str(e)) from None
        except KeyError:
            return False
        return True

    async def _send_events(self, ws: WebSocket, stream) -> int:
        async for event in stream:
            message = event.to_dict()
            if event.code in _RETRY_LATER:
                message["retry_after_s"] = RETRY_AFTER_S
            await self._send(ws, message)
            if event.type == "error":
                return _ENGINE_CLOSE_CODES.get(event.code or "", CLOSE_INTERNAL_ERROR)
        return CLOSE_NORMAL

    async def _send(self, ws: WebSocket, message: dict[str, Any]) -> None:
        if ws.application_state != WebSocketState.CONNECTED or ws.client_state != WebSocketState.CONNECTED:
            raise _Gone()
        try:
            await ws.send_text(json.dumps(message))
        except (WebSocketDisconnect, RuntimeError, OSError):
            raise _Gone() from None

    async def _refuse(self, ws: WebSocket, refusal: Refusal) -> int:
        try:
            await self._send(ws, refusal.event())
            await ws.close(refusal.close_code, reason=refusal.code)
        except (_Gone, RuntimeError, OSError):
            return 0
        return refusal.close_code


if sys.version_info >= (3, 11):

    async def _within(awaitable, seconds: float):
        """``await awaitable`` for at most ``seconds`` (``asyncio.TimeoutError``); unlike
        ``wait_for`` no task per call: a receive is awaited once per WebSocket message."""
        async with asyncio.timeout(seconds):
            return await awaitable

else:  # pragma: no cover - Python 3.10
    _within = asyncio.wait_for


class _Held:
    """Samples of short messages, joined until there are ``min_samples`` of them."""

    def __init__(self, min_samples: int) -> None:
        self.min_samples = min_samples
        self.parts: list[np.ndarray] = []
        self.n = 0

    def add(self, x: np.ndarray) -> bool:
        """Hold ``x``; whether enough is held to go to the engine."""
        if x.size:
            self.parts.append(x)
            self.n += x.size
        return self.n >= self.min_samples

    def take(self) -> np.ndarray | None:
        """All the held samples (None when there are none)."""
        if not self.parts:
            return None
        x = self.parts[0] if len(self.parts) == 1 else np.concatenate(self.parts)
        self.parts, self.n = [], 0
        return x
