"""The wire format of the OpenAI-compatible API: request forms, responses, stream
events and errors, as pydantic models, and the parsing of a multipart form into a
request model.

Form-field policy (one rule for both audio routes):

* Fields are OpenAI's, under OpenAI's names; list fields may be sent as
  ``name[]`` (what the official client sends) or as a repeated ``name``.
* ``model`` and ``file`` are required (``file`` must be a file part, given once).
* An OpenAI-defined field that oasr does not implement (``chunking_strategy``,
  ``include``, ``keywords``, ``known_speaker_names``, ``known_speaker_references``,
  ``languages``; and on ``/v1/audio/translations`` the transcription-only
  ``language``, ``stream`` and ``timestamp_granularities``) is refused with 400,
  ``code="unsupported_parameter"``, ``param`` naming it.
* Any other unknown field is refused with 400, ``code="unknown_parameter"``,
  ``param`` naming it. Nothing is silently ignored.
* A value of the wrong type or out of range (``temperature=abc``, ``temperature=-1``,
  ``stream=maybe``, ``response_format=xml``, a file part in a text field, a scalar
  field given twice) is refused with 400, ``code="invalid_value"``, ``param`` naming it.
* Empty ``language`` / ``prompt`` values mean "not given".
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import FormData, UploadFile

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
Granularity = Literal["segment", "word"]

# OpenAI-defined transcription fields that oasr does not implement.
UNSUPPORTED_OPENAI_FIELDS: frozenset[str] = frozenset(
    {"chunking_strategy", "include", "keywords", "known_speaker_names", "known_speaker_references", "languages"}
)


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
    temperature: float = Field(default=0.0, ge=0.0, le=1.0)

    @property
    def granularities(self) -> tuple[str, ...]:
        return ()

    @property
    def streaming(self) -> bool:
        return False


class TranscriptionRequest(TranslationRequest):
    """``POST /v1/audio/transcriptions`` form fields (besides ``file``)."""

    language: str | None = None
    timestamp_granularities: list[Granularity] = Field(default_factory=list)
    stream: bool = False

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


_LIST_FIELDS = frozenset({"timestamp_granularities"})
_OPTIONAL_TEXT = frozenset({"language", "prompt"})


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
        raise FormError(f"{param}: {err['msg']}", param, "invalid_value") from None
    return request, upload


# ---------------------------------------------------------------------------
# Responses


class UsageDuration(BaseModel):
    type: Literal["duration"] = "duration"
    seconds: float


class TranscriptionResponse(BaseModel):
    """``response_format=json``: OpenAI's ``{"text"}`` plus the language's ISO code and usage."""

    text: str
    language: str | None = None
    usage: UsageDuration | None = None


class TranslationResponse(BaseModel):
    text: str
    language: str | None = None


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
    segments: list[SegmentTiming] | None = None
    words: list[WordTiming] | None = None
    usage: UsageDuration | None = None


class TranscriptTextDelta(BaseModel):
    """A stream event: more text (the deltas of a stream concatenate to the final text)."""

    type: Literal["transcript.text.delta"] = "transcript.text.delta"
    delta: str


class TranscriptTextDone(BaseModel):
    """The last stream event: the whole text."""

    type: Literal["transcript.text.done"] = "transcript.text.done"
    text: str


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
