"""``/v1/realtime``: OpenAI's Realtime API transcription sessions over a WebSocket.

The life of a session:

1. Upgrade, ``GET /v1/realtime?intent=transcription``. The API key (when one is set) comes as
   ``Authorization: Bearer <key>`` or, from a browser, in the subprotocol
   ``openai-insecure-api-key.<key>`` offered beside ``realtime`` (checked by ``GateMiddleware``;
   the upgrade answers with ``realtime`` when it was offered). Refused before it as
   ``/v1/audio/stream`` is (``oasr.server.streaming``: 401, 429 ``streams_full``, 503): the two
   routes share ``--max-streams``. Without ``intent=transcription`` (a conversation, a
   speech-to-speech ``model=``), or with a ``model=`` that is not served, the session gets one
   ``error`` event and is closed with 1008: oasr only transcribes.
2. The server sends ``session.created`` (GA shape: ``session.type = "transcription"``), or
   ``transcription_session.created`` (beta shape) to a client that sent ``OpenAI-Beta:
   realtime=v1``. The defaults: ``audio/pcm`` at 24 kHz, the first served model, no language or
   prompt, ``server_vad`` turn detection with OpenAI's 0.5 / 300 ms / 500 ms (none when the
   silero-vad package is missing), no noise reduction.
3. Client events (JSON text): ``session.update`` (GA) and ``transcription_session.update`` (beta)
   answered by ``session.updated`` / ``transcription_session.updated`` with the whole effective
   configuration in the same shape; ``input_audio_buffer.append`` (base64 audio in the session's
   format), ``input_audio_buffer.commit``, ``input_audio_buffer.clear``.
4. Server events: ``input_audio_buffer.speech_started`` / ``speech_stopped`` (server VAD),
   ``committed``, ``cleared``; ``conversation.item.input_audio_transcription.delta`` /
   ``completed`` (with ``usage`` in seconds of audio) / ``failed``; ``error``.

How a turn becomes text is chosen by ``live_policy`` (one function, the one place to change it):

* ``"stream"``, a model whose encoder streams: each turn is one engine live stream
  (``AsyncEngine.open_stream``), fed as the audio arrives, so its ``delta`` events come while the
  user speaks, before the turn is committed: a delta is the text two successive partials agree
  on, up to a word boundary, so no sent text is taken back; ``completed`` carries the stream's
  final once the turn is committed (the deltas concatenate to it unless the final revised what
  two partials agreed on).
* ``"live"``, an offline model served with ``--realtime-live`` that ``open_stream`` takes
  (Whisper live, ``oasr.engine.streaming.local_agreement``): each turn is one such stream; a
  delta is each newly confirmed piece (local agreement never takes confirmed words back);
  ``completed`` is every piece once the turn is committed.
* ``"turns"``, an offline model (Whisper, Parakeet, Qwen3-ASR ...): each turn is transcribed when
  it ends (committed by the client or by the VAD) as ``POST /v1/audio/transcriptions`` would
  transcribe it (the same options, the same admission; a turn refused or failed gets
  ``failed``), its text streamed as deltas where the strategy streams text (Whisper's, the
  speech LLMs'), one delta per segment otherwise. A session's turns are transcribed in order.

Server VAD runs Silero VAD (``oasr.audio.vad.SpeechProbabilityStream``) on 32-ms windows of the
session's audio (resampled to 16 kHz with soxr when it is not at 8 or 16 kHz): speech starts at
the first window at ``threshold``; it stops after ``silence_duration_ms`` of windows under
Silero's own lower threshold (``threshold - 0.15``); the turn's audio starts
``prefix_padding_ms`` before its speech and ends with that silence (``audio_start_ms`` and
``audio_end_ms`` on the session's timeline say exactly which audio it was). Noise reduction is
accepted and reported back; oasr filters nothing (the VAD and the model hear the audio as sent).

Errors: every client event that cannot be taken gets an ``error`` event in OpenAI's shape
(``{"type": "error", "event_id", "error": {"type", "code", "message", "param", "event_id"}}``,
``error.event_id`` the client's) and the session goes on: ``invalid_json``, ``invalid_type``,
``missing_required_parameter``, ``unknown_parameter``, ``invalid_value`` (an unknown event type,
bad base64, a model that is not served, a language the model lacks ...),
``input_audio_buffer_commit_empty`` (less than 100 ms of audio), ``input_audio_buffer_too_long``
(a turn past ``--max-audio-seconds``). A session that sends nothing for
``--stream-idle-timeout`` seconds gets ``idle_timeout`` and 1008; one message over
``--max-message-kb`` closes it with 1009 (as ``/v1/audio/stream``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import io
import json
import logging
import os
import uuid
import wave
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from starlette.websockets import WebSocket

from oasr.engine.async_engine import EngineStopped
from oasr.engine.decode.base import EngineOverloaded
from oasr.engine.decode.deltas import TranscriptDeltas
from oasr.engine.streaming.api import stream_support
from oasr.languages import LanguageError
from oasr.server.errors import APIError
from oasr.server.metrics import ServerMetrics
from oasr.server.protocol import MAX_JSON_DEPTH, json_too_deep
from oasr.server.realtime_protocol import (
    EventError,
    SessionConfig,
    TurnDetection,
    parse_beta_session,
    parse_ga_session,
    typed,
)
from oasr.server.serving import OpenAIServingTranscription, event_text
from oasr.server.settings import ServerSettings
from oasr.server.streaming import (
    CLOSE_INTERNAL_ERROR,
    CLOSE_POLICY,
    MAX_BACKLOG_S,
    OpenSessions,
    Refusal,
    StreamingEndpoint,
    _Gone,
    disconnect_label,
)

log = logging.getLogger("oasr.server")

SUBPROTOCOL = "realtime"
MIN_COMMIT_MS = 100  # a shorter buffer is not committed (OpenAI's input_audio_buffer_commit_empty)
VAD_WINDOW_MS = 32  # Silero's window (512 samples at 16 kHz, 256 at 8 kHz)
VAD_HYSTERESIS = 0.15  # speech ends under threshold - this (Silero's get_speech_timestamps)


def live_policy(engine, settings: ServerSettings) -> str:
    """How a session turns audio into text (see the module): ``"stream"`` through the engine's
    live streams, ``"live"`` through its local-agreement streams (an offline model, with
    ``settings.realtime_live``), or ``"turns"``, each turn transcribed once it ends."""
    if engine.model.encoder.streaming_kind != "none":
        return "stream"
    return "live" if settings.realtime_live and stream_support(engine) is None else "turns"


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:22]}"


# ---------------------------------------------------------------------------
# Server VAD


class TurnDetector:
    """Where speech starts and stops in a session's audio (see the module), in input samples
    counted from ``origin`` (the session sample the detector started at).

    Args:
        rate: Hz of the session's audio.
        settings: the session's ``server_vad`` settings.
        origin: the session sample of the first sample it will be fed.
    """

    def __init__(self, rate: int, settings: TurnDetection, origin: int) -> None:
        from oasr.audio.vad import SpeechProbabilityStream

        self.rate = rate
        self.settings = settings
        self.origin = origin
        vad_rate = rate if rate in (8000, 16000) else 16000
        self.resampler = None
        if vad_rate != rate:
            import soxr

            self.resampler = soxr.ResampleStream(rate, vad_rate, 1, dtype="float32", quality="HQ")
        self.probabilities = SpeechProbabilityStream(vad_rate)
        self.windows = 0  # windows read so far
        self.speaking = False
        self.silence_from: int | None = None  # the window the current silence began at
        self.low = max(settings.threshold - VAD_HYSTERESIS, 0.01)
        self.silence_windows = -(-settings.silence_duration_ms // VAD_WINDOW_MS)

    def position(self, window: int) -> int:
        """The session sample window ``window`` starts at."""
        return self.origin + round(window * VAD_WINDOW_MS * self.rate / 1000)

    def feed(self, samples: np.ndarray) -> list[tuple[str, int]]:
        """Take the next samples (float32); ``("start" | "stop", session sample)`` of the speech
        starts and stops they complete, in order."""
        x = self.resampler.resample_chunk(samples) if self.resampler is not None else samples
        self.probabilities.feed(x)
        out: list[tuple[str, int]] = []
        for p in self.probabilities.flush():
            k, self.windows = self.windows, self.windows + 1
            if not self.speaking:
                if p >= self.settings.threshold:
                    self.speaking, self.silence_from = True, None
                    out.append(("start", self.position(k)))
            elif p >= self.settings.threshold:
                self.silence_from = None
            elif p < self.low:
                if self.silence_from is None:
                    self.silence_from = k
                if k + 1 - self.silence_from >= self.silence_windows:
                    self.speaking, self.silence_from = False, None
                    out.append(("stop", self.position(k + 1)))
        return out

    def reset(self) -> None:
        """Forget the speech in progress (the buffer was committed or cleared by the client)."""
        self.speaking, self.silence_from = False, None


# ---------------------------------------------------------------------------
# A session


@dataclass
class _Turn:
    """One user item: audio from ``start`` (session samples) to ``end`` once committed."""

    item_id: str
    start: int
    end: int | None = None
    stream: Any = None  # the engine live stream ("stream" and "live" policies)
    fed: int = 0  # the session sample its stream has audio up to
    task: asyncio.Task | None = None
    wav: bytes = b""  # its audio once committed ("turns" policy)
    options: dict[str, Any] = field(default_factory=dict)  # the engine options it is transcribed with
    failed: bool = False
    seconds: float = 0.0
    deltas: TranscriptDeltas = field(default_factory=TranscriptDeltas)


def stable_prefix(previous: str, current: str) -> str:
    """The text two successive partials agree on, cut back to the end of its last whole word
    when it has spaces (a script written without them is cut by character)."""
    agreed = os.path.commonprefix([previous, current])
    if agreed == current == previous:
        return agreed
    cut = agreed.rfind(" ")
    return agreed[: cut + 1] if cut >= 0 else agreed


class RealtimeSession:
    """One connection's state: its configuration, the uncommitted audio, the turn in progress."""

    def __init__(self, endpoint: RealtimeEndpoint, ws: WebSocket, beta: bool, config: SessionConfig) -> None:
        self.endpoint = endpoint
        self.engine = endpoint.engine
        self.settings = endpoint.settings
        self.ws = ws
        self.beta = beta
        self.id = _new_id("sess")
        self.policy = live_policy(self.engine, self.settings)
        self.config = config
        self.decode = self.decode_options(config, beta)
        self.chunks: list[np.ndarray] = []  # the uncommitted audio, 16-bit, from self.start
        self.buffered = 0  # samples in self.chunks
        self.start = 0  # the session sample of the buffer's first sample
        self.received = 0  # session samples received at this format's rate
        self.ms0 = 0.0  # session milliseconds at which this format began
        self.vad = self._detector(config)
        self.turn: _Turn | None = None
        self.previous_item: str | None = None
        self.queue: asyncio.Queue[_Turn] = asyncio.Queue()
        self.pending_s = 0.0  # seconds of committed audio not yet transcribed ("turns")
        self.tasks: set[asyncio.Task] = set()
        self.lock = asyncio.Lock()
        self.worker = self._spawn(self._transcribe_turns) if self.policy == "turns" else None

    # -- configuration ---------------------------------------------------------------------

    def decode_options(self, config: SessionConfig, beta: bool) -> dict[str, Any]:
        """The engine options of ``config`` (those ``/v1/audio/transcriptions`` would build).

        Raises:
            EventError: the model refuses them (a language it lacks, a prompt it does not take).
        """
        kwargs: dict[str, Any] = {"task": "transcribe", **self.settings.decode_options()}
        path = "session.input_audio_transcription" if beta else "session.audio.input.transcription"
        if config.language:
            kwargs["language"] = config.language
        if config.prompt:
            kwargs[self.engine.splitter.prompt_option or "initial_prompt"] = config.prompt
        try:
            self.engine.make_options(**kwargs)
        except LanguageError as e:
            raise EventError("invalid_value", str(e), f"{path}.language") from None
        except (TypeError, ValueError, ImportError) as e:
            param = f"{path}.prompt" if config.prompt else path
            raise EventError("invalid_value", str(e), param) from None
        return kwargs

    def _detector(self, config: SessionConfig) -> TurnDetector | None:
        if config.turn_detection is None:
            return None
        return TurnDetector(config.format.rate, config.turn_detection, self.received)

    def update(self, session: Any, *, beta: bool) -> dict[str, Any]:
        """Apply an update event's ``session``; the ``*.updated`` event."""
        parse = parse_beta_session if beta else parse_ga_session
        config = parse(session, self.config, self.settings)
        if config.format != self.config.format and self.turn is not None:
            raise EventError(
                "invalid_value", "Commit or clear the input audio buffer before changing its format.", "session"
            )
        if config.turn_detection is not None:
            from oasr.audio.vad import require_silero

            try:
                require_silero()
            except ImportError as e:
                raise EventError("invalid_value", str(e), "session.turn_detection") from None
        decode = self.decode_options(config, beta)
        if config.format != self.config.format:  # no turn: the buffer holds no more than VAD padding
            self.ms0 = self.ms(self.received)
            self.chunks, self.buffered, self.received, self.start = [], 0, 0, 0
        if config.turn_detection != self.config.turn_detection or config.format != self.config.format:
            self.vad = self._detector(config)
        self.config, self.decode, self.beta = config, decode, beta
        return self.session_event("updated")

    def session_event(self, what: str) -> dict[str, Any]:
        if self.beta:
            return {"type": f"transcription_session.{what}", "session": self.config.beta(self.id)}
        return {"type": f"session.{what}", "session": self.config.ga(self.id)}

    # -- audio -----------------------------------------------------------------------------

    def ms(self, sample: int) -> int:
        """Milliseconds of the session's audio before session sample ``sample``."""
        return round(self.ms0 + sample * 1000 / self.config.format.rate)

    def audio(self, a: int, b: int) -> np.ndarray:
        """The 16-bit samples of session samples [a, b) of the buffer (read from its end: a live
        turn reads its newest audio once per append)."""
        parts, end = [], self.start + self.buffered
        for chunk in reversed(self.chunks):
            begin = end - chunk.size
            if begin < b and end > a:
                parts.append(chunk[max(a, begin) - begin : min(b, end) - begin])
            if begin <= a:
                break
            end = begin
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts[::-1]) if parts else np.zeros(0, np.int16)

    def drop(self, upto: int) -> None:
        """Forget the buffer before session sample ``upto``."""
        kept = self.audio(upto, self.start + self.buffered)
        self.chunks, self.buffered, self.start = ([kept] if kept.size else []), kept.size, upto

    async def append(self, pcm: np.ndarray) -> None:
        """An ``input_audio_buffer.append``'s samples."""
        if self.settings.max_audio_s is not None:
            turn_start = self.turn.start if self.turn is not None else self.start
            if (self.received + pcm.size - turn_start) / self.config.format.rate > self.settings.max_audio_s:
                raise EventError(
                    "input_audio_buffer_too_long",
                    f"The input audio buffer would pass the server's {self.settings.max_audio_s:g}-s limit; "
                    "commit or clear it.",
                    "audio",
                )
        if pcm.size:
            self.chunks.append(pcm)
            self.buffered += pcm.size
        self.received += pcm.size
        if self.vad is not None:
            await self._detect_turns(pcm)
        elif self.turn is None and pcm.size:
            await self._start_turn(self.start)
        if self.turn is not None:
            self._feed(self.received)

    async def _detect_turns(self, pcm: np.ndarray) -> None:
        """Server VAD over an append: turns start and stop (committed) where speech does."""
        td, rate = self.config.turn_detection, self.config.format.rate
        assert td is not None and self.vad is not None
        for kind, at in self.vad.feed(pcm.astype(np.float32) / 32768.0):
            if kind == "start" and self.turn is not None:  # a turn the client began (VAD turned on since)
                started = {"type": "input_audio_buffer.speech_started", "audio_start_ms": self.ms(self.turn.start)}
                await self.send({**started, "item_id": self.turn.item_id})
            elif kind == "start":
                start = max(self.start, at - round(td.prefix_padding_ms * rate / 1000))
                await self._start_turn(start, speech=True)
            elif self.turn is not None:
                stopped = {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": self.ms(at)}
                await self.send({**stopped, "item_id": self.turn.item_id})
                try:
                    await self.commit(at)
                except EventError:  # under 100 ms with padding: a click, not a turn
                    self.clear()
        if self.turn is None:  # no speech: only the prefix padding's worth of audio is kept
            keep = round((td.prefix_padding_ms + VAD_WINDOW_MS) * rate / 1000)
            if self.received - keep > self.start:
                self.drop(self.received - keep)

    async def _start_turn(self, start: int, *, speech: bool = False) -> None:
        turn = self.turn = _Turn(_new_id("item"), start, fed=start)
        if speech:
            started = {"type": "input_audio_buffer.speech_started", "audio_start_ms": self.ms(start)}
            await self.send({**started, "item_id": turn.item_id})
        if self.policy == "turns":
            return
        try:
            turn.stream = await self.engine.open_stream(sample_rate=self.config.format.rate, **self.decode)
        except (EngineOverloaded, EngineStopped, RuntimeError, TypeError, ValueError, ImportError) as e:
            turn.failed = True
            await self.failed(turn, _engine_error(e))
            return
        turn.task = self._spawn(self._stream_events, turn)

    def _feed(self, upto: int) -> None:
        turn = self.turn
        if turn is None or turn.stream is None or turn.stream.done or upto <= turn.fed:
            return
        x = self.audio(turn.fed, upto)
        turn.fed = upto
        with contextlib.suppress(KeyError, ValueError):  # ended by the engine: its events say why
            turn.stream.feed(x.astype(np.float32) / 32768.0)

    async def commit(self, end: int | None = None) -> None:
        """Commit the buffer up to session sample ``end`` (None: all of it) as one item."""
        end = self.received if end is None else end
        start = self.turn.start if self.turn is not None else self.start
        ms = (end - start) * 1000 / self.config.format.rate
        if ms < MIN_COMMIT_MS:
            raise EventError(
                "input_audio_buffer_commit_empty",
                f"Error committing input audio buffer: buffer too small. Expected at least {MIN_COMMIT_MS}ms of "
                f"audio, but buffer only has {ms:.2f}ms of audio.",
            )
        if self.turn is None:
            await self._start_turn(start)
        turn = self.turn
        assert turn is not None
        self._feed(end)
        turn.end, turn.seconds = end, (end - start) / self.config.format.rate
        await self.send(
            {"type": "input_audio_buffer.committed", "previous_item_id": self.previous_item, "item_id": turn.item_id}
        )
        self.previous_item, self.turn = turn.item_id, None
        if self.vad is not None:
            self.vad.reset()
        if self.policy != "turns":
            if turn.stream is not None and not turn.stream.done:
                with contextlib.suppress(KeyError):
                    turn.stream.finish()
        elif not turn.failed:
            turn.wav, turn.options = _wav(self.audio(start, end), self.config.format.rate), self.decode
            self.pending_s += turn.seconds
            self.queue.put_nowait(turn)
        self.drop(end)

    def clear(self) -> None:
        """Drop the uncommitted audio and the turn in progress (its stream is closed)."""
        turn, self.turn = self.turn, None
        if turn is not None and self.policy != "turns" and turn.stream is not None:
            turn.stream.close()
            if turn.task is not None:
                turn.task.cancel()
        if self.vad is not None:
            self.vad.reset()
        self.drop(self.received)

    @property
    def backlog_s(self) -> float:
        """Seconds of this session's audio waiting for the engine."""
        if self.worker is not None:
            return self.pending_s if not self.worker.done() else 0.0
        turn = self.turn
        return turn.stream.backlog_s if turn is not None and turn.stream is not None and not turn.stream.done else 0.0

    # -- transcription ---------------------------------------------------------------------

    async def _stream_events(self, turn: _Turn) -> None:
        """A turn's live stream: deltas as two partials agree (``"live"``: as its finals confirm
        words), ``completed`` on its last final."""
        previous, finals = "", []
        async for event in turn.stream:
            if event.type == "partial" and self.policy == "stream":
                stable, previous = stable_prefix(previous, event.text), event.text
                await self.delta(turn, stable)
            elif event.type == "final":
                finals.append(event.text)
                if self.policy == "live":  # each final is a confirmed piece of the turn
                    await self.delta(turn, " ".join(t for t in finals if t))
            elif event.type == "error":
                await self.failed(
                    turn, EventError(event.code or "engine_error", event.message or "", type="server_error")
                )
                return
        transcript = " ".join(t for t in finals if t)
        await self.delta(turn, transcript)
        await self.completed(turn, transcript)

    async def _transcribe_turns(self) -> None:
        """Transcribe the committed turns in order, as ``POST /v1/audio/transcriptions`` would."""
        serving = self.endpoint.serving
        while True:
            turn = await self.queue.get()
            raw = ""
            try:
                options = self.engine.make_options(**turn.options)
                events = self.engine.stream(
                    turn.wav, options, timeout=self.settings.request_budget, min_duration_s=self.settings.min_duration_s
                )
                try:
                    async for event in events:
                        piece = event_text(event, self.engine.splitter.streams_text)
                        if piece is not None:
                            raw += piece
                            await self.delta(turn, raw.strip())
                        elif event.kind == "finished" and event.output is not None:
                            text = event.output.text.strip()
                            await self.delta(turn, text)
                            await self.completed(turn, text)
                finally:
                    await events.aclose()
            except (_Gone, asyncio.CancelledError):
                raise
            except Exception as e:  # noqa: BLE001 - the turn fails, the session goes on
                err = serving.engine_error(e, "input_audio_buffer")
                await self.failed(turn, EventError(err.code or "server_error", err.message, err.param, err.type))
            finally:
                self.pending_s -= turn.seconds

    async def delta(self, turn: _Turn, text: str) -> None:
        piece = turn.deltas.extend(text)
        if piece:
            await self.send(
                {
                    "type": "conversation.item.input_audio_transcription.delta",
                    "item_id": turn.item_id,
                    "content_index": 0,
                    "delta": piece,
                }
            )

    async def completed(self, turn: _Turn, transcript: str) -> None:
        await self.send(
            {
                "type": "conversation.item.input_audio_transcription.completed",
                "item_id": turn.item_id,
                "content_index": 0,
                "transcript": transcript,
                "usage": {"type": "duration", "seconds": round(turn.seconds, 3)},
            }
        )

    async def failed(self, turn: _Turn, error: EventError) -> None:
        err = error.error()
        err.pop("event_id")
        await self.send(
            {
                "type": "conversation.item.input_audio_transcription.failed",
                "item_id": turn.item_id,
                "content_index": 0,
                "error": err,
            }
        )

    # -- plumbing --------------------------------------------------------------------------

    async def send(self, event: dict[str, Any]) -> None:
        """Send a server event (its ``event_id`` added)."""
        async with self.lock:
            await self.endpoint._send(self.ws, {"event_id": _new_id("event"), **event})

    def _spawn(self, work, *args) -> asyncio.Task:
        """Run ``work(*args)`` in the background (made inside the task: one cancelled before it
        starts leaves no coroutine behind)."""
        task = asyncio.ensure_future(_guarded(work, *args))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def close(self) -> None:
        """End the session's work: its live stream is closed, its pending turns dropped."""
        if self.turn is not None and self.turn.stream is not None and self.policy != "turns":
            self.turn.stream.close()
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(BaseException):
                await task


async def _guarded(work, *args) -> None:
    """Run a session's background work: a gone client ends it quietly (the receive loop hears
    of it), a bug is logged (the session's other work goes on)."""
    try:
        await work(*args)
    except _Gone:
        pass
    except Exception as e:  # noqa: BLE001
        log.error("a realtime session task failed", exc_info=e)


def _engine_error(e: BaseException) -> EventError:
    if isinstance(e, EngineOverloaded):
        return EventError("streams_full", str(e), type="server_error")
    if isinstance(e, (EngineStopped, RuntimeError)):
        return EventError("engine_stopped", str(e), type="server_error")
    return EventError("invalid_value", str(e))


def _wav(pcm: np.ndarray, rate: int) -> bytes:
    """16-bit mono WAV of ``pcm``: a turn handed to the engine as an upload would be."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())
    return buf.getvalue()


# ---------------------------------------------------------------------------
# The route


_APPEND_FIELDS = frozenset({"type", "event_id", "audio"})
_BARE_FIELDS = frozenset({"type", "event_id"})
_UPDATE_FIELDS = frozenset({"type", "event_id", "session"})
CLIENT_EVENTS = (
    "session.update",
    "transcription_session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
)


class RealtimeEndpoint(StreamingEndpoint):
    """Serves ``/v1/realtime`` transcription sessions over one ``AsyncEngine`` (see the module);
    admission, the open-session count, receiving and sending are ``/v1/audio/stream``'s.

    Args:
        engine: the ``AsyncEngine``.
        settings: the server's settings.
        metrics: the server's metrics (sessions are counted with ``/v1/audio/stream``'s).
        sessions: the open-session count shared with ``/v1/audio/stream``.
    """

    def __init__(self, engine, settings: ServerSettings, metrics: ServerMetrics, sessions: OpenSessions) -> None:
        super().__init__(engine, settings, metrics, sessions)
        self.serving = OpenAIServingTranscription(engine, settings, metrics)

    def subprotocol(self, ws: WebSocket) -> str | None:
        return SUBPROTOCOL if SUBPROTOCOL in ws.scope.get("subprotocols", ()) else None

    def refusal(self, engine_stream: bool = True) -> APIError | None:
        return super().refusal(engine_stream=live_policy(self.engine, self.settings) != "turns")

    def default_config(self) -> SessionConfig:
        from oasr.audio.vad import require_silero

        try:
            require_silero()
            vad: TurnDetection | None = TurnDetection()
        except ImportError:
            vad = None
        return SessionConfig(model=self.settings.model_names[0], turn_detection=vad)

    async def _session(self, ws: WebSocket) -> int:
        beta = "realtime=v1" in ws.headers.get("openai-beta", "")
        session: RealtimeSession | None = None
        try:
            config = self._opening(ws)
            session = RealtimeSession(self, ws, beta, config)
            await session.send(session.session_event("created"))
            while True:
                while session.backlog_s > MAX_BACKLOG_S:  # backpressure, as /v1/audio/stream
                    await asyncio.sleep(0.01)
                message = await self._receive(ws)
                await self._dispatch(session, message)
        except Refusal as r:
            return await self._close(ws, r)
        except _Gone as g:
            return disconnect_label(g.code)
        except Exception as e:  # a bug: this session ends with 1011, the server goes on
            log.error("realtime session failed", exc_info=e)
            return await self._close(
                ws, Refusal(CLOSE_INTERNAL_ERROR, "internal_error", f"internal error: {type(e).__name__}")
            )
        finally:
            if session is not None:
                await session.close()

    def _opening(self, ws: WebSocket) -> SessionConfig:
        """The session's first configuration, from the URL's ``intent`` and ``model``.

        Raises:
            Refusal: (1008) not a transcription session, or a model that is not served.
        """
        intent = ws.query_params.get("intent")
        model = ws.query_params.get("model")
        if intent != "transcription":
            what = (
                f"intent={intent!r}"
                if intent
                else (f"model={model!r} without intent=transcription" if model else "no intent")
            )
            raise Refusal(
                CLOSE_POLICY,
                "invalid_intent",
                f"oasr serves Realtime transcription sessions only: connect with ?intent=transcription (got {what})",
            )
        config = self.default_config()
        if model:
            if model not in self.settings.model_names:
                raise Refusal(CLOSE_POLICY, "model_not_found", self.settings.unknown_model(model))
            config = dataclasses.replace(config, model=model)
        return config

    async def _close(self, ws: WebSocket, refusal: Refusal) -> int:
        error = EventError(
            refusal.code,
            str(refusal),
            type="invalid_request_error" if refusal.close_code == CLOSE_POLICY else "server_error",
        )
        try:
            await self._send(ws, {"type": "error", "event_id": _new_id("event"), "error": error.error()})
            await ws.close(refusal.close_code, reason=refusal.code)
        except (_Gone, RuntimeError, OSError):
            return 0
        return refusal.close_code

    async def _dispatch(self, session: RealtimeSession, message: dict[str, Any]) -> None:
        """Take one client message; a bad one gets an ``error`` event."""
        event_id = None
        try:
            event = _parse_event(message)
            event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
            if event.get("event_id") is not None:
                typed(event["event_id"], (str,), "event_id", "a string")
            if "type" not in event:
                raise EventError("missing_required_parameter", "Missing required parameter: 'type'.", "type")
            typed(event["type"], (str,), "type", "a string")
            await self._apply(session, event)
        except EventError as e:
            await session.send({"type": "error", "error": e.error(event_id)})

    async def _apply(self, session: RealtimeSession, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind in ("session.update", "transcription_session.update"):
            _known_top(event, _UPDATE_FIELDS)
            if "session" not in event:
                raise EventError("missing_required_parameter", "Missing required parameter: 'session'.", "session")
            await session.send(session.update(event["session"], beta=kind == "transcription_session.update"))
        elif kind == "input_audio_buffer.append":
            _known_top(event, _APPEND_FIELDS)
            if "audio" not in event:
                raise EventError("missing_required_parameter", "Missing required parameter: 'audio'.", "audio")
            audio = typed(event["audio"], (str,), "audio", "a base64 string")
            try:
                data = base64.b64decode(audio, validate=True)
            except (binascii.Error, ValueError):
                raise EventError(
                    "invalid_value", "Invalid 'audio': expected base64-encoded audio bytes.", "audio"
                ) from None
            await session.append(session.config.format.samples(data))
        elif kind == "input_audio_buffer.commit":
            _known_top(event, _BARE_FIELDS)
            await session.commit()
        elif kind == "input_audio_buffer.clear":
            _known_top(event, _BARE_FIELDS)
            session.clear()
            await session.send({"type": "input_audio_buffer.cleared"})
        else:
            raise EventError(
                "invalid_value",
                f"Invalid value: {kind!r}. oasr's transcription sessions take: {', '.join(map(repr, CLIENT_EVENTS))}.",
                "type",
            )


def _parse_event(message: dict[str, Any]) -> dict[str, Any]:
    text = message.get("text")
    if text is None:
        raise EventError("invalid_json", "Binary messages are not Realtime events: send each event as JSON text.")
    if json_too_deep(text, MAX_JSON_DEPTH):
        raise EventError("invalid_json", f"The event is nested more than {MAX_JSON_DEPTH} levels deep.")
    try:
        event = json.loads(text)
    except ValueError as e:
        raise EventError("invalid_json", f"The server failed to parse the event as JSON: {e}.") from None
    if not isinstance(event, dict):
        raise EventError("invalid_json", "An event must be a JSON object.")
    return event


def _known_top(event: dict[str, Any], names: frozenset[str]) -> None:
    for name in event:
        if name not in names:
            raise EventError("unknown_parameter", f"Unknown parameter: '{name}'.", name)


__all__ = ["CLIENT_EVENTS", "RealtimeEndpoint", "SessionConfig", "TurnDetector", "live_policy", "stable_prefix"]
