"""Batched long-form transcription over VAD chunks (faster-whisper's ``BatchedInferencePipeline``).

``VadSplitter`` sits between an engine and its decode strategy. Requests without
``vad_filter`` pass straight through. A ``vad_filter`` request is cut in ``prepare``
(off the engine loop): its audio is decoded, Silero VAD finds the speech
(``oasr.audio.vad.speech_spans``), the spans are packed into chunks of at most
``CHUNK_S`` of speech with the silences left out (``merge_spans``), and every chunk
becomes a request of its own to the strategy, prepared there and then. All chunks are
admitted together, so the strategy encodes and decodes them as independent windows of
the same batches (its ``max_batch_size`` at a time), none prompted with another's text.

As chunks finish, their results are stitched in time order: segment and word times
are mapped from the chunk's audio back to the original recording
(``SpeechChunk.to_global``), segments are renumbered, and ``segment`` / ``delta``
events go out for a chunk once every earlier chunk is done, so a request's events
arrive in time order. The request's text joins the chunks' texts with a space (none
between two characters of a script written without spaces); its deltas concatenate
exactly to it. Without a forced language every chunk detects its own; the request
reports the language with the most speech, and ``finish_reason="length"`` when a token budget
cut any chunk. A failing chunk fails the request and
aborts its other chunks; audio without speech finishes with an empty transcript.

Whisper sometimes ends a chunk with end-of-text well before its speech ends (a change
of speaker or topic inside the chunk is enough), which drops the rest. With
timestamps, a strategy that can stop early (``DecodeStrategy.stops_early``) is given
the untranscribed tail once more: when a chunk's last segment ends ``TAIL_S`` or more
before the chunk does, its audio from there on is decoded as a request of its own, whose
segments follow the chunk's (once per chunk; the tail's own tail is not decoded again).

VAD runs while the audio is decoded, a piece at a time (``SpeechProbabilityStream``),
and the decoded samples are kept in memory up to ``SPOOL_AFTER_S`` and in a temporary
file past it, so the memory a ``vad_filter`` request takes does not grow with its
duration; the file lives only until the chunks' samples are cut out of it. Afterwards
the chunks' features are kept, and, where tails may be decoded again, each chunk's
audio until the chunk is done.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from oasr.audio.io import iter_audio
from oasr.audio.vad import (
    CHUNK_S,
    SpeechChunk,
    SpeechProbabilityStream,
    merge_spans,
    require_silero,
    spans_from_probabilities,
    speech_spans,
)
from oasr.engine.config import TranscribeOptions, is_set
from oasr.engine.decode.base import DecodeStrategy, Request, StepEvent
from oasr.engine.outputs import RequestOutput, Segment, Word
from oasr.languages import is_no_space_char

FRAMES_PER_SECOND = 100  # Segment.seek counts 10 ms feature frames
TAIL_S = 2.0  # a chunk whose segments end this much before it does has its tail decoded again
SPOOL_AFTER_S = 600.0  # a vad_filter request's samples past this many seconds go to a temporary file


class _SampleSpool:
    """Decoded samples, in memory up to ``limit`` of them and in a temporary file past it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pieces: list[np.ndarray] = []
        self.size = 0
        self.file = None

    def append(self, piece: np.ndarray) -> None:
        self.size += piece.size
        if self.file is None and self.size > self.limit:
            self.file = tempfile.TemporaryFile(prefix="oasr-vad-")
            for p in self.pieces:
                self.file.write(p.astype(np.float32, copy=False).tobytes())
            self.pieces = []
        if self.file is None:
            self.pieces.append(piece)
        else:
            self.file.write(piece.astype(np.float32, copy=False).tobytes())

    def samples(self) -> np.ndarray:
        """All the samples (a read-only memory map of the file past the limit)."""
        if self.file is None:
            return np.concatenate(self.pieces) if self.pieces else np.zeros(0, np.float32)
        self.file.flush()
        return np.memmap(self.file, dtype=np.float32, mode="r", shape=(self.size,))

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        self.pieces = []


class VadChunks:
    """What ``VadSplitter.prepare`` made of a request: its chunks, their prepared requests,
    and (where tails may be decoded again) their audio, else None."""

    def __init__(
        self, chunks: list[SpeechChunk], requests: list[Request], audios: list[np.ndarray] | None = None
    ) -> None:
        self.chunks = chunks
        self.requests = requests
        self.audios = audios

    def close(self) -> None:
        """Free the chunks' features (those a strategy has not taken over)."""
        for request in self.requests:
            close = getattr(request.features, "close", None)  # the llm strategy's features are a plain tuple
            if close is not None:
                close()
        self.requests = []
        self.audios = None


