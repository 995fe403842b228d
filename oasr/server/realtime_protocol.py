"""The schemas of OpenAI's Realtime transcription sessions (``/v1/realtime``, ``oasr.server.realtime``):
the input audio formats, a session's configuration in the GA shape (``session.update``,
``session.type = "transcription"``) and the beta one (``transcription_session.update``), and the
errors a client event gets, with OpenAI's codes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from oasr.server.settings import ServerSettings

SESSION_OBJECT = "realtime.transcription_session"
PCM_RATES = (8000, 48000)  # audio/pcm rates taken (OpenAI takes 24000 only)
G711_RATE = 8000
BETA_FORMATS = {
    "pcm16": ("audio/pcm", 24000),
    "g711_ulaw": ("audio/pcmu", G711_RATE),
    "g711_alaw": ("audio/pcma", G711_RATE),
}


class EventError(Exception):
    """A client event that cannot be taken: answered with an ``error`` event; the session goes on."""

    def __init__(self, code: str, message: str, param: str | None = None, type: str = "invalid_request_error"):
        super().__init__(message)
        self.code, self.param, self.type = code, param, type

    def error(self, event_id: str | None = None) -> dict[str, Any]:
        """The ``error`` object of an ``error`` event (also that of a ``failed`` event)."""
        return {"type": self.type, "code": self.code, "message": str(self), "param": self.param, "event_id": event_id}


# ---------------------------------------------------------------------------
# Audio formats


def _g711_table(law: str) -> np.ndarray:
    """The 16-bit sample of each of the 256 G.711 codes (ITU-T G.711's expansion)."""
    code = np.arange(256, dtype=np.int32)
    if law == "ulaw":
        u = ~code & 0xFF
        magnitude = (((u & 0x0F) << 3) + 0x84) << ((u >> 4) & 0x07)
        return np.where(u & 0x80, 0x84 - magnitude, magnitude - 0x84).astype(np.int16)
    a = code ^ 0x55
    exponent, mantissa = (a >> 4) & 0x07, a & 0x0F
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0))
    return np.where(a & 0x80, magnitude, -magnitude).astype(np.int16)


G711 = {"audio/pcmu": _g711_table("ulaw"), "audio/pcma": _g711_table("alaw")}


@dataclass(frozen=True)
class AudioFormat:
    """The format of the session's input audio: ``audio/pcm`` (16-bit little-endian mono at
    ``rate``), ``audio/pcmu`` or ``audio/pcma`` (G.711 at 8 kHz)."""

    type: str = "audio/pcm"
    rate: int = 24000

    def samples(self, data: bytes) -> np.ndarray:
        """The 16-bit samples of an append's bytes.

        Raises:
            EventError: PCM bytes that are not whole samples.
        """
        if self.type in G711:
            return G711[self.type][np.frombuffer(data, dtype=np.uint8)]
        if len(data) % 2:
            raise EventError(
                "invalid_value", f"Invalid 'audio': {len(data)} bytes are not whole 16-bit PCM samples.", "audio"
            )
        return np.frombuffer(data, dtype="<i2")

    def ga(self) -> dict[str, Any]:
        return {"type": self.type, "rate": self.rate} if self.type == "audio/pcm" else {"type": self.type}

    def beta(self) -> str | None:
        for name, (kind, rate) in BETA_FORMATS.items():
            if (kind, rate) == (self.type, self.rate):
                return name
        return None  # audio/pcm at another rate than 24 kHz: no beta name


# ---------------------------------------------------------------------------
# The session's configuration


