"""``create_app``: the FastAPI application of ``oasr serve``.

Around the routes (``oasr.server.routes``) sits one ASGI middleware that, before any
body is read:

* counts audio requests (``oasr_requests_total{endpoint,status}``, latency,
  in-flight; see ``oasr.server.metrics``), including the ones it refuses;
* checks ``Authorization: Bearer <key>`` on every ``/v1/...`` path when an API key
  is set (401 otherwise, for a WebSocket upgrade too; ``/health``, ``/metrics`` and the page at
  ``/`` stay open). A browser cannot set headers on a WebSocket, so an upgrade may carry the key
  as the subprotocol ``openai-insecure-api-key.<key>`` instead, as OpenAI's browser clients do
  (``websocket_api_key``); a route that accepts without naming a subprotocol then answers that one;
* enforces ``--max-upload-mb`` on the audio routes: a ``Content-Length`` over the
  limit is refused with 413 at once, without reading the body, and the bytes
  actually received are counted as they arrive (chunked uploads, or a lying
  header), failing the request with 413 as soon as they pass the limit. Nothing
  is buffered: Starlette's multipart parser spools file parts to disk past 1 MiB;
* closes an upload that sends nothing for ``--upload-idle-timeout`` seconds with 408.

Exception handlers turn every error into OpenAI's error body (``oasr.server.errors``).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from oasr.server.errors import APIError, UploadIdle, UploadTooLarge, bad_request, error_for_status
from oasr.server.lifecycle import Drain, ShuttingDown
from oasr.server.metrics import ServerMetrics
from oasr.server.protocol import ModelCard, ModelList
from oasr.server.realtime import RealtimeEndpoint
from oasr.server.routes import router
from oasr.server.serving import CLIENT_GONE, OpenAIServingTranscription, OpenAIServingTranslation
from oasr.server.settings import ServerSettings
from oasr.server.streaming import OpenSessions, StreamingEndpoint

log = logging.getLogger("oasr.server")

KEY_SUBPROTOCOL = "openai-insecure-api-key."  # a WebSocket's API key, the way browsers send it
AUDIO_ENDPOINTS = {"/v1/audio/transcriptions": "transcriptions", "/v1/audio/translations": "translations"}


def build_engine(settings: ServerSettings):
    """Load the model into an ``AsyncEngine`` as ``settings`` ask."""
    from oasr.engine.async_engine import AsyncEngine

    return AsyncEngine(settings.model, prepare_workers=settings.prepare_workers, **settings.engine_kwargs())


def create_app(settings: ServerSettings | None = None, engine=None) -> FastAPI:
    """The server application.

    Args:
        settings: the server's settings (defaults: ``ServerSettings()``).
        engine: an ``AsyncEngine`` to serve; the caller keeps ownership (shuts it
            down). None: the app loads one from ``settings`` at startup and shuts it
            down at exit.
    """
    settings = settings or ServerSettings()
    state = {"engine": engine}
    metrics = ServerMetrics(lambda: state["engine"])
    drain = Drain()

    def attach(app: FastAPI, eng) -> None:
        state["engine"] = eng
        app.state.engine = eng
        app.state.transcription = OpenAIServingTranscription(eng, settings, metrics, drain)
        app.state.translation = OpenAIServingTranslation(eng, settings, metrics, drain)
        sessions = OpenSessions()  # --max-streams bounds both live routes together
        app.state.streaming = StreamingEndpoint(eng, settings, metrics, sessions)
        app.state.realtime = RealtimeEndpoint(eng, settings, metrics, sessions)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        drain.bind(asyncio.get_running_loop())
        owned = None
        if state["engine"] is None:
            owned = await run_in_threadpool(build_engine, settings)
            attach(app, owned)
        try:
            yield
        finally:
            if owned is not None:
                owned.shutdown()

    app = FastAPI(
        title="oasr",
        summary="OpenAI-compatible speech-to-text API",
        version=_version(),
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.drain = drain
    app.state.engine = None
    created = int(time.time())
    primary = settings.model_names[0]
    app.state.model_list = ModelList(
        data=[ModelCard(id=name, created=created, root=str(settings.model or primary)) for name in settings.model_names]
    )
    if engine is not None:
        attach(app, engine)

    app.include_router(router)
    if settings.ui:
        from oasr.server.ui import router as ui_router

        app.include_router(ui_router)
    _install_error_handlers(app)
    app.add_middleware(GateMiddleware, settings=settings, metrics=metrics)
    return app


def _version() -> str:
    from oasr import __version__

    return __version__


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return exc.response()

    @app.exception_handler(UploadTooLarge)
    async def _too_large(request: Request, exc: UploadTooLarge):
        return exc.api_error().response()

    @app.exception_handler(UploadIdle)
    async def _idle(request: Request, exc: UploadIdle):
        return exc.api_error().response()

    @app.exception_handler(ShuttingDown)
    async def _shutting_down(request: Request, exc: ShuttingDown):
        return APIError(503, str(exc), code="server_shutting_down").response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        detail = exc.detail if isinstance(exc.detail, str) else None
        err = error_for_status(exc.status_code, detail)
        if exc.headers:
            err.headers = dict(exc.headers)
        return err.response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        param = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")) or None
        return bad_request(f"{param}: {first['msg']}" if param else first["msg"], param=param).response()

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.error("unhandled error on %s", request.url.path, exc_info=exc)
        return APIError(500, f"internal error: {type(exc).__name__}", code="internal_error").response()


class GateMiddleware:
    """Metrics, API-key check and upload-size limit, before the body is read (see the module notes)."""

    def __init__(self, app: ASGIApp, settings: ServerSettings, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics
        self.limit = settings.max_upload_bytes
        self.idle_s = settings.upload_idle_s
        self.api_key = settings.api_key.encode() if settings.api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            if self.api_key is not None and scope["path"].startswith("/v1/") and not self._authorized(scope):
                await WebSocket(scope, receive, send).send_denial_response(self._unauthorized().response())
                return
            await self.app(scope, receive, _answer_key_subprotocol(scope, send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        endpoint = AUDIO_ENDPOINTS.get(path.rstrip("/") or path)
        if endpoint is None:
            if self.api_key is not None and path.startswith("/v1/") and not self._authorized(scope):
                await self._unauthorized().response()(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return

        metrics = self.metrics
        status = 500
        started = time.perf_counter()
        metrics.in_flight.inc()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            refusal = self._refusal(scope)
            if refusal is not None:
                await refusal.response()(scope, receive, send_wrapper)
                return
            await self.app(scope, _limited(receive, self.limit, self.idle_s), send_wrapper)
        finally:
            metrics.in_flight.dec()
            label = "499" if scope.get(CLIENT_GONE) else str(status)
            metrics.requests.labels(endpoint, label).inc()
            metrics.latency.labels(endpoint).observe(time.perf_counter() - started)

    def _refusal(self, scope: Scope) -> APIError | None:
        if self.api_key is not None and not self._authorized(scope):
            return self._unauthorized()
        length = _header(scope, b"content-length")
        if length is not None:
            try:
                size = int(length)
            except ValueError:
                return bad_request(f"invalid Content-Length header {length!r}", code="invalid_header")
            if size > self.limit:
                return UploadTooLarge(self.limit).api_error()
        return None

    def _authorized(self, scope: Scope) -> bool:
        value = _header(scope, b"authorization") or ""
        scheme, _, token = value.partition(" ")
        if scheme.lower() == "bearer":
            return hmac.compare_digest(token.strip().encode(), self.api_key or b"")
        key = websocket_api_key(scope) if scope["type"] == "websocket" else None
        return key is not None and hmac.compare_digest(key.encode(), self.api_key or b"")

    @staticmethod
    def _unauthorized() -> APIError:
        return APIError(
            401,
            "missing or invalid API key: send 'Authorization: Bearer <key>'",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )


def _key_subprotocol(scope: Scope) -> str | None:
    return next((p for p in scope.get("subprotocols", ()) if p.startswith(KEY_SUBPROTOCOL)), None)


def websocket_api_key(scope: Scope) -> str | None:
    """The API key a WebSocket upgrade offers as the subprotocol ``openai-insecure-api-key.<key>``
    (a browser's way: it cannot set ``Authorization``), or None when it offers none."""
    offered = _key_subprotocol(scope)
    return offered[len(KEY_SUBPROTOCOL) :] if offered is not None else None


def _answer_key_subprotocol(scope: Scope, send: Send) -> Send:
    """``send`` that answers the key subprotocol on an accept that names none: a browser drops a
    connection whose answer names none of the subprotocols it offered."""
    offered = _key_subprotocol(scope)
    if offered is None:
        return send

    async def wrapper(message: Message) -> None:
        if message["type"] == "websocket.accept" and not message.get("subprotocol"):
            message = {**message, "subprotocol": offered}
        await send(message)

    return wrapper


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _limited(receive: Receive, limit: int, idle_s: float) -> Receive:
    """``receive`` that raises ``UploadTooLarge`` once more than ``limit`` body bytes arrived,
    and ``UploadIdle`` when the body stops arriving for ``idle_s`` seconds."""
    received = 0
    complete = False

    async def wrapper() -> Message:
        nonlocal received, complete
        if complete:  # the body is in: what follows is the wait for a disconnect
            return await receive()
        try:
            message = await asyncio.wait_for(receive(), idle_s)
        except asyncio.TimeoutError:
            raise UploadIdle(idle_s) from None
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise UploadTooLarge(limit)
            complete = not message.get("more_body", False)
        return message

    return wrapper
