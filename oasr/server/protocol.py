"""The wire format of the OpenAI-compatible API: request forms, responses, stream
events and errors, as pydantic models, and the parsing of a multipart form into a
request model.

Form-field policy (one rule for both audio routes):

* Fields are OpenAI's, under OpenAI's names; list fields may be sent as
  ``name[]`` (what the official client sends) or as a repeated ``name``.
* ``model`` and ``file`` are required (``file`` must be a file part, given once).
* ``chunking_strategy`` (transcriptions) is ``auto`` or a ``server_vad`` object, sent as
  JSON text (``{"type": "server_vad", "threshold": 0.5}``) or, as the official client
  sends it, as fields ``chunking_strategy[type]``, ``chunking_strategy[threshold]``, ...
* ``known_speaker_names[]`` / ``known_speaker_references[]`` (transcriptions): as many names as
  references (at most 4), each reference an audio data URL (``data:audio/wav;base64,...``).
* An OpenAI-defined field that oasr does not implement (``include``, ``keywords``,
  ``languages``; and on
  ``/v1/audio/translations`` the transcription-only ``language``, ``stream``,
  ``timestamp_granularities`` and ``chunking_strategy``) is refused with 400,
  ``code="unsupported_parameter"``, ``param`` naming it.
* Any other unknown field is refused with 400, ``code="unknown_parameter"``,
  ``param`` naming it. Nothing is silently ignored.
* A value of the wrong type or out of range (``temperature=abc``, ``temperature=-1``,
  ``stream=maybe``, ``response_format=xml``, a file part in a text field, a scalar
  field given twice) is refused with 400, ``code="invalid_value"``, ``param`` naming it.
* Extensions (fields OpenAI does not define, both routes; the official client sends them in
  ``extra_body``; vLLM's transcription API names the last two the same):
  ``max_new_tokens`` (an integer >= 1: the request's token budget, ``TranscribeOptions.
  max_new_tokens``; a result it cuts has ``finish_reason="length"`` in ``verbose_json``),
  ``repetition_penalty`` (> 0) and ``seed`` (a 64-bit integer; left out, every request samples
  with a fresh seed), ``target_language`` (Canary: the language of the output; on
  ``/v1/audio/translations`` English when left out), ``itn`` (a boolean: inverse text
  normalisation, SenseVoice's ``use_itn`` and Canary 2's ``<|itn|>``). Left out, ``oasr serve``'s
  flag of the same name applies, else the model's default; a model that does not take one
  answers 400 naming it.
* Empty ``language`` / ``prompt`` / ``chunking_strategy`` values mean "not given" (for
  ``language``: the server's default); ``language=auto`` / ``none`` means "detect it", even
  where ``oasr serve --language`` sets a default.
* JSON text in a field is at most ``MAX_JSON_CHARS`` characters nested at most
  ``MAX_JSON_DEPTH`` deep (checked before it is parsed), else 400 ``invalid_value``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import FormData, UploadFile

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt", "diarized_json"]
Granularity = Literal["segment", "word"]

# OpenAI-defined transcription fields that oasr does not implement.
UNSUPPORTED_OPENAI_FIELDS: frozenset[str] = frozenset({"include", "keywords", "languages"})


# ---------------------------------------------------------------------------
# Errors


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorInfo


# ---------------------------------------------------------------------------
# Requests


class TranslationRequest(BaseModel):
    """``POST /v1/audio/translations`` form fields (besides ``file``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str
    prompt: str | None = None
    response_format: ResponseFormat = "json"
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    # oasr's extensions (see the module notes)
    max_new_tokens: int | None = Field(default=None, ge=1)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    target_language: str | None = None
    itn: bool | None = None

    @property
    def granularities(self) -> tuple[str, ...]:
        return ()

    @property
    def streaming(self) -> bool:
        return False


class ServerVad(BaseModel):
    """``chunking_strategy={"type": "server_vad", ...}``: VAD chunking with these settings
    (a field left out keeps oasr's default)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    type: Literal["server_vad"]
    threshold: float | None = Field(default=None, gt=0.0, lt=1.0)
    prefix_padding_ms: int | None = Field(default=None, ge=0)
    silence_duration_ms: int | None = Field(default=None, ge=0)


class TranscriptionRequest(TranslationRequest):
    """``POST /v1/audio/transcriptions`` form fields (besides ``file``)."""

    language: str | None = None
    timestamp_granularities: list[Granularity] = Field(default_factory=list)
    stream: bool = False
    chunking_strategy: Literal["auto"] | ServerVad | None = None
    known_speaker_names: list[str] = Field(default_factory=list, max_length=4)
    known_speaker_references: list[str] = Field(default_factory=list, max_length=4)

    @property
    def granularities(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.timestamp_granularities))

    @property
    def streaming(self) -> bool:
        return self.stream


class FormError(ValueError):
    """A form that does not parse; ``param`` names the field, ``code`` is OpenAI-style."""

    def __init__(self, message: str, param: str | None, code: str) -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


_LIST_FIELDS = frozenset({"timestamp_granularities", "known_speaker_names", "known_speaker_references"})
_OBJECT_FIELDS = frozenset({"chunking_strategy"})  # a string, JSON object text, or name[key] fields
_OPTIONAL_TEXT = frozenset({"language", "prompt"})
_SUBFIELD = re.compile(r"(\w+)\[(\w+)\]")
MAX_JSON_CHARS = 4096
MAX_JSON_DEPTH = 8


def parse_form(form: FormData, request_cls: type[TranslationRequest]) -> tuple[TranslationRequest, UploadFile]:
    """Validate a multipart form against ``request_cls`` (see the module notes).

    Returns:
        the request model and the uploaded file.

    Raises:
        FormError: the first problem found.
    """
    route = "/v1/audio/transcriptions" if request_cls is TranscriptionRequest else "/v1/audio/translations"
    known = set(request_cls.model_fields)
    values: dict[str, Any] = {}
    files: list[Any] = []
    for raw_key, value in form.multi_items():
        key = raw_key[:-2] if raw_key.endswith("[]") else raw_key
        sub = _SUBFIELD.fullmatch(key)
        if sub is not None and sub.group(1) in _OBJECT_FIELDS:
            key = sub.group(1)
        if key == "file":
            files.append(value)
            continue
        if key in UNSUPPORTED_OPENAI_FIELDS:
            raise FormError(
                f"{key!r} is an OpenAI parameter that oasr does not implement", key, "unsupported_parameter"
            )
        if key not in known:
            if key in TranscriptionRequest.model_fields:
                raise FormError(
                    f"{key!r} is not accepted by {route} (OpenAI defines it for transcriptions only)",
                    key,
                    "unsupported_parameter",
                )
            raise FormError(f"unknown field {raw_key!r}", raw_key, "unknown_parameter")
        if key in _LIST_FIELDS:
            values.setdefault(key, []).append(value)
            continue
        if key in _OBJECT_FIELDS:
            _object_field(values, key, sub.group(2) if sub is not None else None, value)
            continue
        if key in values:
            raise FormError(f"{key!r} was given more than once", key, "invalid_value")
        if key in _OPTIONAL_TEXT and value == "":
            continue
        values[key] = value
    if not files:
        raise FormError("missing required field 'file' (the audio, as a multipart file part)", "file", "missing")
    if len(files) > 1:
        raise FormError("'file' was given more than once", "file", "invalid_value")
    upload = files[0]
    if not isinstance(upload, UploadFile):
        raise FormError("'file' must be a file part (multipart/form-data with a filename)", "file", "invalid_value")
    try:
        request = request_cls.model_validate(values)
    except ValidationError as e:
        err = e.errors()[0]
        param = ".".join(str(p) for p in err["loc"] if not isinstance(p, int)) or None
        if err["type"] == "missing":
            raise FormError(f"missing required field {param!r}", param, "missing") from None
        if err["loc"] and err["loc"][0] in _OBJECT_FIELDS:
            raise FormError(_chunking_error(e), "chunking_strategy", "invalid_value") from None
        raise FormError(f"{param}: {err['msg']}", param, "invalid_value") from None
    return request, upload


def _object_field(values: dict[str, Any], key: str, sub: str | None, value: Any) -> None:
    """Collect a field given as one value (a string, or JSON object text) or as ``key[sub]`` parts."""
    if not isinstance(value, str):
        raise FormError(f"{key!r} must be a text field, not a file part", key, "invalid_value")
    held = values.get(key)
    if sub is None:
        if value == "":  # as for language and prompt: not given
            return
        if held is not None:
            raise FormError(f"{key!r} was given more than once", key, "invalid_value")
        if value.lstrip().startswith("{"):
            _check_json_bounds(key, value)
            try:
                value = json.loads(value)
            except ValueError as e:
                raise FormError(f"{key}: not valid JSON ({e})", key, "invalid_value") from None
        values[key] = value
        return
    if held is not None and not isinstance(held, dict):
        raise FormError(f"{key!r} was given both as a value and as {key}[...] fields", key, "invalid_value")
    held = values.setdefault(key, {})
    if sub in held:
        raise FormError(f"{key}[{sub}] was given more than once", key, "invalid_value")
    held[sub] = value


def _check_json_bounds(key: str, text: str) -> None:
    """Refuse JSON text too long or nested too deep before parsing it (the parser recurses)."""
    if len(text) > MAX_JSON_CHARS:
        raise FormError(f"{key}: JSON text of {len(text)} characters; at most {MAX_JSON_CHARS}", key, "invalid_value")
    if json_too_deep(text, MAX_JSON_DEPTH):
        raise FormError(f"{key}: JSON nested more than {MAX_JSON_DEPTH} levels deep", key, "invalid_value")


def json_too_deep(text: str, max_depth: int) -> bool:
    """Whether JSON ``text`` nests arrays / objects more than ``max_depth`` deep (a scan without
    parsing: ``json.loads`` recurses, and a 10k-deep text exhausts the interpreter's stack)."""
    if text.count("[") + text.count("{") <= max_depth:
        return False  # the common case, at C speed
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def _chunking_error(e: ValidationError) -> str:
    """One message for a bad ``chunking_strategy``: the closest problem and what is accepted."""
    errors = e.errors()
    inner = [err for err in errors if len(err["loc"]) > 2 and err["type"] != "model_type"]
    detail = ""
    if inner:
        err = inner[0]
        detail = f" ({'.'.join(str(p) for p in err['loc'][2:])}: {err['msg']})"
    return (
        'chunking_strategy must be \'auto\' or an object {"type": "server_vad", "threshold", '
        f'"prefix_padding_ms", "silence_duration_ms"}}{detail}'
    )


# ---------------------------------------------------------------------------
# Responses


class UsageDuration(BaseModel):
    type: Literal["duration"] = "duration"
    seconds: float


class TranscriptionResponse(BaseModel):
    """``response_format=json``: OpenAI's ``{"text"}`` plus the language's ISO code and usage (and,
    where the model tags them, the emotion and audio events: SenseVoice)."""

    text: str
    language: str | None = None
    emotion: str | None = None
    audio_events: list[str] | None = None
    usage: UsageDuration | None = None


class TranslationResponse(BaseModel):
    text: str
    language: str | None = None
    emotion: str | None = None
    audio_events: list[str] | None = None


class WordTiming(BaseModel):
    word: str
    start: float
    end: float


class SegmentTiming(BaseModel):
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float


class TranscriptionVerboseResponse(BaseModel):
    """``response_format=verbose_json`` (``segments`` / ``words`` per ``timestamp_granularities``)."""

    task: str
    language: str | None
    duration: float
    text: str
    finish_reason: Literal["stop", "length"] | None = None  # an extension: "length" when a token budget cut it
    emotion: str | None = None  # an extension: the model's emotion tag (SenseVoice)
    audio_events: list[str] | None = None  # an extension: the model's audio-event tags (SenseVoice)
    segments: list[SegmentTiming] | None = None
    words: list[WordTiming] | None = None
    usage: UsageDuration | None = None


class DiarizedSegment(BaseModel):
    """One speaker's stretch of a ``diarized_json`` transcript (OpenAI's
    ``TranscriptionDiarizedSegment``); also the stream event ``transcript.text.segment``."""

    type: Literal["transcript.text.segment"] = "transcript.text.segment"
    id: str
    start: float
    end: float
    text: str
    speaker: str | None


class TranscriptionDiarizedResponse(BaseModel):
    """``response_format=diarized_json`` (OpenAI's ``TranscriptionDiarized``)."""

    task: Literal["transcribe"] = "transcribe"
    duration: float
    text: str
    segments: list[DiarizedSegment]
    usage: UsageDuration | None = None


class TranscriptTextDelta(BaseModel):
    """A stream event: more text (the deltas of a stream concatenate to the final text; in a
    ``diarized_json`` stream each names the ``transcript.text.segment`` it belongs to)."""

    type: Literal["transcript.text.delta"] = "transcript.text.delta"
    delta: str
    segment_id: str | None = None


class TranscriptTextDone(BaseModel):
    """The last stream event: the whole text (and, an extension, why the decode stopped)."""

    type: Literal["transcript.text.done"] = "transcript.text.done"
    text: str
    finish_reason: Literal["stop", "length"] | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "oasr"
    root: str | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok"] = "ok"
