"""The logic behind the audio routes: map OpenAI's fields to ``TranscribeOptions``,
run the request through the ``AsyncEngine``, render the response, stream SSE.

Decoding policy:

* the decode strategy's own defaults, as through Python and ``oasr transcribe`` (Whisper:
  faster-whisper's beam 5 with the temperature fallback; CTC / transducer: greedy; a
  speech-LLM: the checkpoint's generation config), unless ``oasr serve`` was started with
  explicit decoding flags (``--beam-size``, ``--best-of``, ...). OpenAI's ``temperature=0``
  (its default) means "increase the temperature on failure", which is the strategy's own
  default (Whisper's fallback sequence 0.0, 0.2, ..., 1.0); ``0 < t <= 1`` decodes at that
  one temperature (Whisper: ``best_of`` samples), and is refused by a strategy that does not
  sample (CTC, transducer, Paraformer).
* ``max_new_tokens``, ``repetition_penalty``, ``seed``, ``target_language`` and ``itn`` (oasr's
  extensions, the official client's ``extra_body``) set the option of the same name for the
  request, over ``oasr serve``'s ``--max-new-tokens`` / ``--repetition-penalty``; without a
  ``seed``, a sampled decode draws a fresh one per request. A result a token budget cut has
  ``finish_reason="length"`` in ``verbose_json`` and in the stream's ``transcript.text.done`` event.
* ``prompt`` is the option the decode strategy takes free text in: Whisper's
  ``initial_prompt``, a speech-LLM's ``context`` (the system turn); ``language`` (transcriptions only) an ISO
  639-1 / 639-3 code, an English name or a locale, resolved against the model's languages
  (``oasr.languages.resolve_language``; one the model lacks: 400 ``invalid_language``,
  ``param="language"``, naming the model's languages); left out (or empty), the server's
  default (``oasr serve --language``) applies, and ``auto`` / ``none`` detect it whatever
  the default; the translations route sets
  ``task="translate"`` (a model that cannot translate, e.g. an English-only one,
  answers 400 with ``param="model"``, ``code="unsupported_task"``).
* ``chunking_strategy`` (transcriptions): ``auto`` turns on VAD chunking
  (``vad_filter``: Silero VAD cuts the audio at speech into chunks of at most 30 s,
  decoded as one batch, times mapped back to the upload; needs the ``vad`` extra on
  the server, else 400); a ``server_vad`` object does the same with its
  ``threshold``, ``prefix_padding_ms`` (VAD ``speech_pad_ms``) and
  ``silence_duration_ms`` (``min_silence_duration_ms``); fields left out keep oasr's
  defaults. Without it, the audio is walked in 30-s windows, each conditioned on the
  previous one's text.
* ``timestamp_granularities[]`` needs ``response_format=verbose_json`` (as OpenAI;
  anything else is 400). None given: segments only. ``word`` turns on word timing;
  ``verbose_json`` then has ``words``, plus ``segments`` when ``segment`` is also given.
* Speakers (``oasr serve --diarize-model DIR``, ``oasr.engine.diarizing``): ``response_format=
  diarized_json`` is OpenAI's ``TranscriptionDiarized`` (``oasr.formatting.diarized_json_dict``:
  segments of one speaker each, ``A``, ``B``, ... or the known speakers' names); the request is
  decoded with word timestamps where the model times words, so that segments are cut where the
  speaker changes. ``verbose_json``, ``srt`` and ``vtt`` transcriptions on such a server carry
  speakers too; ``json`` and ``text`` are not diarized (they could not show it). Without a
  diarizer, ``diarized_json`` and known speakers are 400 ``unsupported_value``.
  ``known_speaker_names[]`` + ``known_speaker_references[]`` (``diarized_json`` only; data URLs,
  2 to 10 s each, at most 4) name the found speakers whose voices match (``oasr.diarization.
  service``: cosine similarity of the diarizer's speaker embeddings); a diarizer that does not
  embed voices (only pyannote's pipeline does) answers 400. ``chunking_strategy`` is not required
  for long audio as OpenAI requires it for diarization (oasr transcribes any length); given, it
  chunks the transcription at speech as for any format, while the diarizer always hears the
  whole recording.
* ``stream=true`` needs ``response_format`` json, text or diarized_json (else 400): the answer is
  ``text/event-stream`` with ``transcript.text.delta`` events as the text is decoded
  (a strategy that streams text, ``DecodeStrategy.streams_text``: Whisper, a speech-LLM,
  sends pieces as its tokens are decoded, see ``oasr.engine.decode.aed.strategy``; the
  others one per decoded segment; leading / trailing whitespace held back so that the
  deltas concatenate exactly to the final text), then ``transcript.text.done`` with the
  whole text, then ``data: [DONE]``. A ``diarized_json`` stream sends, for each decoded stretch
  of one speaker, a ``transcript.text.delta`` with its ``segment_id`` then the
  ``transcript.text.segment`` event itself, as OpenAI's diarizing model does.
  Errors found before the first event (bad audio, a full queue) are ordinary 4xx
  answers; later ones are sent as a ``data: {"error": {...}}`` event before ``[DONE]``.

Admission is honest (``oasr.engine.admission``). Every request has a budget, the client's
deadline counted from the moment its upload is in: ``--request-timeout``, by default 60 s
plus 4 s per second of audio (the duration read from the container's header). Before any
work is spent on it, the engine predicts from its measured decode rate and the requests it
holds when this one would finish; one it cannot finish within its budget (or that would
make an admitted request miss its own) is answered 429 ``engine_overloaded`` at once, with
``Retry-After`` the predicted seconds until it would fit (also 429 past ``--max-queue``
admitted requests). A request that is admitted finishes: it is cut with 504 at its deadline
only when the prediction was badly wrong, counted in ``oasr_deadline_misses_total``
(refusals in ``oasr_admission_refused_total{reason}``).

Every request runs while the client is watched: a client that disconnects has its
request cancelled (the engine aborts it and frees its rows), counted in
``oasr_requests_cancelled_total`` and logged with status 499. A request the server
cannot finish before its graceful shutdown ends gets 503 (``oasr.server.lifecycle``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import math
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.datastructures import UploadFile
from starlette.types import Receive, Scope, Send

from oasr.audio import AudioDecodeError, AudioTooLong
from oasr.engine.async_engine import EngineStopped, RequestTimeout
from oasr.engine.config import TranscribeOptions
from oasr.engine.decode.base import EngineOverloaded, StepEvent
from oasr.engine.decode.deltas import TranscriptDeltas
from oasr.engine.outputs import RequestOutput
from oasr.formatting import diarized_json_dict, format_output, json_dict, verbose_json_dict
from oasr.languages import LanguageError
from oasr.server.errors import CLIENT_CLOSED_REQUEST, APIError, bad_request
from oasr.server.lifecycle import Drain, ShuttingDown
from oasr.server.metrics import ServerMetrics
from oasr.server.protocol import (
    DiarizedSegment,
    ServerVad,
    TranscriptionDiarizedResponse,
    TranscriptionResponse,
    TranscriptionVerboseResponse,
    TranscriptTextDelta,
    TranscriptTextDone,
    TranslationRequest,
    TranslationResponse,
    UsageDuration,
)
from oasr.server.settings import TIMEOUT_BASE_S, TIMEOUT_PER_AUDIO_S, ServerSettings

log = logging.getLogger("oasr.server")

EXTENSION_FIELDS = ("max_new_tokens", "repetition_penalty", "seed", "target_language", "itn")
"""Form fields beyond OpenAI's that set the ``TranscribeOptions`` field of the same name."""
CLIENT_GONE = "oasr.client_gone"  # scope key set when the client disconnected mid-request
_TEXT_MEDIA = {"text": "text/plain", "srt": "text/plain", "vtt": "text/vtt"}
_SPEAKER_FORMATS = ("diarized_json", "verbose_json", "srt", "vtt")  # what a diarizing server diarizes