@dataclass(eq=False)
class _Part:
    """One chunk of a request, as the strategy decodes it."""

    chunk: SpeechChunk
    request_id: str
    audio: np.ndarray | None = None  # the chunk's samples while its tail may be decoded again
    pending: list[Segment] = field(default_factory=list)  # decoded, not yet sent on
    emitted: int = 0  # of the chunk's segments sent on
    text: str = ""  # deltas not yet sent on
    text_sent: bool = False
    output: RequestOutput | None = None


@dataclass(eq=False)
class _Parent:
    request: Request
    parts: list[_Part]
    head: int = 0  # the first chunk not finished and sent on
    segments: list[Segment] = field(default_factory=list)
    text: str = ""  # the text sent on as deltas

    @property
    def rid(self) -> str:
        return self.request.request_id


class VadSplitter:
    """Drives a decode strategy, cutting ``vad_filter`` requests into independent VAD chunks.

    It offers the calls an engine makes of a strategy (``validate``, ``prepare``,
    ``add_request``, ``step``, ``abort``, ``num_unfinished``, ``stats``) and counts a
    cut request as one.

    Args:
        strategy: the decode strategy that decodes the chunks.
        sampling_rate: the rate the strategy's front end takes.
    """

    def __init__(self, strategy: DecodeStrategy, sampling_rate: int) -> None:
        self.strategy = strategy
        self.sampling_rate = sampling_rate
        self.parents: dict[str, _Parent] = {}
        self.part_of: dict[str, tuple[_Parent, _Part]] = {}  # chunk request id -> (request, chunk)
        self.tails_decoded = 0
        self.empty: deque[_Parent] = deque()  # requests without speech, finished at the next step

    @property
    def streams_text(self) -> bool:
        return self.strategy.streams_text

    @property
    def prompt_option(self) -> str | None:
        return self.strategy.prompt_option

    # -- admission ---------------------------------------------------------------------

    def validate(self, options: TranscribeOptions) -> TranscribeOptions:
        """The strategy's validation; a ``vad_filter`` request also needs silero-vad.

        Raises:
            ValueError: an option the strategy cannot honour.
            ImportError: ``vad_filter`` without the silero-vad package.
        """
        options = self.strategy.validate(options)
        if options.vad_filter:
            require_silero()
        return options

    def prepare(self, request: Request) -> Request:
        """Decode the audio; for ``vad_filter``, find its speech and prepare one request per chunk.

        Raises:
            ValueError: bad audio (``oasr.audio.AudioDecodeError``).
            ImportError: silero-vad is not installed.
        """
        opts = request.options
        if opts is None or not opts.vad_filter:
            return self.strategy.prepare(request)
        if request.features is not None:
            return request
        sr = self.sampling_rate
        spool = _SampleSpool(round(SPOOL_AFTER_S * sr))
        prepared: list[Request] = []
        chunks: list[SpeechChunk] = []
        try:
            audio = self._decode_with_vad(request, spool)
            if isinstance(audio, tuple):
                audio, spans = audio
            else:
                spans = speech_spans(audio, sr, opts.vad_options())
            chunks = merge_spans(spans, sr, CHUNK_S)
            audios: list[np.ndarray] | None = [] if self._decodes_tails(opts) else None
            for i, chunk in enumerate(chunks):
                samples = chunk.audio(audio)
                if audios is not None:
                    audios.append(samples)
                part = Request(f"{request.request_id}/vad{i}", samples, _chunk_options(opts, i))
                prepared.append(self.strategy.prepare(part))
        except BaseException:
            VadChunks(chunks, prepared).close()
            raise
        finally:
            spool.close()
        request.features = VadChunks(chunks, prepared, audios)
        request.duration = spool.size / sr
        return request

    def _decode_with_vad(self, request: Request, spool: _SampleSpool):
        """Decode the request's audio into ``spool``; at a rate Silero takes, run VAD on the
        pieces as they come and return ``(samples, spans)``, else just the samples."""
        sr = self.sampling_rate
        stream = SpeechProbabilityStream(sr) if sr in (8000, 16000) else None
        for piece in iter_audio(request.source, sr, max_duration_s=self.strategy.config.max_audio_s):
            spool.append(piece)
            if stream is not None:
                stream.feed(piece)
        audio = spool.samples()
        if stream is None:
            return audio
        spans = spans_from_probabilities(stream.finish(), spool.size, sr, spool.size, sr, request.options.vad_options())
        return audio, spans

    @torch.inference_mode()
    def add_request(self, request: Request) -> None:
        """Admit a prepared request (a ``vad_filter`` one as all its chunks)."""
        if request.options is None or not request.options.vad_filter:
            self.strategy.add_request(request)
            return
        if request.request_id in self.parents:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        if request.features is None:
            self.prepare(request)
        features: VadChunks = request.features
        audios = features.audios or [None] * len(features.chunks)
        parent = _Parent(
            request, [_Part(c, r.request_id, a) for c, r, a in zip(features.chunks, features.requests, audios)]
        )
        added: list[str] = []
        try:
            for part_request in features.requests:
                self.strategy.add_request(part_request)
                added.append(part_request.request_id)
        except BaseException:
            for rid in added:
                self.strategy.abort(rid)
            features.close()
            raise
        self.parents[parent.rid] = parent
        for part in parent.parts:
            self.part_of[part.request_id] = (parent, part)
        if not parent.parts:
            self.empty.append(parent)

    @torch.inference_mode()
    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is (a cut one with all its chunks); True if it was known.

        Runs under the same inference mode as ``step``: freeing rows moves K/V the step wrote."""
        parent = self.parents.pop(request_id, None)
        if parent is None:
            return self.strategy.abort(request_id)
        self._drop_parts(parent)
        return True

    def _drop_parts(self, parent: _Parent) -> list[str]:
        """Abort the chunks of ``parent`` still in the strategy; return their request ids."""
        ids = [part.request_id for part in parent.parts if self.part_of.pop(part.request_id, None) is not None]
        for rid in ids:
            self.strategy.abort(rid)
        if parent in self.empty:
            self.empty.remove(parent)
        return ids

    def num_unfinished(self) -> int:
        """Requests admitted and not yet finished (a cut request counts once)."""
        return self.strategy.num_unfinished() - len(self.part_of) + len(self.parents)

    def stats(self) -> dict[str, float]:
        return {**self.strategy.stats(), "vad_tails_decoded": self.tails_decoded}

    def _decodes_tails(self, opts: TranscribeOptions) -> bool:
        return self.strategy.stops_early and not opts.without_timestamps

    # -- the step ------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> list[StepEvent]:
        """One step of the strategy, with the chunks' events turned into their requests' events."""
        events: list[StepEvent] = []
        while self.empty:
            self._finish(self.empty.popleft(), events)
        dropped: set[str] = set()  # chunks of requests that failed in this step
        for event in self.strategy.step():
            link = self.part_of.get(event.request_id)
            if link is None:
                if event.request_id not in dropped:
                    events.append(event)
                continue
            parent, part = link
            if event.kind == "error":
                self.part_of.pop(event.request_id, None)  # gone from the strategy already
                self.parents.pop(parent.rid, None)
                dropped.update(self._drop_parts(parent))
                events.append(StepEvent(parent.rid, "error", error=event.error))
                continue
            if event.kind == "segment" and event.segment is not None:
                part.pending.append(event.segment)
            elif event.kind == "delta":
                part.text += event.delta
            elif event.kind == "finished" and event.output is not None:
                self.part_of.pop(event.request_id, None)
                part.output = event.output
                part.pending = list(event.output.segments[part.emitted :])
                try:
                    self._decode_tail(parent, part)
                except Exception as e:  # the tail's audio could not be prepared: fail the request
                    self.parents.pop(parent.rid, None)
                    dropped.update(self._drop_parts(parent))
                    events.append(StepEvent(parent.rid, "error", error=e))
                    continue
            self._flush(parent, events)
        return events

    def _decode_tail(self, parent: _Parent, part: _Part) -> None:
        """Admit the untranscribed tail of a finished chunk as a chunk of its own, right
        after it (see the module's docstring), and let go of the chunk's audio."""
        audio, part.audio = part.audio, None
        segments = part.output.segments if part.output is not None else []
        if audio is None or not segments:
            return
        end = max(seg.end for seg in segments)
        if part.chunk.duration - end < TAIL_S:
            return
        tail = part.chunk.tail(end)
        skip = len(audio) - tail.num_samples
        options = _chunk_options(parent.request.options, len(parent.parts))  # no prefix: not the first chunk
        request = self.strategy.prepare(Request(f"{part.request_id}/tail", audio[skip:], options))
        self.strategy.add_request(request)
        tail_part = _Part(tail, request.request_id)
        parent.parts.insert(parent.parts.index(part) + 1, tail_part)
        self.part_of[tail_part.request_id] = (parent, tail_part)
        self.tails_decoded += 1

    def _flush(self, parent: _Parent, events: list[StepEvent]) -> None:
        """Send on what the chunks have decoded, in time order; finish the request when all are done."""
        while parent.head < len(parent.parts):
            part = parent.parts[parent.head]
            for segment in part.pending:
                mapped = _map_segment(segment, part.chunk, len(parent.segments) + 1)
                parent.segments.append(mapped)
                events.append(StepEvent(parent.rid, "segment", segment=mapped))
            part.emitted += len(part.pending)
            part.pending = []
            if part.text:
                # The separator goes before a chunk's first text, as in the final text.
                delta = part.text if part.text_sent else _separator(parent.text, part.text) + part.text
                part.text_sent = True
                parent.text += delta
                events.append(StepEvent(parent.rid, "delta", delta=delta))
                part.text = ""
            if part.output is None:
                return
            parent.head += 1
        self._finish(parent, events)

    def _finish(self, parent: _Parent, events: list[StepEvent]) -> None:
        self.parents.pop(parent.rid, None)
        request = parent.request
        outputs = [p.output for p in parent.parts if p.output is not None]
        text = ""
        for out in outputs:
            if out.text:
                text += _separator(text, out.text) + out.text
        language, probability, probs = _language(parent, request.options)
        emotion, audio_events = _tags(parent)
        output = RequestOutput(
            request_id=parent.rid,
            text=text,
            segments=parent.segments,
            language=language,
            language_probability=probability,
            language_probs=probs,
            duration=request.duration,
            task=request.options.task,
            finish_reason="length" if any(out.finish_reason == "length" for out in outputs) else "stop",
            emotion=emotion,
            audio_events=audio_events,
        )
        events.append(StepEvent(parent.rid, "finished", output=output))


class DriverWrapper:
    """A driver around another (``VadSplitter`` or a wrapper of it: punctuation, diarization):
    whatever it does not define itself goes to ``inner``."""

    inner: Any

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (unpickling, a half-built wrapper): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def streams_text(self) -> bool:
        return self.inner.streams_text

    @property
    def prompt_option(self) -> str | None:
        return self.inner.prompt_option


def _chunk_options(opts: TranscribeOptions, index: int) -> TranscribeOptions:
    """A chunk is decoded on its own: no VAD, no previous text, the prefix only for the first."""
    changes: dict[str, object] = {"vad_filter": False, "vad_parameters": None, "clip_timestamps": "0"}
    # Options of the strategy that reads them (a strategy without them leaves them unset).
    if is_set(opts.condition_on_previous_text):
        changes["condition_on_previous_text"] = False
    if is_set(opts.prefix) and index > 0:
        changes["prefix"] = None
    return dataclasses.replace(opts, **changes)


def _separator(before: str, after: str) -> str:
    """What goes between two chunks' texts: a space, unless one side has whitespace or both
    sides are characters of a script written without spaces."""
    if not before or not after or before[-1].isspace() or after[0].isspace():
        return ""
    return "" if is_no_space_char(before[-1]) and is_no_space_char(after[0]) else " "


def _map_segment(segment: Segment, chunk: SpeechChunk, segment_id: int) -> Segment:
    """The segment with its times (and its words' and tokens') in the original audio."""
    words = None
    if segment.words is not None:
        words = [
            Word(
                start=round(chunk.to_global(w.start), 3),
                end=round(chunk.to_global(w.end, is_end=True), 3),
                word=w.word,
                probability=w.probability,
            )
            for w in segment.words
        ]
    token_times = None
    if segment.token_times is not None:
        token_times = [
            (round(chunk.to_global(a), 3), round(chunk.to_global(b, is_end=True), 3)) for a, b in segment.token_times
        ]
    window_start = chunk.to_global(segment.seek / FRAMES_PER_SECOND)
    return dataclasses.replace(
        segment,
        id=segment_id,
        seek=round(window_start * FRAMES_PER_SECOND),
        start=round(chunk.to_global(segment.start), 3),
        end=round(chunk.to_global(segment.end, is_end=True), 3),
        words=words,
        token_times=token_times,
    )


def _language(parent: _Parent, opts: TranscribeOptions) -> tuple[str | None, float | None, dict[str, float] | None]:
    """The request's language: the one decoded over the most speech, with the probabilities of
    the longest chunk decoded in it."""
    speech: dict[str, float] = {}
    longest: dict[str, _Part] = {}
    for part in parent.parts:
        out = part.output
        if out is None or out.language is None:
            continue
        speech[out.language] = speech.get(out.language, 0.0) + part.chunk.duration
        if out.language not in longest or part.chunk.duration > longest[out.language].chunk.duration:
            longest[out.language] = part
    if not speech:
        return opts.language, (1.0 if opts.language is not None else None), None
    language = max(speech, key=lambda lang: speech[lang])
    out = longest[language].output
    assert out is not None
    return language, out.language_probability, out.language_probs


def _tags(parent: _Parent) -> tuple[str | None, list[str] | None]:
    """The emotion tagged over the most speech, and every chunk's audio events in order, each once
    (None where no chunk's model tags them: all but SenseVoice)."""
    speech: dict[str, float] = {}
    events: list[str] | None = None
    for part in parent.parts:
        out = part.output
        if out is None:
            continue
        if out.emotion is not None:
            speech[out.emotion] = speech.get(out.emotion, 0.0) + part.chunk.duration
        if out.audio_events is not None:
            events = list(dict.fromkeys([*(events or []), *out.audio_events]))
    return (max(speech, key=lambda e: speech[e]) if speech else None), events


__all__ = ["DriverWrapper", "VadChunks", "VadSplitter"]
