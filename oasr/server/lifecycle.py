"""The life of an ``oasr serve`` process around its routes: the port bound before the
model loads, a start-up check that decodes one second of silence, the graceful-shutdown
drain, an engine death turned into a non-zero exit, and the HTTP layer's own errors
in OpenAI's shape.

Order of start-up (``serve``): bind the port (taken: a clear message, no model load);
load the model; decode 1 s of silence (fails: refuse to start); with a streaming chunk or
history given, open and close one live stream (a chunk the model cannot serve: refuse to
start); only then serve, so ``/health`` says ok only for an engine that has decoded.

Shutdown (SIGTERM / Ctrl-C): uvicorn stops accepting and lets running requests finish
(open WebSockets are closed with 1012 at once); the process then exits 0 (uvicorn's own
habit of re-raising the signal, which would end it with 143, is not taken).
At ``--graceful-shutdown`` seconds the ``Drain`` fires: every request still waiting
(uploading, queued, decoding) is answered 503 ``server_shutting_down`` (a streamed one
gets an error event and ``[DONE]``) and its engine rows are freed; uvicorn itself gives
up ``_DRAIN_MARGIN_S`` later, by which time those answers have been sent.

Engine death (a bug, OOM in the decode loop): the engine fails every waiting request
with ``EngineStopped`` (503), ``/health`` answers 503, and the server stops with exit
code ``EXIT_ENGINE_DIED`` so that a supervisor restarts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

log = logging.getLogger("oasr.server")

T = TypeVar("T")

EXIT_ENGINE_DIED = 3
_DRAIN_MARGIN_S = 2.0  # uvicorn's own graceful timeout is the drain's plus this


class ShuttingDown(Exception):
    """The server is shutting down and will not finish this request (answered 503)."""


class Drain:
    """Fires once, at the end of the graceful-shutdown period (or at engine death):
    requests racing it are cancelled and answered 503."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The server's event loop (the drain is fired from signal handlers / other threads)."""
        self._loop = loop

    @property
    def fired(self) -> bool:
        return self._event.is_set()

    def fire_after(self, delay_s: float) -> None:
        """Fire in ``delay_s`` seconds; safe from any thread or a signal handler."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(loop.call_later, max(0.0, delay_s), self._event.set)

    async def race(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable``; if the drain fires first, cancel it and raise ``ShuttingDown``."""
        work = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # the caller was cancelled: so is the work
            work.cancel()
            stop.cancel()
            raise
        stop.cancel()
        if work.done():
            return work.result()
        work.cancel()
        with contextlib.suppress(BaseException):
            await work
        raise ShuttingDown("the server is shutting down and could not finish this request")

    async def wait(self) -> None:
        await self._event.wait()


