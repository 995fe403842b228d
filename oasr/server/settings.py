"""What ``oasr serve`` is configured with (the command line fills one ``ServerSettings``)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_UPLOAD_MB = 25.0  # OpenAI's limit for /v1/audio uploads
DEFAULT_MAX_QUEUE = 256
DEFAULT_MAX_AUDIO_S = 4 * 3600.0  # EngineConfig.max_audio_s's default
DEFAULT_UPLOAD_IDLE_S = 60.0
# Live streams at once (encoder cache slots). The paged K/V pool they share is bounded by
# stream_cache_mb (EngineConfig's 1 GiB), so slots cost only their convolution tails and states.
DEFAULT_MAX_STREAMS = 128
DEFAULT_STREAM_IDLE_S = 30.0
DEFAULT_MAX_MESSAGE_KB = 1024.0  # one WebSocket message: 16 s of 16-kHz PCM16
DEFAULT_WS_PING_S = 20.0  # uvicorn's keepalive ping interval and pong timeout
# The default per-request budget: a base plus a share per second of audio (a number given replaces it).
TIMEOUT_BASE_S = 60.0
TIMEOUT_PER_AUDIO_S = 4.0


@dataclass(frozen=True)
class ServerSettings:
    """Settings of one server.

    Attributes:
        model: what ``AsyncEngine`` loads: a directory, a bundled name ("whisper-base",
            "tiny.en"), a Hub id, or None for the default bundled model.
        served_model_names: the names the ``model`` form field must be one of (and that
            ``/v1/models`` lists); empty means the ``model`` argument as given (or the
            default model's name).
        host, port: where uvicorn listens.
        api_key: when set, every ``/v1/...`` request needs ``Authorization: Bearer <key>``.
        ui: serve the browser page at ``/`` (``oasr.server.ui``; ``oasr serve --no-ui``: off, ``/`` is 404).
        realtime_live: ``/v1/realtime`` sessions of an offline model (Whisper ...) stream their
            deltas through the local-agreement policy (Whisper live) while the user speaks, instead
            of transcribing each turn once it ends (``oasr serve --realtime-live``).
        max_upload_mb: request bodies over this many MiB are refused with 413.
        max_queue: requests admitted (decoding audio, queued or running) before new
            ones are refused with 429 (``EngineConfig.max_queue_size``).
        request_timeout_s: a request's budget, the client's deadline: seconds in the engine
            (from the end of the upload: reading the header, audio decoding, waiting and
            transcription); None: ``TIMEOUT_BASE_S`` plus ``TIMEOUT_PER_AUDIO_S`` per second of
            audio. A request not predicted to finish within it is refused with 429 before any
            work (``oasr.engine.admission``); an admitted one still running at it gets 504.
        max_audio_s: longer audio is refused with 400 ``audio_too_long``
            (``EngineConfig.max_audio_s``; None: no limit).
        upload_idle_s: an upload that sends nothing for this long is closed with 408.
        min_duration_s: shorter audio is refused with 400.
        max_streams: live streams (``/v1/audio/stream`` connections) at once; one more is
            refused with 429 before the upgrade (``EngineConfig.max_streams``).
        stream_cache_mb: the most memory the streams' paged K/V pool takes
            (``EngineConfig.stream_cache_mb``; None: every slot's whole window).
        stream_chunk_ms, stream_left_chunks: ``EngineConfig`` streaming fields (None: the
            family's default chunk, all history).
        stream_idle_s: a stream that sends nothing for this long is closed (1008 ``idle_timeout``).
        max_message_kb: a WebSocket message over this many KiB closes its connection (1009).
        ws_ping_interval_s, ws_ping_timeout_s: the server pings each WebSocket this often and
            closes it (1011) when neither the pong nor any other data came this long after a
            ping (None / 0 interval: no pings).
        request_options: ``TranscribeOptions`` every request starts from, set by explicit
            ``oasr serve`` flags (``--beam-size`` ...; ``--language``: the language of requests
            and streams that send none); what is not in it is the decode strategy's own
            default, as through Python and ``oasr transcribe``.
        device, dtype, num_threads, max_batch_size: ``EngineConfig`` fields.
        prepare_workers: threads decoding audio / computing features.
        log_level: uvicorn's log level.
    """

    model: str | None = None
    served_model_names: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    ui: bool = True
    realtime_live: bool = False
    max_upload_mb: float = DEFAULT_MAX_UPLOAD_MB
    max_queue: int = DEFAULT_MAX_QUEUE
    request_timeout_s: float | None = None
    max_audio_s: float | None = DEFAULT_MAX_AUDIO_S
    upload_idle_s: float = DEFAULT_UPLOAD_IDLE_S
    min_duration_s: float = 0.1
    max_streams: int = DEFAULT_MAX_STREAMS
    stream_cache_mb: float | None = 1024.0
    stream_chunk_ms: float | None = None
    stream_left_chunks: int | None = None
    stream_idle_s: float = DEFAULT_STREAM_IDLE_S
    max_message_kb: float = DEFAULT_MAX_MESSAGE_KB
    ws_ping_interval_s: float | None = DEFAULT_WS_PING_S
    ws_ping_timeout_s: float | None = DEFAULT_WS_PING_S
    request_options: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    dtype: str | None = None
    num_threads: int = 0
    max_batch_size: int = 8
    prepare_workers: int = 2
    log_level: str = "info"
    extra_engine_config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (self.max_upload_mb > 0 and math.isfinite(self.max_upload_mb)):
            raise ValueError(f"max_upload_mb must be > 0, got {self.max_upload_mb}")
        if self.max_queue < 1:
            raise ValueError(f"max_queue must be >= 1, got {self.max_queue}")
        if self.request_timeout_s is not None and not self.request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be > 0 or None, got {self.request_timeout_s}")
        if self.max_audio_s is not None and not self.max_audio_s > 0:
            raise ValueError(f"max_audio_s must be > 0 or None, got {self.max_audio_s}")
        if not self.upload_idle_s > 0:
            raise ValueError(f"upload_idle_s must be > 0, got {self.upload_idle_s}")
        if self.min_duration_s < 0:
            raise ValueError(f"min_duration_s must be >= 0, got {self.min_duration_s}")
        if self.max_streams < 1:
            raise ValueError(f"max_streams must be >= 1, got {self.max_streams}")
        if not self.stream_idle_s > 0:
            raise ValueError(f"stream_idle_s must be > 0, got {self.stream_idle_s}")
        if not (self.max_message_kb > 0 and math.isfinite(self.max_message_kb)):
            raise ValueError(f"max_message_kb must be > 0, got {self.max_message_kb}")
        for name in ("ws_ping_interval_s", "ws_ping_timeout_s"):
            value = getattr(self, name)
            if value is not None and not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be >= 0 or None, got {value}")
        from oasr.engine.config import TranscribeOptions

        TranscribeOptions.from_kwargs(**self.request_options)  # names and ranges (the strategy checks the rest)
        if any(not name for name in self.served_model_names):
            raise ValueError("served model names must not be empty")

    def decode_options(self) -> dict[str, Any]:
        """The ``TranscribeOptions`` every request starts from (only what ``oasr serve`` set)."""
        return dict(self.request_options)

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)

    @property
    def max_message_bytes(self) -> int:
        return int(self.max_message_kb * 1024)

    def request_budget(self, duration_s: float) -> float:
        """Seconds a request of ``duration_s`` seconds of audio may take (see ``request_timeout_s``)."""
        if self.request_timeout_s is not None:
            return self.request_timeout_s
        return TIMEOUT_BASE_S + TIMEOUT_PER_AUDIO_S * duration_s

    @property
    def model_names(self) -> tuple[str, ...]:
        """The served names, in order (the first is the primary one)."""
        if self.served_model_names:
            return self.served_model_names
        if self.model is None:
            from oasr.models.bundled import DEFAULT_MODEL

            return (DEFAULT_MODEL,)
        return (os.fspath(self.model),)

    def unknown_model(self, model: str) -> str:
        """The message for a request naming a ``model`` this server does not serve: the served
        names, and how to serve more (an OpenAI client's examples send ``"whisper-1"``)."""
        names = " ".join(self.model_names)
        return (
            f"the model {model!r} does not exist; this server serves {list(self.model_names)} "
            f"(to answer to {model!r} too, start it with --served-model-name {names} {model})"
        )

    def engine_kwargs(self) -> dict[str, Any]:
        """``EngineConfig`` overrides for ``AsyncEngine``."""
        return {
            "device": self.device,
            "dtype": self.dtype,
            "num_threads": self.num_threads,
            "max_batch_size": self.max_batch_size,
            "max_queue_size": self.max_queue,
            "max_audio_s": self.max_audio_s,
            "max_streams": self.max_streams,
            "stream_cache_mb": self.stream_cache_mb,
            "stream_chunk_ms": self.stream_chunk_ms,
            "stream_left_chunks": self.stream_left_chunks,
            **self.extra_engine_config,
        }


def ready_line(settings, port: int, device: str, how: str = "") -> str:
    """The one line ``oasr serve`` prints to stderr once ``/health`` answers ok: where it listens,
    the names it answers to, whether it needs an API key (never the key), its device."""
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    models = ", ".join(settings.model_names)
    key = "on" if settings.api_key else "off"
    return f"oasr serve: ready at http://{host}:{port} (models: {models}; API key: {key}; device: {device}{how})"