@dataclass(frozen=True)
class TurnDetection:
    """``server_vad`` settings (OpenAI's defaults); ``extra``: fields taken and reported back
    that do not apply to transcription (``create_response``, ``interrupt_response``)."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    extra: tuple[tuple[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "server_vad",
            "threshold": self.threshold,
            "prefix_padding_ms": self.prefix_padding_ms,
            "silence_duration_ms": self.silence_duration_ms,
            **dict(self.extra),
        }


@dataclass(frozen=True)
class SessionConfig:
    """A session's effective configuration (rendered in the GA or the beta shape)."""

    model: str
    format: AudioFormat = AudioFormat()
    language: str | None = None
    prompt: str = ""
    turn_detection: TurnDetection | None = None
    noise_reduction: dict[str, Any] | None = None
    include: list[str] | None = None

    def transcription(self) -> dict[str, Any]:
        return {"model": self.model, "language": self.language, "prompt": self.prompt}

    def ga(self, sid: str) -> dict[str, Any]:
        td = self.turn_detection.to_dict() if self.turn_detection else None
        audio_input = {
            "format": self.format.ga(),
            "transcription": self.transcription(),
            "turn_detection": td,
            "noise_reduction": self.noise_reduction,
        }
        return {
            "id": sid,
            "object": SESSION_OBJECT,
            "type": "transcription",
            "include": self.include,
            "audio": {"input": audio_input},
        }

    def beta(self, sid: str) -> dict[str, Any]:
        return {
            "id": sid,
            "object": SESSION_OBJECT,
            "modalities": ["text"],
            "input_audio_format": self.format.beta(),
            "input_audio_transcription": self.transcription(),
            "turn_detection": self.turn_detection.to_dict() if self.turn_detection else None,
            "input_audio_noise_reduction": self.noise_reduction,
            "include": self.include,
        }


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise EventError("invalid_type", f"Invalid type for '{path}': expected an object, got {_kind(value)}.", path)
    return value


def _known(obj: dict[str, Any], names: set[str] | frozenset[str], path: str) -> None:
    for name in obj:
        if name not in names:
            raise EventError("unknown_parameter", f"Unknown parameter: '{path}.{name}'.", f"{path}.{name}")


def _fields(value: Any, names: set[str], path: str) -> dict[str, Any]:
    """An object of settings: known names only, a null one taken as left out (clients that send
    the whole typed object send nulls for what they did not set)."""
    obj = _object(value, path)
    _known(obj, names, path)
    return {k: v for k, v in obj.items() if v is not None}


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def typed(value: Any, types: tuple[type, ...], path: str, what: str, *, nullable: bool = False) -> Any:
    """``value`` when it is one of ``types`` (a bool is no number); else ``invalid_type`` at ``path``."""
    if value is None and nullable:
        return None
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        raise EventError("invalid_type", f"Invalid type for '{path}': expected {what}, got {_kind(value)}.", path)
    return value


def _ga_format(value: Any, path: str) -> AudioFormat:
    obj = _fields(value, {"type", "rate"}, path)
    kind = obj.get("type", "audio/pcm")
    if kind == "audio/pcm":
        rate = typed(obj.get("rate", 24000), (int,), f"{path}.rate", "an integer")
        if not PCM_RATES[0] <= rate <= PCM_RATES[1]:
            raise EventError(
                "invalid_value",
                f"Invalid value for '{path}.rate': {rate}; oasr takes {PCM_RATES[0]}-{PCM_RATES[1]} Hz "
                "(OpenAI: 24000).",
                f"{path}.rate",
            )
        return AudioFormat("audio/pcm", rate)
    if kind in G711:
        if obj.get("rate", G711_RATE) != G711_RATE:
            raise EventError("invalid_value", f"'{path}.rate' of {kind} is always {G711_RATE}.", f"{path}.rate")
        return AudioFormat(kind, G711_RATE)
    raise EventError(
        "invalid_value",
        f"Invalid value for '{path}.type': {kind!r}. Supported values are: 'audio/pcm', 'audio/pcmu', 'audio/pcma'.",
        f"{path}.type",
    )


