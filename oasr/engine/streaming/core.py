"""The streaming scheduler: many live streams, one batched encoder forward per step.

``StreamingCore`` owns an ``EncoderRuntime`` (the per-stream encoder caches) and a
``StreamSearch`` (the decoding carried across chunks). Callers ``open`` a stream (its slot
is taken then: ``EngineOverloaded`` when none is free), ``push`` samples of any length and
``finish`` it; ``step`` advances every stream that has a chunk ready by one chunk, all of
them in one encoder call and one search call (continuous batching: streams join and leave
between steps), and returns the events each produced:

- ``partial``: the segment's current best text, when it changed;
- ``final``: a finished segment, its text, tokens and token / word times on the stream's
  timeline (at an endpoint, after the second pass where the family has one, and at the end);
- ``endpoint``: an endpoint rule fired (the final before it closes the segment);
- ``error``: the stream failed (bad samples, too long, ...) and was closed;
- ``done``: the stream is over and its slot free.

Feature frames are computed as samples arrive (``FeatureStream``: equal to the whole-array
front end), so a stream's chunks do not depend on how its audio was cut into pieces or on
which other streams shared its steps; every computation after the encoder (the search, the
probabilities) is per stream. The encoder's batched kernels round a row the same whatever
rows share it as far as they can: its pointwise convolutions run as one GEMM per stream
(``oasr.layers.embedding.Conv1d``), and on CPU with the model's own chunk a stream's finals,
probabilities included, are bit-equal alone and batched (tested). A BLAS or GPU kernel that
picks its algorithm by batch size can still round a row differently in the last float32 digit
(a chunk of fewer than 8 encoder frames on CPU is one), never changing the chunks.

Threads: ``AsyncEngine`` calls ``step`` from its streaming thread and ``open`` / ``push`` /
``finish`` / ``close`` from the event loop. Every piece of the core's state (streams, slots,
blocks, search states) is touched under ``StreamingCore.lock``, except during the one model
call of a step, which runs unlocked (so the event loop never waits on the encoder) and owns
the slots of the streams in it: a stream closed meanwhile keeps its slot, blocks and cache
until the call returns, and only then are they released and the slot handed out again.

Faults: each stream's part of a step (its features, its chunk, its search, its final) runs
inside a guard, so an exception fails that stream alone (an ``error`` event, code
``engine_error``); a failure of the batched model call fails the streams in it.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from oasr.audio.frontends import build_frontend
from oasr.audio.io import AudioDecodeError, check_samples
from oasr.audio.streaming import FeatureStream
from oasr.engine.decode.words import TokenPieces, group_words, timed_word, token_times
from oasr.engine.outputs import RequestOutput, Segment, Word
from oasr.engine.punctuating import punctuate_finals
from oasr.engine.streaming.endpoint import EndpointConfig
from oasr.engine.streaming.runtime import EncoderRuntime, build_runtime
from oasr.engine.streaming.search import Hypothesis, StreamSearch, build_stream_search

__all__ = ["StreamEvent", "StreamOptions", "StreamTable", "StreamingCore"]

log = logging.getLogger("oasr.engine")

EventType = Literal["partial", "final", "endpoint", "error", "done"]


@dataclass
class StreamEvent:
    """What a stream reports.

    Attributes:
        type: "partial", "final", "endpoint", "error" or "done".
        stream_id: the stream's id.
        segment: index of the segment (0, 1, ... one per endpoint).
        text: the segment's text (partial / final).
        start, end: seconds on the stream's timeline (final: from its tokens; partial: the
            segment's start and the audio decoded so far).
        tokens: token ids (final).
        words: word times (final, when the stream asked for word timestamps).
        code, message: the error (error events).
    """

    type: EventType
    stream_id: str
    segment: int = 0
    text: str = ""
    start: float | None = None
    end: float | None = None
    tokens: list[int] = field(default_factory=list)
    words: list[Word] | None = None
    code: str | None = None
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "segment": self.segment}
        if self.type in ("partial", "final"):
            out.update(text=self.text, start=self.start, end=self.end)
        if self.type == "final":
            out["tokens"] = list(self.tokens)
            if self.words is not None:
                out["words"] = [
                    dict(start=w.start, end=w.end, word=w.word, probability=w.probability) for w in self.words
                ]
        if self.type == "endpoint":
            out["time"] = self.end
        if self.type == "error":
            out.update(code=self.code, message=self.message)
        return out


@dataclass(frozen=True)
class StreamOptions:
    """A stream's own options (its decoding options go through the engine's strategy).

    Attributes:
        sample_rate: rate of the samples the caller feeds (resampled to the model's).
        endpoint: finalise a segment whenever an endpoint rule fires (off: one segment per stream).
        endpoint_config: the rules.
        partials: send partial events.
        endpoint_vad: measure the rules' trailing silence with Silero VAD (32-ms windows under
            ``VAD_THRESHOLD`` since the last speech) instead of the decoder's blank frames (needs
            the silero-vad package).
        min_chunk_s, buffer_trimming_s: the local-agreement policy's (an offline model's stream,
            ``local_agreement.LiveOptions``; None: its defaults); refused by encoder streaming.
    """

    sample_rate: int | None = None
    endpoint: bool = False
    endpoint_config: EndpointConfig = field(default_factory=EndpointConfig)
    partials: bool = True
    endpoint_vad: bool = False
    min_chunk_s: float | None = None
    buffer_trimming_s: float | None = None


VAD_THRESHOLD = 0.5  # Silero's speech threshold (faster-whisper's and silero's default)


class StreamError(ValueError):
    """A stream's input was refused (an ``error`` event carries its code)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Stream:
    """The scheduler's record of one live stream."""

    def __init__(self, sid: str, slot: int, options, sopts: StreamOptions, features: FeatureStream, state) -> None:
        self.id = sid
        self.slot = slot
        self.options = options
        self.sopts = sopts
        self.features = features
        self.search_state = state
        self.pending: list[np.ndarray] = []  # samples pushed, not yet through the front end
        self.pending_samples = 0
        self.resampler = None
        self.buffer = torch.zeros(0, features.frontend.n_features)  # feature frames not yet encoded
        self.input_done = False  # finish() asked
        self.features_done = False  # the front end's last frames are in the buffer
        self.closed = False
        self.samples_in = 0  # at the model's rate
        self.segment = 0
        self.segment_frame0 = 0  # encoder frame (stream timeline) where the segment started
        self.last_partial = ""
        self.finals: list[Segment] = []
        self.language = getattr(options, "language", None)
        self.chunks = 0  # chunks encoded
        self.vad = None  # a SpeechProbabilityStream when the rules read Silero's silence
        self.vad_trailing = 0  # VAD windows since the last speech window (or the segment's start)