class ClientGone(Exception):
    """The client disconnected before the answer; the request was cancelled."""


class OpenAIServingSpeechToText:
    """One audio route (``task`` = transcribe or translate) over a shared engine."""

    task = "transcribe"
    endpoint = "transcriptions"

    def __init__(self, engine, settings: ServerSettings, metrics: ServerMetrics, drain: Drain | None = None) -> None:
        self.engine = engine
        self.settings = settings
        self.metrics = metrics
        self.drain = drain or Drain()
        # The engine measures n_samples / rate (a correctly rounded division), so a clip of
        # exactly min_duration_s (1600 samples for 0.1 s at 16 kHz) compares equal and passes.
        self.min_duration_s = settings.min_duration_s

    # -- entry point -----------------------------------------------------------------------

    async def create(self, req: TranslationRequest, upload: UploadFile, raw_request: Request) -> Response:
        self.check_model(req.model)
        self.check_format(req)
        options = self.build_options(req)
        source = upload.file
        source.seek(0)
        name = upload.filename or "file"
        try:
            if req.streaming:
                return await self._create_stream(req, source, options, raw_request, name)
            output = await self._until_disconnect(self._transcribe(source, options), raw_request)
        except ClientGone:
            raw_request.scope[CLIENT_GONE] = True
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        except Exception as e:
            raise self.engine_error(e, name) from None
        return self.render(output, req)

    # -- validation and options ----------------------------------------------------------------

    def check_model(self, model: str) -> None:
        if model not in self.settings.model_names:
            raise APIError(
                404,
                self.settings.unknown_model(model),
                param="model",
                code="model_not_found",
            )

    def check_format(self, req: TranslationRequest) -> None:
        if req.granularities and req.response_format != "verbose_json":
            raise bad_request(
                "timestamp_granularities requires response_format=verbose_json", param="timestamp_granularities"
            )
        if req.streaming and req.response_format not in ("json", "text", "diarized_json"):
            raise bad_request(
                f"stream=true is available with response_format json, text or diarized_json, not "
                f"{req.response_format!r}",
                param="stream",
            )
        names = getattr(req, "known_speaker_names", [])
        references = getattr(req, "known_speaker_references", [])
        if req.response_format == "diarized_json" or names or references:
            param = "response_format" if req.response_format == "diarized_json" else "known_speaker_names"
            if self.task != "transcribe":
                raise bad_request("diarized_json is a transcription format", param=param, code="unsupported_value")
            if getattr(self.engine, "diarization", None) is None:
                raise bad_request(
                    "speakers need a diarization model: this server has none (start oasr serve with "
                    "--diarize-model DIR)",
                    param=param,
                    code="unsupported_value",
                )
        if names or references:
            if req.response_format != "diarized_json":
                raise bad_request("known speakers need response_format=diarized_json", param="known_speaker_names")
            if len(names) != len(references):
                raise bad_request(
                    f"{len(names)} known_speaker_names and {len(references)} known_speaker_references: give one "
                    f"reference per name",
                    param="known_speaker_references",
                )
            if len(set(names)) != len(names):
                raise bad_request("known_speaker_names must be different", param="known_speaker_names")

    def build_options(self, req: TranslationRequest) -> TranscribeOptions:
        """The engine options for ``req``; a value the engine refuses is a 400 naming its field."""
        steps: list[tuple[str, dict[str, Any]]] = [("model", {"task": self.task, **self.settings.decode_options()})]
        language = getattr(req, "language", None)
        if language:
            steps.append(("language", {"language": language}))
        if req.temperature:  # 0 (OpenAI's default) is "automatic": the strategy's own (Whisper's fallback)
            steps.append(("temperature", {"temperature": req.temperature}))
        if req.prompt:
            # Whisper's initial_prompt, a speech-LLM's context (its system turn), ...
            steps.append(("prompt", {self.engine.splitter.prompt_option or "initial_prompt": req.prompt}))
        if "word" in req.granularities:
            steps.append(("timestamp_granularities", {"word_timestamps": True}))
        chunking = getattr(req, "chunking_strategy", None)
        if chunking is not None:
            steps.append(("chunking_strategy", {"vad_filter": True, "vad_parameters": _vad_parameters(chunking)}))
        if getattr(self.engine, "diarization", None) is not None:
            diarize = self.task == "transcribe" and req.response_format in _SPEAKER_FORMATS
            steps.append(("response_format", {"diarize": diarize}))
            names = getattr(req, "known_speaker_names", [])
            if names:
                known = {name: _data_url_audio(url) for name, url in zip(names, req.known_speaker_references)}
                steps.append(("known_speaker_references", {"known_speakers": known}))
        for field_name in EXTENSION_FIELDS:  # oasr's extensions: the option of the same name
            value = getattr(req, field_name)
            if value is not None:
                steps.append((field_name, {field_name: value}))
        kwargs: dict[str, Any] = {}
        options = None
        for param, extra in steps:
            kwargs.update(extra)
            try:
                options = self.engine.make_options(**kwargs)
            except LanguageError as e:  # the request's language (the server's default was checked at start)
                raise bad_request(str(e), param="language", code="invalid_language") from None
            except (TypeError, ValueError) as e:
                code = "unsupported_task" if param == "model" and self.task == "translate" else "invalid_value"
                raise bad_request(str(e), param=param, code=code) from None
            except ImportError as e:  # VAD asked for, silero-vad not installed on the server
                raise bad_request(str(e), param=param, code="unsupported_value") from None
        assert options is not None
        if req.response_format == "diarized_json" and not options.word_timestamps:
            try:  # words cut segments where the speaker changes; a model that times none keeps its segments
                options = self.engine.make_options(**kwargs, word_timestamps=True)
            except (TypeError, ValueError):
                pass
        return options

    # -- running ---------------------------------------------------------------------------------

    def _transcribe(self, source, options: TranscribeOptions):
        return self.engine.transcribe(
            source, options, timeout=self.settings.request_budget, min_duration_s=self.min_duration_s
        )

    async def _until_disconnect(self, awaitable, raw_request: Request):
        """Await ``awaitable`` while watching the client and the shutdown drain; cancel it
        (raising ``ClientGone`` / ``ShuttingDown``) if the client disconnects or the drain
        fires first."""
        work = asyncio.ensure_future(awaitable)
        watch = asyncio.ensure_future(_wait_for_disconnect(raw_request.receive))
        drained = asyncio.ensure_future(self.drain.wait())
        try:
            await asyncio.wait({work, watch, drained}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                work.cancel()
                with contextlib.suppress(BaseException):
                    await work
                if not watch.done():
                    raise ShuttingDown("the server is shutting down and could not finish this request")
                self.metrics.cancelled.inc()
                raise ClientGone()
            return work.result()
        finally:
            for task in (work, watch, drained):
                if not task.done():
                    task.cancel()
            with contextlib.suppress(BaseException):
                await watch
            with contextlib.suppress(BaseException):
                await drained

    def engine_error(self, exc: BaseException, filename: str) -> APIError:
        """The HTTP answer for an exception from the engine."""
        if isinstance(exc, APIError):
            return exc
        if isinstance(exc, AudioTooLong):
            message = str(exc).replace("<SpooledTemporaryFile>", repr(filename))
            return bad_request(message, param="file", code="audio_too_long")
        if isinstance(exc, AudioDecodeError):
            message = str(exc).replace("<SpooledTemporaryFile>", repr(filename))
            return bad_request(message, param="file", code="invalid_audio")
        if isinstance(exc, EngineOverloaded):
            retry_after = math.ceil(max(1.0, getattr(exc, "retry_after_s", 1.0)))
            return APIError(429, str(exc), code="engine_overloaded", headers={"Retry-After": str(retry_after)})
        if isinstance(exc, RequestTimeout):
            limit = self.settings.request_timeout_s
            budget = (
                f"{limit:g} s"
                if limit is not None
                else f"{TIMEOUT_BASE_S:g} s + {TIMEOUT_PER_AUDIO_S:g} s per s of audio"
            )
            return APIError(504, f"the request did not finish within --request-timeout ({budget})", code="timeout")
        if isinstance(exc, ShuttingDown):
            return APIError(503, str(exc), code="server_shutting_down")
        if isinstance(exc, EngineStopped):
            return APIError(503, str(exc), code="engine_stopped")
        if isinstance(exc, ValueError):
            return bad_request(str(exc))
        log.error("request failed", exc_info=(type(exc), exc, exc.__traceback__))
        return APIError(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error")

    # -- rendering -------------------------------------------------------------------------------

    def render(self, out: RequestOutput, req: TranslationRequest) -> Response:
        fmt = req.response_format
        if fmt == "diarized_json":
            doc = diarized_json_dict(out, known=tuple(getattr(req, "known_speaker_names", ())))
            doc["usage"] = UsageDuration(seconds=round(out.duration, 3)).model_dump()
            return JSONResponse(TranscriptionDiarizedResponse.model_validate(doc).model_dump())
        if fmt == "json":
            body = self._json(out).model_dump(exclude_none=True)
            body.setdefault("language", None)  # null when nothing was decoded (VAD found no speech)
            return JSONResponse(body)
        if fmt == "verbose_json":
            granularities = req.granularities
            doc = verbose_json_dict(out, words="word" in granularities)
            if granularities and "segment" not in granularities:
                doc.pop("segments")
            if self.task == "transcribe":
                doc["usage"] = UsageDuration(seconds=round(out.duration, 3)).model_dump()
            body = TranscriptionVerboseResponse.model_validate(doc).model_dump(exclude_none=True)
            body.setdefault("language", None)
            return JSONResponse(body)
        return PlainTextResponse(format_output(out, fmt), media_type=_TEXT_MEDIA[fmt])

    def _json(self, out: RequestOutput):
        doc = json_dict(out)
        if self.task == "transcribe":
            return TranscriptionResponse(**doc, usage=UsageDuration(seconds=round(out.duration, 3)))
        return TranslationResponse(**doc)

    # -- streaming -------------------------------------------------------------------------------

    async def _create_stream(self, req, source, options, raw_request: Request, filename: str) -> Response:
        events = self.engine.stream(
            source, options, timeout=self.settings.request_budget, min_duration_s=self.min_duration_s
        )
        try:
            # Audio problems and a full queue surface before the first event: answer them as 4xx.
            first = await self._until_disconnect(_first_event(events), raw_request)
        except BaseException:
            await events.aclose()
            raise
        stream = _TranscriptStream(
            self, first, events, filename, self.drain, streams_text=self.engine.splitter.streams_text
        )
        if req.response_format == "diarized_json":
            stream = _DiarizedStream(
                self, first, events, filename, self.drain, known=tuple(getattr(req, "known_speaker_names", ()))
            )
        return _SSEResponse(stream, raw_request)


def _data_url_audio(url: str) -> bytes:
    """The bytes of a ``data:[<type>][;base64],<data>`` URL (a known speaker's reference)."""
    head, comma, data = url.partition(",")
    if not head.startswith("data:") or not comma:
        raise bad_request(
            "a known speaker reference must be a data URL (data:audio/wav;base64,...)",
            param="known_speaker_references",
        )
    if not head.endswith(";base64"):
        from urllib.parse import unquote_to_bytes

        return unquote_to_bytes(data)
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request("a known speaker reference is not valid base64", param="known_speaker_references") from None


def _vad_parameters(chunking: str | ServerVad) -> dict[str, float] | None:
    """``VadOptions`` fields of a ``chunking_strategy`` (None: the defaults)."""
    if not isinstance(chunking, ServerVad):
        return None
    fields = {
        "threshold": chunking.threshold,
        "speech_pad_ms": chunking.prefix_padding_ms,
        "min_silence_duration_ms": chunking.silence_duration_ms,
    }
    return {k: v for k, v in fields.items() if v is not None} or None


def engine_alive(engine) -> bool:
    """Whether the engine is there and its decode thread is running."""
    return engine is not None and engine.is_running


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _first_event(events: AsyncIterator[StepEvent]) -> StepEvent:
    return await events.__anext__()


def event_text(event: StepEvent, streams_text: bool) -> str | None:
    """The transcript text an engine event adds: a ``delta``'s piece from a strategy that streams
    text (``streams_text``), a decoded ``segment``'s text from one that does not; None for others."""
    if event.kind == "delta":
        return event.delta
    if event.kind == "segment" and event.segment is not None and not streams_text:
        return event.segment.text
    return None


def _sse(payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class _TranscriptStream:
    """The SSE events of one streamed transcription, closed exactly once."""

    def __init__(
        self,
        serving: OpenAIServingSpeechToText,
        first: StepEvent,
        events,
        filename: str,
        drain: Drain | None = None,
        *,
        streams_text: bool = False,
    ) -> None:
        self.serving = serving
        self.streams_text = streams_text  # the strategy sends all its text as deltas: segments carry none
        self.drain = drain or Drain()  # fires: the stream ends with a 503 error event
        self.first = first
        self.events = events
        self.filename = filename
        self.completed = False
        self.closed = False
        self._next: asyncio.Future | None = None  # the pending read of ``events``

    async def _next_event(self) -> StepEvent:
        """The next engine event, or ``ShuttingDown`` when the drain fires first."""
        self._next = asyncio.ensure_future(self.events.__anext__())
        return await self.drain.race(self._next)

    async def body(self) -> AsyncIterator[bytes]:
        # Leading / trailing whitespace is held back, so the deltas concatenate to the final (stripped) text.
        raw, deltas = "", TranscriptDeltas()
        event: StepEvent | None = self.first
        try:
            while event is not None:
                piece = event_text(event, self.streams_text)
                if piece is not None:
                    raw += piece
                    delta = deltas.extend(raw.strip())
                    if delta:
                        yield _sse(TranscriptTextDelta(delta=delta).model_dump(exclude_none=True))
                elif event.kind == "finished" and event.output is not None:
                    out = event.output
                    done = TranscriptTextDone(text=json_dict(out)["text"], finish_reason=out.finish_reason)
                    yield _sse(done.model_dump())
                    self.completed = True
                    break
                event = await self._next_event()
        except StopAsyncIteration:
            pass
        except Exception as e:  # after the headers: report in the stream
            self.completed = True
            yield _sse(self.serving.engine_error(e, self.filename).body())
        yield _sse("[DONE]")

    async def close(self, scope: Scope) -> None:
        if self.closed:
            return
        self.closed = True
        if self._next is not None and not self._next.done():
            # The body was cancelled while reading: let that read end before closing the generator.
            self._next.cancel()
            await asyncio.wait({self._next})
        await self.events.aclose()
        if not self.completed:
            scope[CLIENT_GONE] = True
            self.serving.metrics.cancelled.inc()


class _DiarizedStream(_TranscriptStream):
    """The SSE events of a ``diarized_json`` stream: per decoded stretch of one speaker, a
    ``transcript.text.delta`` with its ``segment_id`` and a ``transcript.text.segment``; then
    ``transcript.text.done``. Speakers are named as in ``diarized_json`` (``A``, ``B``, ... in
    order of appearance, known speakers by name) consistently across the stream."""

    def __init__(self, *args, known: tuple[str, ...] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.known = known
        self.names: dict[str, str] = {}
        self.sent = 0  # segments of the request turned into events
        self.count = 0  # transcript.text.segment events sent

    def _segments(self, segments) -> list[bytes]:
        from oasr.diarization.assign import letter_labels, speaker_runs

        out = []
        for run in speaker_runs(segments):
            text = " ".join(run.text.split())
            if not text:
                continue
            if run.speaker is not None and run.speaker not in self.names:
                labels = letter_labels([*self.names, run.speaker], self.known)
                self.names[run.speaker] = labels[run.speaker]
            sid = f"seg_{self.count}"
            self.count += 1
            speaker = None if run.speaker is None else self.names[run.speaker]
            delta = TranscriptTextDelta(delta=text if sid == "seg_0" else " " + text, segment_id=sid)
            out.append(_sse(delta.model_dump()))
            seg = DiarizedSegment(id=sid, start=round(run.start, 3), end=round(run.end, 3), text=text, speaker=speaker)
            out.append(_sse(seg.model_dump()))
        return out

    async def body(self) -> AsyncIterator[bytes]:
        event: StepEvent | None = self.first
        try:
            while event is not None:
                if event.kind == "segment" and event.segment is not None:
                    self.sent += 1
                    for chunk in self._segments([event.segment]):
                        yield chunk
                elif event.kind == "finished" and event.output is not None:
                    out = event.output
                    for chunk in self._segments(out.segments[self.sent :]):  # reported only at the end (llm)
                        yield chunk
                    done = TranscriptTextDone(text=json_dict(out)["text"], finish_reason=out.finish_reason)
                    yield _sse(done.model_dump())
                    self.completed = True
                    break
                event = await self._next_event()
        except StopAsyncIteration:
            pass
        except Exception as e:  # after the headers: report in the stream
            self.completed = True
            yield _sse(self.serving.engine_error(e, self.filename).body())
        yield _sse("[DONE]")


class _SSEResponse(StreamingResponse):
    """``text/event-stream`` whose engine request is aborted however the response ends
    (finished, client gone, server shutting down)."""

    def __init__(self, stream: _TranscriptStream, raw_request: Request) -> None:
        super().__init__(
            stream.body(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with contextlib.suppress(BaseException):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
            await self._stream.close(scope)


class OpenAIServingTranscription(OpenAIServingSpeechToText):
    task = "transcribe"
    endpoint = "transcriptions"


class OpenAIServingTranslation(OpenAIServingSpeechToText):
    task = "translate"
    endpoint = "translations"
