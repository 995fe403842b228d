"""The HTTP routes: each parses its input and hands it to the serving object in
``app.state`` (the logic lives in ``oasr.server.serving``)."""

from __future__ import annotations

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from oasr.server.errors import CLIENT_CLOSED_REQUEST, APIError, UploadIdle, UploadTooLarge, bad_request
from oasr.server.protocol import (
    ErrorResponse,
    FormError,
    Health,
    ModelCard,
    ModelList,
    TranscriptionRequest,
    TranslationRequest,
    parse_form,
)
from oasr.server.serving import CLIENT_GONE, engine_alive
from oasr.server.streaming import streaming_alive

router = APIRouter()

_ERRORS = {status: {"model": ErrorResponse} for status in (400, 401, 404, 408, 413, 429, 503, 504)}
_MAX_FORM_FIELDS = 64
_MAX_PART_BYTES = 4 << 20  # a text field: a known speaker's 10-s reference as a data URL (48 kHz stereo WAV: 2.6 MB)


async def read_form(request: Request, request_cls: type[TranslationRequest]):
    """Receive the multipart form (file parts are spooled to disk past 1 MiB) and validate it."""
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise bad_request(
            f"expected a multipart/form-data body, got {content_type or 'no content type'!r}",
            code="invalid_content_type",
        )
    try:
        form: FormData = await request.form(max_files=4, max_fields=_MAX_FORM_FIELDS, max_part_size=_MAX_PART_BYTES)
    except (UploadTooLarge, UploadIdle) as e:
        raise e.api_error() from None
    except HTTPException as e:  # malformed multipart, too many parts
        raise bad_request(f"malformed multipart body: {e.detail}", code="invalid_body") from None
    try:
        return parse_form(form, request_cls)
    except FormError as e:
        await form.close()
        raise bad_request(e.message, param=e.param, code=e.code) from None


async def _audio(request: Request, request_cls: type[TranslationRequest], serving) -> Response:
    try:
        req, upload = await serving.drain.race(read_form(request, request_cls))
    except ClientDisconnect:
        request.scope[CLIENT_GONE] = True
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    try:
        return await serving.create(req, upload, request)
    finally:
        await _close(upload)


async def _close(upload: UploadFile) -> None:
    try:
        await upload.close()
    except Exception:  # noqa: BLE001 - a temp file that will not close is not the client's problem
        pass


@router.post("/v1/audio/transcriptions", responses=_ERRORS)
async def create_transcription(request: Request) -> Response:
    """OpenAI's ``audio.transcriptions.create`` (multipart form; see ``oasr.server.protocol``)."""
    return await _audio(request, TranscriptionRequest, request.app.state.transcription)


@router.post("/v1/audio/translations", responses=_ERRORS)
async def create_translation(request: Request) -> Response:
    """OpenAI's ``audio.translations.create``: speech in any language to English text."""
    return await _audio(request, TranslationRequest, request.app.state.translation)


@router.websocket("/v1/audio/stream")
async def stream_transcription(websocket: WebSocket) -> None:
    """Live transcription: JSON configuration, binary audio, JSON events (``oasr.server.streaming``)."""
    await websocket.app.state.streaming.handle(websocket)


@router.websocket("/v1/realtime")
async def realtime_transcription(websocket: WebSocket) -> None:
    """OpenAI's Realtime API transcription sessions (``oasr.server.realtime``)."""
    await websocket.app.state.realtime.handle(websocket)


@router.get("/v1/audio/stream", responses=_ERRORS | {426: {"model": ErrorResponse}})
async def stream_preflight(request: Request) -> Response:
    """Over plain HTTP, the answer an upgrade would get now: its refusal (400 ``streaming_unsupported``,
    429, 503), else 426 ``upgrade_required``. A browser's WebSocket hides a refused upgrade's answer."""
    refusal = request.app.state.streaming.refusal()
    if refusal is not None:
        return refusal.response()
    message = "/v1/audio/stream is a WebSocket: send an upgrade to stream (the protocol: oasr.server.streaming)"
    return APIError(426, message, code="upgrade_required", headers={"Upgrade": "websocket"}).response()


@router.get("/v1/models", response_model=ModelList)
async def list_models(request: Request) -> ModelList:
    return request.app.state.model_list


@router.get("/v1/models/{model_id:path}", response_model=ModelCard, responses={404: {"model": ErrorResponse}})
async def retrieve_model(model_id: str, request: Request) -> ModelCard:
    for card in request.app.state.model_list.data:
        if card.id == model_id:
            return card
    message = request.app.state.settings.unknown_model(model_id)
    raise APIError(404, message, param="model", code="model_not_found")


@router.get("/health", response_model=Health, responses={503: {"model": ErrorResponse}})
async def health(request: Request):
    error = health_error(request.app.state.engine)
    if error is not None:
        return JSONResponse(error.body(), status_code=503)
    return Health()


def health_error(engine) -> APIError | None:
    """Why ``/health`` answers 503 for ``engine`` (None: it answers ok)."""
    if not engine_alive(engine):
        return APIError(503, "the engine is not running", code="engine_stopped")
    if not streaming_alive(engine):
        return APIError(
            503, "the engine's streaming loop has stopped (live streams are refused)", code="streaming_stopped"
        )
    return None


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