class StreamTable:
    """What the live-stream schedulers share (``StreamingCore`` here, ``LocalAgreementCore`` for
    offline models): the open streams by id under ``lock``, ``push`` / ``finish``, the samples
    a step takes in (resampled to the model's rate, bounded by ``max_audio_s``), the per-stream
    fault guard, ``fail_all`` and the results of ended streams. A subclass calls
    ``_init_table`` and implements ``_retire`` (the stream leaves and its result is kept).

    A stream record has ``id``, ``options``, ``sopts``, ``pending`` / ``pending_samples``,
    ``resampler``, ``samples_in``, ``input_done``, ``closed``, ``segment``, ``finals`` and
    ``language``.
    """

    engine: Any
    sampling_rate: int

    def _init_table(self) -> None:
        config = self.engine.config
        self.max_samples = None if config.max_audio_s is None else int(config.max_audio_s * self.sampling_rate)
        self.lock = threading.RLock()
        self.streams: dict[str, Any] = {}
        self._ids = itertools.count()
        self.result_cache: dict[str, RequestOutput] = {}  # ended streams' results until popped

    def _admission_checks(self, sopts: StreamOptions):
        """The stream's rate checked; its resampler to the model's rate (None when equal)."""
        rate = sopts.sample_rate or self.sampling_rate
        if rate < 4000 or rate > 384_000:
            raise ValueError(f"sample_rate {rate} Hz is outside 4000-384000 Hz")
        if self.engine.config.lm_path is not None:
            raise ValueError(
                "the engine's n-gram LM (lm_path) is not fused into live streams; open an engine without "
                "lm_path to stream"
            )
        if rate == self.sampling_rate:
            return None
        import soxr

        return soxr.ResampleStream(rate, self.sampling_rate, 1, dtype="float32", quality="HQ")

    @staticmethod
    def _refuse_encoder_chunks(engine, instead: str) -> None:
        """For a core that cuts no encoder chunks: the engine's chunk settings refused, saying
        what the model does ``instead``."""
        for name in ("stream_chunk_ms", "stream_left_chunks"):
            if getattr(engine.config, name) is not None:
                raise ValueError(f"{name} sets an encoder's streaming chunks; {type(engine.model).__name__} {instead}")

    def close(self, sid: str) -> None:
        """Drop a stream now (a hang-up), no events; work under way for it is discarded."""
        with self.lock:
            stream = self.streams.pop(sid, None)
            if stream is not None:
                stream.closed = True

    def can_admit(self) -> bool:
        """Room for another stream (``max_streams``: ``self.max_batch``)."""
        with self.lock:
            return len(self.streams) < self.max_batch

    def _new_id(self, stream_id: str | None) -> str:
        sid = stream_id or f"stream-{next(self._ids)}"
        if sid in self.streams:
            raise ValueError(f"a stream with id {sid!r} is already open")
        return sid

    def push(self, sid: str, samples: np.ndarray) -> None:
        """Queue samples (float32 mono at the stream's rate). Raises ``StreamError`` for bad ones."""
        with self.lock:
            stream = self._get(sid)
            if stream.input_done:
                raise StreamError("bad_request", "samples after the end of the stream")
            x = np.asarray(samples).reshape(-1)
            try:
                check_samples(x, "the stream's samples")  # before the cast: a float64 1e300 is not "inf"
            except AudioDecodeError as e:
                raise StreamError("invalid_audio", str(e)) from None
            x = x.astype(np.float32, copy=False)
            if x.size:
                stream.pending.append(x)
                stream.pending_samples += x.size

    def finish(self, sid: str) -> None:
        """No more samples: the rest is decoded and the stream's last final sent."""
        with self.lock:
            self._get(sid).input_done = True

    def _get(self, sid: str):
        stream = self.streams.get(sid)
        if stream is None or stream.closed:
            raise KeyError(f"no open stream {sid!r}")
        return stream

    def _queued_s(self, s) -> float:
        """Seconds of ``s``'s pushed samples not yet taken in."""
        return s.pending_samples / (s.sopts.sample_rate or self.sampling_rate)

    @property
    def num_streams(self) -> int:
        return len(self.streams)

    def _take_pending(self, s) -> np.ndarray:
        """(Under the lock) the samples pushed since the last step, at the model's rate (with the
        resampler's tail once the input is done); counted against ``max_audio_s``. Whatever
        was pushed is taken at once: the cost per step does not grow with the number of pieces."""
        parts = []
        if s.pending:
            x = s.pending[0] if len(s.pending) == 1 else np.concatenate(s.pending)
            s.pending, s.pending_samples = [], 0
            parts.append(s.resampler.resample_chunk(x) if s.resampler is not None else x)
        if s.input_done and s.resampler is not None:
            parts.append(s.resampler.resample_chunk(np.zeros(0, np.float32), last=True))
            s.resampler = None
        x = np.concatenate(parts) if len(parts) > 1 else parts[0] if parts else np.zeros(0, np.float32)
        s.samples_in += x.size
        if self.max_samples is not None and s.samples_in > self.max_samples:
            raise StreamError(
                "audio_too_long", f"the stream is longer than the {self.engine.config.max_audio_s:g}-s limit"
            )
        return x

    def _guarded(self, s, events: list[StreamEvent], fn, *args) -> None:
        """``fn(*args)``, one stream's part of a step: an exception fails that stream alone."""
        try:
            fn(*args)
        except StreamError as e:
            self._fail(s, e.code, str(e), events)
        except AudioDecodeError as e:  # non-finite features (``Frontend`` checks them)
            self._fail(s, "invalid_audio", str(e), events)
        except Exception as e:  # noqa: BLE001 - a bug or a hostile option: this stream ends, the others go on
            log.error("stream %s failed", s.id, exc_info=e)
            self._fail(s, "engine_error", f"the stream failed: {type(e).__name__}: {e}", events)

    def fail_all(self, code: str, message: str) -> list[StreamEvent]:
        """Fail every open stream (a fault the step's guards did not contain); their events."""
        events: list[StreamEvent] = []
        with self.lock:
            for s in list(self.streams.values()):
                self._fail(s, code, message, events)
        return events

    def _fail(self, s, code: str, message: str, events: list[StreamEvent]) -> None:
        events.append(StreamEvent("error", s.id, s.segment, code=code, message=message))
        self._retire(s)

    def _retire(self, s) -> None:
        raise NotImplementedError

    def _result(self, s) -> RequestOutput:
        return RequestOutput(
            request_id=s.id,
            text="".join(seg.text for seg in s.finals).strip(),
            segments=list(s.finals),
            language=s.language,
            duration=s.samples_in / self.sampling_rate,
        )

    def pop_result(self, sid: str) -> RequestOutput | None:
        """The whole result of a stream that ended (its finals as segments), once."""
        with self.lock:
            return self.result_cache.pop(sid, None)