def _beta_format(value: Any, path: str) -> AudioFormat:
    if value not in BETA_FORMATS:
        raise EventError(
            "invalid_value",
            f"Invalid value for '{path}': {value!r}. Supported values are: {', '.join(map(repr, BETA_FORMATS))}.",
            path,
        )
    return AudioFormat(*BETA_FORMATS[value])


def _transcription(value: Any, path: str, settings: ServerSettings) -> dict[str, Any]:
    obj = _object(value, path)
    for name in ("delay", "keywords", "languages"):
        if obj.get(name) not in (None, []):
            raise EventError("invalid_value", f"'{path}.{name}' is not supported by oasr.", f"{path}.{name}")
    _known(obj, {"model", "language", "prompt", "delay", "keywords", "languages"}, path)
    changes: dict[str, Any] = {}
    if obj.get("model") is not None:
        model = typed(obj["model"], (str,), f"{path}.model", "a string")
        if model not in settings.model_names:
            raise EventError("invalid_value", settings.unknown_model(model), f"{path}.model")
        changes["model"] = model
    if "language" in obj:
        changes["language"] = typed(obj["language"], (str,), f"{path}.language", "a string", nullable=True) or None
    if "prompt" in obj:
        changes["prompt"] = typed(obj["prompt"], (str,), f"{path}.prompt", "a string", nullable=True) or ""
    return changes


_VAD_REPORTED = ("create_response", "interrupt_response")


def _turn_detection(
    value: Any, path: str, current: TurnDetection | None, *, type_required: bool
) -> TurnDetection | None:
    if value is None:
        return None
    names = {"type", "threshold", "prefix_padding_ms", "silence_duration_ms", "idle_timeout_ms", *_VAD_REPORTED}
    obj = _fields(value, names, path)
    if "idle_timeout_ms" in obj:
        param = f"{path}.idle_timeout_ms"
        raise EventError("invalid_value", f"'{param}': a transcription session triggers no responses.", param)
    kind = obj.get("type")
    if kind is None and type_required:
        raise EventError("missing_required_parameter", f"Missing required parameter: '{path}.type'.", f"{path}.type")
    if kind not in (None, "server_vad"):
        raise EventError(
            "invalid_value",
            f"Invalid value for '{path}.type': {kind!r}; oasr detects turns with 'server_vad' (Silero VAD) only.",
            f"{path}.type",
        )
    base = current or TurnDetection()
    threshold = typed(obj.get("threshold", base.threshold), (int, float), f"{path}.threshold", "a number")
    if not 0 < threshold < 1:
        raise EventError(
            "invalid_value", f"'{path}.threshold' must be in (0, 1), got {threshold}.", f"{path}.threshold"
        )
    values: dict[str, Any] = {"threshold": float(threshold)}
    for name in ("prefix_padding_ms", "silence_duration_ms"):
        v = typed(obj.get(name, getattr(base, name)), (int,), f"{path}.{name}", "an integer")
        if v < 0 or (name == "silence_duration_ms" and v == 0):
            raise EventError(
                "invalid_value", f"'{path}.{name}' must be {'> 0' if v == 0 else '>= 0'}, got {v}.", f"{path}.{name}"
            )
        values[name] = v
    extra = dict(base.extra)
    for name in _VAD_REPORTED:
        if name in obj:
            extra[name] = typed(obj[name], (bool,), f"{path}.{name}", "a boolean")
    return TurnDetection(**values, extra=tuple(extra.items()))


