"""``/v1/audio/stream``: live transcription over a WebSocket.

The life of a session:

1. Upgrade. Refused before it, with an HTTP answer in OpenAI's error shape: 401 without the
   API key (when one is set; checked by ``GateMiddleware``), 400 ``streaming_unsupported`` when
   the model's encoder is offline-only, 429 ``streams_full`` when every stream slot
   (``--max-streams``) is taken by an open connection, 503 when the engine has stopped.
2. The first message, text: a JSON object with ``sample_rate`` (Hz of the samples that follow;
   required), ``sample_format`` (``"pcm16"``: signed 16-bit little-endian, the default, or
   ``"float32"``: IEEE float little-endian in [-1, 1]), optionally ``model`` (one of the served
   names) and the stream's options: the decoding options ``/v1/audio/transcriptions`` takes
   (``language``, ``beam_size``, ``ctc_weight``, ``word_timestamps``, ...) and ``endpoint``,
   ``partials``, ``rule1_min_trailing_silence``, ``rule2_min_trailing_silence``,
   ``rule3_min_utterance_length``. What ``oasr serve`` set for every request (``--beam-size``)
   applies unless the message sets it. The stream opens then (its encoder cache slot is taken).
3. Binary messages: mono samples in that format, of any length.
4. Events back, one JSON text message each (``StreamEvent.to_dict``): ``partial`` (segment,
   text, start, end), ``final`` (segment, text, start, end, tokens, words with
   ``word_timestamps``), ``endpoint`` (segment, time), ``error`` (code, message) and ``done``.
5. The text message ``"done"`` ends the input: the rest is decoded, the last ``final`` and
   ``done`` are sent and the server closes with 1000.

Close codes (after an ``error`` event naming the problem, except for 1009):

====  =======================================================================
1000  the stream ended after ``"done"`` (the last final and ``done`` were sent)
1003  unsupported data: a first message that is not a JSON object, audio before it, a text
      message other than ``"done"``, an unknown ``sample_format``, a binary message that is
      not whole samples, samples after ``"done"``
1007  invalid payload: non-finite samples (NaN / Inf), options / a sample rate the model
      refuses (``invalid_options``), or a ``language`` it does not have (``invalid_language``)
1008  policy: the stream passed ``--max-audio-seconds`` (``audio_too_long``), sent nothing for
      ``--stream-idle-timeout`` seconds (``idle_timeout``), or named a model not served
1009  a message over ``--max-message-kb`` (closed by the WebSocket layer, no event)
1011  the stream failed inside the engine (``engine_error``); the server goes on
1012  the server is shutting down (SIGTERM): uvicorn closes open WebSockets at once, no event
1013  every stream slot was taken when the stream opened (``streams_full``), or the stream outgrew
      the shared attention cache (``cache_full``): try again later
====  =======================================================================

A client that disconnects mid-stream has its stream dropped at once: its slot and encoder
cache are free for the next connection (``oasr_streams_active`` on ``/metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from oasr.engine.async_engine import EngineStopped
from oasr.engine.decode.base import EngineOverloaded
from oasr.engine.streaming.core import StreamError
from oasr.languages import LanguageError
from oasr.server.errors import APIError
from oasr.server.metrics import ServerMetrics
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

# The engine's error codes (error events) -> close codes.
_ENGINE_CLOSE_CODES = {
    "invalid_audio": CLOSE_INVALID_PAYLOAD,
    "audio_too_long": CLOSE_POLICY,
    "bad_request": CLOSE_UNSUPPORTED_DATA,
    "cache_full": CLOSE_TRY_AGAIN_LATER,  # the stream outgrew the shared K/V pool
}


class Refusal(Exception):
    """The session ends with an ``error`` event (``code``, message) and ``close_code``."""

    def __init__(self, close_code: int, code: str, message: str) -> None:
        super().__init__(message)
        self.close_code = close_code
        self.code = code


class _Gone(Exception):
    """The client went away."""


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


def parse_config(text: str | None, settings: ServerSettings) -> StreamConfig:
    """The first message of a session -> ``StreamConfig`` (names and types; the engine checks values).

    Raises:
        Refusal: not a JSON object (1003), an unknown ``sample_format`` (1003), a missing or bad
            ``sample_rate`` (1007), a model that is not served (1008).
    """
    if text is None:
        raise Refusal(
            CLOSE_UNSUPPORTED_DATA, "bad_frame", "the first message must be the JSON configuration, not audio"
        )
    try:
        message = json.loads(text)
    except ValueError as e:
        raise Refusal(CLOSE_UNSUPPORTED_DATA, "bad_frame", f"the first message is not JSON: {e}") from None
    if not isinstance(message, dict):
        raise Refusal(CLOSE_UNSUPPORTED_DATA, "bad_frame", "the first message must be a JSON object")
    options = dict(message)
    fmt = options.pop("sample_format", "pcm16")
    if fmt not in SAMPLE_FORMATS:
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
    if model is not None and model not in settings.model_names:
        raise Refusal(
            CLOSE_POLICY,
            "model_not_found",
            f"the model {model!r} does not exist; this server serves {list(settings.model_names)}",
        )
    return StreamConfig(rate, SAMPLE_FORMATS[fmt], {**settings.decode_options(), **options})


class StreamingEndpoint:
    """Serves ``/v1/audio/stream`` sessions over one ``AsyncEngine`` (see the module).

    Args:
        engine: the ``AsyncEngine``.
        settings: the server's settings (limits).
        metrics: the server's metrics (sessions, open connections).
    """

    def __init__(self, engine, settings: ServerSettings, metrics: ServerMetrics) -> None:
        self.engine = engine
        self.settings = settings
        self.metrics = metrics
        self.connections = 0

    async def handle(self, ws: WebSocket) -> None:
        """One WebSocket session, from the upgrade to the close."""
        refusal = self._refusal()
        if refusal is not None:
            self.metrics.stream_sessions.labels(str(refusal.status)).inc()
            await ws.send_denial_response(refusal.response())
            return
        self.connections += 1
        self.metrics.stream_connections.inc()
        close_code = CLOSE_INTERNAL_ERROR
        try:
            await ws.accept()
            close_code = await self._session(ws)
        finally:
            self.connections -= 1
            self.metrics.stream_connections.dec()
            self.metrics.stream_sessions.labels(str(close_code)).inc()

    def _refusal(self) -> APIError | None:
        if not engine_alive(self.engine):
            return APIError(503, "the engine is not running", code="engine_stopped")
        model = self.engine.model
        if model.encoder.streaming_kind == "none":
            return APIError(
                400,
                f"this server's model ({type(model).__name__}) cannot stream: its encoder is offline-only; "
                "use /v1/audio/transcriptions",
                code="streaming_unsupported",
            )
        if self.connections >= self.settings.max_streams:
            return APIError(
                429,
                f"all {self.settings.max_streams} stream slots are in use; retry later",
                code="streams_full",
                headers={"Retry-After": "1"},
            )
        return None

    async def _session(self, ws: WebSocket) -> int:
        """Run the session; the close code it ended with (0: the client went away)."""
        stream = None
        try:
            config = parse_config(await self._receive_text_or_none(ws), self.settings)
            stream = await self._open(config)
            close_code = await self._pump(ws, stream, config)
        except Refusal as r:
            if stream is not None:
                stream.close()
            return await self._refuse(ws, r)
        except _Gone:
            return 0
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

    async def _open(self, config: StreamConfig):
        try:
            return await self.engine.open_stream(**config.options)
        except EngineOverloaded as e:
            raise Refusal(CLOSE_TRY_AGAIN_LATER, "streams_full", str(e)) from None
        except EngineStopped as e:
            raise Refusal(CLOSE_INTERNAL_ERROR, "engine_stopped", str(e)) from None
        except LanguageError as e:
            raise Refusal(CLOSE_INVALID_PAYLOAD, "invalid_language", str(e)) from None
        except (TypeError, ValueError) as e:
            raise Refusal(CLOSE_INVALID_PAYLOAD, "invalid_options", str(e)) from None

    async def _receive(self, ws: WebSocket) -> dict[str, Any]:
        try:
            message = await asyncio.wait_for(ws.receive(), self.settings.stream_idle_s)
        except asyncio.TimeoutError:
            raise Refusal(
                CLOSE_POLICY, "idle_timeout", f"nothing received for {self.settings.stream_idle_s:g} s"
            ) from None
        except (WebSocketDisconnect, RuntimeError):
            raise _Gone() from None
        if message["type"] == "websocket.disconnect":
            raise _Gone()
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
        while True:
            # Backpressure: a client sending faster than the engine decodes waits here (its
            # frames stay in the socket) instead of piling audio up in memory.
            while stream.backlog_s > MAX_BACKLOG_S and not stream.done:
                await asyncio.sleep(0.01)
            message = await self._receive(ws)
            text, data = message.get("text"), message.get("bytes")
            if text is not None:
                if text.strip() == END_OF_INPUT:
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
            try:
                stream.feed(x)
            except StreamError as e:
                raise Refusal(_ENGINE_CLOSE_CODES.get(e.code, CLOSE_UNSUPPORTED_DATA), e.code, str(e)) from None
            except KeyError:  # the engine ended the stream (a failed step): its error event is on the way
                return

    async def _send_events(self, ws: WebSocket, stream) -> int:
        async for event in stream:
            await self._send(ws, event.to_dict())
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
            await self._send(ws, {"type": "error", "code": refusal.code, "message": str(refusal)})
            await ws.close(refusal.close_code, reason=refusal.code)
        except (_Gone, RuntimeError, OSError):
            return 0
        return refusal.close_code