# ---------------------------------------------------------------------------
# Start-up


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening: uvicorn listens once the
    model is loaded and checked; until then connections are refused, not left hanging).

    Raises:
        OSError: the address is taken or not available, with a message naming it.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise OSError(f"cannot resolve --host {host!r}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        hint = " (is another server running on it? pick another --port)" if e.errno in _IN_USE else ""
        raise OSError(e.errno, f"cannot bind {host}:{port}: {e.strerror}{hint}") from None
    return sock


_IN_USE = {98, 48, 10048}  # EADDRINUSE on Linux, macOS, Windows


async def warm_up(engine, settings) -> None:
    """Decode one second of silence with the server's options.

    Raises:
        RuntimeError: the engine could not decode it (the server must not start).
    """
    import numpy as np

    options = engine.make_options(task="transcribe", **settings.decode_options())
    silence = np.zeros(engine.sampling_rate, dtype=np.float32)
    try:
        await engine.transcribe(silence, options, timeout=settings.request_budget(1.0))
    except Exception as e:
        raise RuntimeError(f"decoding 1 s of silence failed ({type(e).__name__}: {e})") from e


async def check_streaming(engine) -> None:
    """Open and close one live stream (the streaming cache is allocated then).

    Raises:
        ValueError: the model cannot stream, or not with the configured chunk / history.
    """
    stream = await engine.open_stream()
    stream.close()


# ---------------------------------------------------------------------------
# uvicorn


def _json_400(message: str) -> bytes:
    from oasr.server.errors import bad_request

    return json.dumps(bad_request(message, code="invalid_http_request").body()).encode()


def _openai_shaped(protocol_cls: type) -> type:
    """``protocol_cls`` whose malformed-request answer (bad Content-Length, a header too
    large, broken framing: found by the HTTP parser before the app sees anything) has
    OpenAI's error body instead of uvicorn's plain text."""

    class OpenAIShapedProtocol(protocol_cls):  # type: ignore[misc, valid-type]
        def send_400_response(self, msg: str) -> None:
            body = _json_400(msg)
            head = [b"HTTP/1.1 400 Bad Request\r\n"]
            for name, value in self.server_state.default_headers:
                head.append(name + b": " + value + b"\r\n")
            head.append(b"content-type: application/json\r\n")
            head.append(b"content-length: " + str(len(body)).encode() + b"\r\n")
            head.append(b"connection: close\r\n\r\n")
            self.transport.write(b"".join(head) + body)
            self.transport.close()

    OpenAIShapedProtocol.__name__ = f"OpenAIShaped{protocol_cls.__name__}"
    return OpenAIShapedProtocol


def _http_protocol() -> type:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return _openai_shaped(HttpToolsProtocol)
    except ImportError:  # httptools absent: uvicorn's pure-Python h11 protocol
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return _openai_shaped(H11Protocol)


def _ws_protocol() -> type | str:
    """uvicorn's WebSocket protocol (``websockets``' sans-I/O one), with three corrections:

    - an upgrade refused with an HTTP answer (401, 429) is a completed exchange (uvicorn logs
      "returned without completing handshake" and writes a 500 after it);
    - a keepalive pong counts as late only while the server reads and nothing else comes
      from the peer either: a client sending faster than the engine decodes is not read from
      (backpressure), so its pong waits behind its audio, and its audio proves it alive;
    - a connection lost without a close frame (a TCP reset, EOF) reaches the app as 1006, not
      as 1005 (a close frame without a code), so that ``/metrics`` tells them apart.
    """
    try:
        from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
    except ImportError:  # websockets absent: uvicorn's own choice (wsproto, or none)
        return "auto"

    class StreamAwareProtocol(WebSocketsSansIOProtocol):
        heard_since_ping = False  # bytes came from the peer since the last keepalive ping

        async def send(self, message) -> None:
            await super().send(message)
            if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
                self.handshake_complete = True

        def data_received(self, data: bytes) -> None:
            self.heard_since_ping = True
            super().data_received(data)

        def send_keepalive_ping(self) -> None:
            self.heard_since_ping = False
            super().send_keepalive_ping()

        def keepalive_timeout(self) -> None:
            # Late only if the pong could have been read: not while the app has stopped reading
            # (backpressure: the pong is behind unread audio), nor when bytes came meanwhile.
            if (self.read_paused or self.heard_since_ping) and not (self.close_sent or self.transport.is_closing()):
                self.heard_since_ping = False  # wait one more timeout for the pong
                self.pong_timer = self.loop.call_later(self.ping_timeout, self.keepalive_timeout)
                return
            super().keepalive_timeout()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.handshake_complete and self.initial_response is None and self.conn.close_rcvd is None:
                self.queue.put_nowait({"type": "websocket.disconnect", "code": 1006})  # read before uvicorn's 1005
            super().connection_lost(exc)

    return StreamAwareProtocol


def run_server(
    app, settings, sock: socket.socket, *, graceful_s: float, engine=None, on_ready: Callable[[], None] | None = None
) -> int:
    """Serve ``app`` on the bound ``sock`` until a signal or engine death.

    ``on_ready`` is called once the server listens (uvicorn says nothing of where it listens
    when it is handed a socket); it checks what ``/health`` checks itself (``routes`` sits above
    this module).

    Returns:
        0 after a requested shutdown, ``EXIT_ENGINE_DIED`` when the engine's loop died.
    """
    import uvicorn

    drain: Drain = app.state.drain
    died: list[BaseException] = []

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_ready is not None:
                on_ready()

        def handle_exit(self, sig: int, frame: Any) -> None:
            if not self.should_exit:
                drain.fire_after(graceful_s)
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self):
            """uvicorn's, without raising the handled signal again at the end (the process would
            die of it, exit 143 for SIGTERM): ``run_server`` returns the exit code instead."""
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            from uvicorn.server import HANDLED_SIGNALS

            original = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED_SIGNALS}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    config = uvicorn.Config(
        app,
        log_level=settings.log_level,
        http=_http_protocol(),
        ws=_ws_protocol(),
        timeout_graceful_shutdown=graceful_s + _DRAIN_MARGIN_S,
        ws_max_size=settings.max_message_bytes,
        ws_ping_interval=settings.ws_ping_interval_s or None,
        ws_ping_timeout=settings.ws_ping_timeout_s,
    )
    server = Server(config)

    def on_death(exc: BaseException) -> None:  # the engine thread
        died.append(exc)
        drain.fire_after(0.0)
        server.should_exit = True

    if engine is not None:
        engine.add_death_callback(on_death)
    server.run(sockets=[sock])
    if died:
        log.critical("the engine stopped (%s: %s); exiting so that a supervisor restarts the server", *_named(died[0]))
        return EXIT_ENGINE_DIED
    if not server.started:
        return 1
    return 0


def _named(exc: BaseException) -> tuple[str, str]:
    return type(exc).__name__, str(exc)