def _noise_reduction(value: Any, path: str, current: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    obj = _fields(value, {"type", "strength"}, path)
    out = dict(current or {"type": "near_field"})
    if "type" in obj:
        if obj["type"] not in ("near_field", "far_field"):
            raise EventError(
                "invalid_value",
                f"Invalid value for '{path}.type': {obj['type']!r}. Supported values are: 'near_field', 'far_field'.",
                f"{path}.type",
            )
        out["type"] = obj["type"]
    if "strength" in obj:
        out["strength"] = typed(obj["strength"], (int, float), f"{path}.strength", "a number")
    return out


def _include(value: Any, path: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise EventError("invalid_type", f"Invalid type for '{path}': expected an array of strings.", path)
    if value:
        raise EventError("invalid_value", f"'{path}': oasr includes nothing more (no logprobs), got {value}.", path)
    return value


_ECHOED = frozenset({"id", "object", "expires_at"})  # fields of the session object a client may send back


def parse_ga_session(value: Any, current: SessionConfig, settings: ServerSettings) -> SessionConfig:
    """A ``session.update``'s ``session`` over ``current`` (fields left out keep their values).

    Raises:
        EventError: the first field that cannot be taken (nothing is changed then).
    """
    obj = _object(value, "session")
    _known(obj, {"type", "audio", "include", *_ECHOED}, "session")
    kind = obj.get("type")
    if kind is None:
        raise EventError("missing_required_parameter", "Missing required parameter: 'session.type'.", "session.type")
    if kind != "transcription":
        raise EventError(
            "invalid_value",
            f"Invalid value for 'session.type': {kind!r}; oasr serves transcription sessions only ('transcription').",
            "session.type",
        )
    changes: dict[str, Any] = {}
    if "include" in obj:
        changes["include"] = _include(obj["include"], "session.include")
    if obj.get("audio") is not None:
        audio = _object(obj["audio"], "session.audio")
        _known(audio, {"input"}, "session.audio")
        if audio.get("input") is not None:
            path = "session.audio.input"
            inp = _object(audio["input"], path)
            _known(inp, {"format", "transcription", "turn_detection", "noise_reduction"}, path)
            if inp.get("format") is not None:
                changes["format"] = _ga_format(inp["format"], f"{path}.format")
            if inp.get("transcription") is not None:
                changes.update(_transcription(inp["transcription"], f"{path}.transcription", settings))
            if "turn_detection" in inp:
                changes["turn_detection"] = _turn_detection(
                    inp["turn_detection"], f"{path}.turn_detection", current.turn_detection, type_required=True
                )
            if "noise_reduction" in inp:
                changes["noise_reduction"] = _noise_reduction(
                    inp["noise_reduction"], f"{path}.noise_reduction", current.noise_reduction
                )
    return dataclasses.replace(current, **changes)


def parse_beta_session(value: Any, current: SessionConfig, settings: ServerSettings) -> SessionConfig:
    """A ``transcription_session.update``'s ``session`` over ``current`` (``modalities`` and
    ``client_secret`` are taken and have no effect: the text is all oasr sends, it has no
    ephemeral keys).

    Raises:
        EventError: the first field that cannot be taken (nothing is changed then).
    """
    obj = _object(value, "session")
    names = {"input_audio_format", "input_audio_transcription", "turn_detection", "input_audio_noise_reduction"}
    _known(obj, {*names, "include", "modalities", "client_secret", *_ECHOED}, "session")
    changes: dict[str, Any] = {}
    if "include" in obj:
        changes["include"] = _include(obj["include"], "session.include")
    if obj.get("input_audio_format") is not None:
        changes["format"] = _beta_format(obj["input_audio_format"], "session.input_audio_format")
    if obj.get("input_audio_transcription") is not None:
        changes.update(_transcription(obj["input_audio_transcription"], "session.input_audio_transcription", settings))
    if "turn_detection" in obj:
        changes["turn_detection"] = _turn_detection(
            obj["turn_detection"], "session.turn_detection", current.turn_detection, type_required=False
        )
    if "input_audio_noise_reduction" in obj:
        changes["noise_reduction"] = _noise_reduction(
            obj["input_audio_noise_reduction"], "session.input_audio_noise_reduction", current.noise_reduction
        )
    return dataclasses.replace(current, **changes)


__all__ = [
    "AudioFormat",
    "EventError",
    "G711",
    "SessionConfig",
    "TurnDetection",
    "parse_beta_session",
    "parse_ga_session",
    "typed",
]