class StreamingCore(StreamTable):
    """Live streams of one model (see the module).

    Args:
        engine: the ``EngineCore`` (loaded model, config, option validation).
        runtime_kind: force a runtime ("stateful" over a "slot" model: the parity oracle).
    """

    def __init__(self, engine, runtime_kind: str | None = None) -> None:
        self.engine = engine
        loaded = engine.loaded
        config = engine.config
        if loaded.feature_spec is None or loaded.tokenizer is None:
            raise ValueError("streaming needs the checkpoint's feature spec and tokenizer")
        self.model = loaded.model
        self.frontend = build_frontend(loaded.feature_spec)
        if self.frontend.framing is None:
            raise ValueError(
                f"{type(self.model).__name__} cannot stream: its front end ({loaded.feature_spec.kind}) "
                f"normalises over the whole utterance"
            )
        self.sampling_rate = int(self.frontend.sampling_rate)
        self.decode_type = str(engine.strategy.decode_type)
        self.runtime: EncoderRuntime = build_runtime(
            self.model,
            runtime_kind,
            chunk_ms=config.stream_chunk_ms,
            left_chunks=config.stream_left_chunks,
            max_streams=config.max_streams,
            feature_shift_s=self.frontend.frame_shift_s,
            max_stream_frames=self._max_frames(config),
            cache_mb=config.stream_cache_mb,
        )
        self.plan = self.runtime.plan
        strategy = engine.strategy
        self.blank_id = int(getattr(self.model, "blank_id", 0))
        self.skip_ids = frozenset(getattr(strategy, "skip_ids", ()) or ())
        params = dict(loaded.decoding_spec.params) if loaded.decoding_spec is not None else {}
        self.search: StreamSearch = build_stream_search(
            self.decode_type, self.model, self.blank_id, self.skip_ids, params
        )
        self.tokenizer = loaded.tokenizer
        self.pieces = TokenPieces(self.tokenizer, self.skip_ids | {self.blank_id})
        self.max_batch = max(1, int(config.max_streams))
        self._init_table()
        self.chunks_encoded = 0
        self.steps = 0
        self._retired_chunks: dict[str, int] = {}
        self._in_call: frozenset[int] = frozenset()  # slots the step's unlocked model call writes
        self._release_after_call: list[int] = []  # slots of streams closed during that call

    def _max_frames(self, config) -> int:
        seconds = config.max_audio_s if config.max_audio_s is not None else 4 * 3600.0
        enc = self.model.encoder
        return int(math.ceil(seconds / (self.frontend.frame_shift_s * enc.subsampling_rate))) + 64

    # -- streams --------------------------------------------------------------------

    def open(self, options: Any, sopts: StreamOptions, stream_id: str | None = None) -> str:
        """Admit a stream (its decoding ``options`` already validated). Raises ``EngineOverloaded``."""
        resampler = self._admission_checks(sopts)
        for name in ("min_chunk_s", "buffer_trimming_s"):
            if getattr(sopts, name) is not None:
                raise ValueError(
                    f"{name} is an option of offline models streamed by local agreement; "
                    f"{type(self.model).__name__} streams its encoder chunk by chunk (see stream_chunk_ms)"
                )
        conditioning = self._conditioning(options)
        with self.lock:
            slot = self.runtime.admit(conditioning)
            try:
                sid = self._new_id(stream_id)
                stream = _Stream(
                    sid, slot, options, sopts, FeatureStream(self.frontend), self.search.new_state(options)
                )
                stream.buffer = self._head(stream.buffer)
                if sopts.endpoint_vad:
                    from oasr.audio.vad import SpeechProbabilityStream

                    if self.sampling_rate not in (8000, 16000):
                        raise ValueError(f"endpoint_vad needs a model at 8 or 16 kHz, not {self.sampling_rate} Hz")
                    stream.vad = SpeechProbabilityStream(self.sampling_rate)
                stream.resampler = resampler
            except BaseException:
                self.runtime.release(slot)
                raise
            self.streams[sid] = stream
        return sid

    def _conditioning(self, options: Any) -> dict[str, float]:
        """Persistent per-stream states a request sets (a language prompt), by state name."""
        hook = getattr(self.model, "streaming_conditioning", None)
        return dict(hook(options)) if hook is not None else {}

    def close(self, sid: str) -> None:
        """Drop a stream now (a hang-up): its slot and cache are freed at once, no events."""
        with self.lock:
            stream = self.streams.pop(sid, None)
            if stream is not None and not stream.closed:
                stream.closed = True
                self._free_slot(stream.slot)

    def _free_slot(self, slot: int) -> None:
        """Release a slot now, or, while the step's model call still writes it, when the call returns."""
        if slot in self._in_call:
            self._release_after_call.append(slot)
        else:
            self.runtime.release(slot)

    def backlog_s(self, sid: str) -> float:
        """Seconds of a stream's audio received and not yet encoded (0 for a stream that is not
        open): what a server reads to stop taking audio from a client that sends faster than
        the engine decodes."""
        with self.lock:
            s = self.streams.get(sid)
            if s is None:
                return 0.0
            return self._queued_s(s) + s.buffer.shape[0] * self.frontend.frame_shift_s

    def chunks_encoded_of(self, sid: str) -> int:
        """Chunks of a stream encoded so far (0 for a stream that is not open)."""
        stream = self.streams.get(sid)
        if stream is not None:
            return stream.chunks
        return self._retired_chunks.get(sid, 0)

    def can_admit(self) -> bool:
        """Whether ``open`` would find room for one more stream now (a slot, and pool blocks)."""
        with self.lock:
            return self.runtime.room() is None

    def has_work(self) -> bool:
        """Whether a step would do anything (a chunk ready, samples to featurise, a stream to end)."""
        with self.lock:
            for s in self.streams.values():
                if s.pending or s.input_done:  # samples to featurise, or a stream to end
                    return True
                if self._chunk_ready(s) is not None:
                    return True
            return False

    # -- the step -------------------------------------------------------------------

    def step(self) -> list[StreamEvent]:
        """Advance every stream with a chunk ready by one chunk; the events, in order (finals
        punctuated when the engine has a ``punc_model``: ``engine/punctuating.py``)."""
        events = self._step()
        punctuator = getattr(self.engine, "punctuator", None)
        if punctuator is not None:
            failed = punctuate_finals(punctuator, self.engine.config.punc_always, events)
            with self.lock:
                for sid in failed:
                    if sid in self.streams:
                        self._retire(self.streams[sid])
        return events

    def _step(self) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        with self.lock:
            ready = self._gather(events)
            if not ready:
                return events
            self._in_call = frozenset(r[0].slot for r in ready)
        try:
            feats = torch.stack([r[1] for r in ready])
            lens = torch.tensor([r[2] for r in ready], dtype=torch.long)
            # Unlocked: the event loop goes on queueing samples and opening streams; the slots
            # in ``_in_call`` are this call's alone (``_free_slot`` defers their release).
            with torch.inference_mode():
                enc, enc_lens = self.runtime.encode([r[0].slot for r in ready], feats, lens, [r[3] for r in ready])
                self.search.advance([r[0].search_state for r in ready], enc, enc_lens)
        except Exception as e:  # noqa: BLE001 - the step's streams fail; the others and the engine go on
            with self.lock:
                self._end_call()
                for s, *_ in ready:
                    if not s.closed:
                        self._fail(s, "engine_error", f"decoding failed: {type(e).__name__}: {e}", events)
            return events
        with self.lock:
            self._end_call()
            self.chunks_encoded += len(ready)
            self.steps += 1
            for s, *_ in ready:
                s.chunks += 1
                if not s.closed:
                    self._guarded(s, events, self._after_chunk, s, events)
        return events

    def _gather(self, events: list[StreamEvent]) -> list[tuple[_Stream, torch.Tensor, int, bool]]:
        """(Under the lock) featurise, end the streams whose input is all encoded, take the
        chunks that are ready and make room for them in the cache: the batch of the step."""
        streams = list(self.streams.values())
        for s in streams:
            self._guarded(s, events, self._featurize, s)
        ready: list[tuple[_Stream, torch.Tensor, int, bool]] = []
        for s in streams:
            if s.closed:
                continue
            if len(ready) < self.max_batch:
                self._guarded(s, events, self._take_ready, s, ready, events)
            elif self._chunk_ready(s) is None and s.features_done:
                self._guarded(s, events, self._end, s, events)
        if ready:
            refused = set(self.runtime.reserve([r[0].slot for r in ready]))
            for r in ready:
                if r[0].slot in refused:
                    self._fail(r[0], "cache_full", "the streaming cache is full: the stream was stopped", events)
            ready = [r for r in ready if r[0].slot not in refused]
        return ready

    def _take_ready(self, s: _Stream, ready: list, events: list[StreamEvent]) -> None:
        chunk = self._chunk_ready(s)
        if chunk is not None:
            ready.append((s, *self._take_chunk(s, chunk)))
        elif s.features_done:
            self._end(s, events)

    def _end_call(self) -> None:
        """(Under the lock) the model call returned: its slots are the scheduler's again."""
        self._in_call = frozenset()
        pending, self._release_after_call = self._release_after_call, []
        for slot in pending:
            self.runtime.release(slot)

    def fail_all(self, code: str, message: str) -> list[StreamEvent]:
        """Fail every open stream (a fault the step's guards did not contain); their events."""
        with self.lock:
            self._end_call()
            return super().fail_all(code, message)

    def _featurize(self, s: _Stream) -> None:
        if s.pending or (s.input_done and not s.features_done):
            self._add_samples(s, self._take_pending(s))
        if s.input_done and not s.features_done:
            tail = s.features.finish()
            pad = (
                torch.full((self.plan.tail_frames, tail.shape[1]), self.plan.pad_value)
                if self.plan.tail_frames
                else tail[:0]
            )
            s.buffer = torch.cat([s.buffer, tail, pad])
            s.features_done = True

    def _head(self, buffer: torch.Tensor) -> torch.Tensor:
        """``buffer`` behind the encoder's head frames (a fresh or just reset encoder cache)."""
        if not self.plan.head_frames:
            return buffer
        return torch.cat([torch.full((self.plan.head_frames, buffer.shape[1]), self.plan.pad_value), buffer])

    def _add_samples(self, s: _Stream, x: np.ndarray) -> None:
        if not x.size:
            return
        if s.vad is not None:
            s.vad.feed(x)
            for p in s.vad.flush():
                s.vad_trailing = 0 if p >= VAD_THRESHOLD else s.vad_trailing + 1
        frames = s.features.push(x)
        if frames.shape[0]:
            s.buffer = torch.cat([s.buffer, frames])

    def _chunk_ready(self, s: _Stream) -> int | None:
        """Valid frames of the next chunk, or None when none is ready."""
        n = s.buffer.shape[0]
        if n >= self.plan.window_frames:
            return self.plan.window_frames
        if s.features_done and n >= self.plan.min_final_frames and n > 0:
            return n
        return None

    def _take_chunk(self, s: _Stream, valid: int) -> tuple[torch.Tensor, int, bool]:
        w = self.plan.window_frames
        window = s.buffer[:w]
        if valid < w:
            pad = torch.full((w - valid, window.shape[1]), self.plan.pad_value)
            window = torch.cat([window, pad])
        # A short window is not always the last: where windows overlap by more than
        # min_final_frames (icefall's Zipformer: 13 frames), the next one still starts inside it.
        s.buffer = s.buffer[self.plan.stride_frames :]
        if s.features_done and s.buffer.shape[0] < self.plan.min_final_frames:
            s.buffer = s.buffer[:0]  # too few to encode: the reference drops them too
        final = valid < w and not s.buffer.shape[0]
        return window, valid, final

    def _after_chunk(self, s: _Stream, events: list[StreamEvent]) -> None:
        hyp = self.search.partial(s.search_state)
        frames = self.search.frames(s.search_state)
        if s.sopts.endpoint:
            frame_s = self.plan.output_frame_s
            if s.vad is not None:
                trailing = s.vad_trailing * s.vad.net.window / self.sampling_rate
            else:
                trailing = self.search.trailing_blanks(s.search_state) * frame_s
            if s.sopts.endpoint_config.detect(bool(hyp.tokens), trailing, frames * frame_s):
                self._finalize_segment(s, events, endpoint=True)
                return
        if s.sopts.partials:
            text = self.tokenizer.decode(hyp.tokens).strip() if hyp.tokens else ""
            if text != s.last_partial:
                s.last_partial = text
                start = s.segment_frame0 * self.plan.output_frame_s
                end = (s.segment_frame0 + frames) * self.plan.output_frame_s
                events.append(StreamEvent("partial", s.id, s.segment, text, round(start, 3), round(end, 3)))

    def _finalize_segment(self, s: _Stream, events: list[StreamEvent], endpoint: bool) -> None:
        with torch.inference_mode():
            hyp = self.search.finalize(s.search_state)
        frames = self.search.frames(s.search_state)
        event = self._final_event(s, hyp, frames)
        if event is not None:
            events.append(event)
        if endpoint:
            end = (s.segment_frame0 + frames) * self.plan.output_frame_s
            events.append(StreamEvent("endpoint", s.id, s.segment, end=round(end, 3)))
            self.search.reset(s.search_state)
            self.runtime.reset(s.slot)
            s.buffer = self._head(s.buffer)
            s.segment_frame0 += frames
            s.segment += 1
            s.vad_trailing = 0
            s.last_partial = ""

    def _final_event(self, s: _Stream, hyp: Hypothesis, frames: int) -> StreamEvent | None:
        tokens = list(hyp.tokens)
        frame_s = self.plan.output_frame_s
        offset = s.segment_frame0 * frame_s
        seg_end = offset + frames * frame_s
        audio_end = s.samples_in / self.sampling_rate
        end_cap = min(seg_end, audio_end) if s.features_done else seg_end
        if not tokens:
            return None
        spans = token_times(hyp.frames, frame_s, offset, end_cap)
        probs = hyp.probs if len(hyp.probs) == len(tokens) else ()
        words = [
            word
            for span in group_words(tokens, self.pieces)
            if (word := timed_word(span, tokens, spans, probs, self.tokenizer)) is not None
        ]
        text = "".join(w.word for w in words)
        if not text.strip():
            return None
        start, end = round(spans[0][0], 3), round(spans[-1][1], 3)
        want_words = bool(getattr(s.options, "word_timestamps", False))
        seg = Segment(
            id=len(s.finals),
            seek=0,
            start=start,
            end=end,
            text=text,
            tokens=tokens,
            avg_logprob=float(hyp.score) / max(1, frames),
            words=words if want_words else None,
            token_times=[(round(a, 3), round(b, 3)) for a, b in spans],
        )
        s.finals.append(seg)
        return StreamEvent("final", s.id, s.segment, text.strip(), start, end, tokens, words if want_words else None)

    def _end(self, s: _Stream, events: list[StreamEvent]) -> None:
        """The stream's input is all encoded: its last final, then done; the slot is freed."""
        self._finalize_segment(s, events, endpoint=False)
        events.append(StreamEvent("done", s.id, s.segment))
        self._retire(s)

    def _retire(self, s: _Stream) -> None:
        if not s.closed:
            s.closed = True
            self._free_slot(s.slot)
        self.result_cache[s.id] = self._result(s)
        self._retired_chunks[s.id] = s.chunks
        self.streams.pop(s.id, None)

    # -- results ------------------------------------------------------------------------

    def pop_result(self, sid: str) -> RequestOutput | None:
        """The whole result of a stream that ended (its finals as segments), once."""
        with self.lock:
            self._retired_chunks.pop(sid, None)
            return super().pop_result(sid)

    def stats(self) -> dict[str, Any]:
        return {
            "streams_active": len(self.streams),
            "streams_capacity": self.runtime.max_streams,
            "stream_chunks_encoded": self.chunks_encoded,
            "stream_steps": self.steps,
            "stream_cache_bytes": self.runtime.memory_bytes(),
        }
