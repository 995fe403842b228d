"""Live streams of offline models: LocalAgreement-2 over a growing audio buffer.

The policy of whisper_streaming (Macháček et al. 2023, "Turning Whisper into Real-Time
Transcription System"), as a scheduler with ``StreamingCore``'s interface, for a model whose
encoder only runs offline (Whisper, and any offline strategy that times words):

1. A stream's samples collect in a buffer. Once ``min_chunk_s`` of new audio is there (1 s by
   default, whisper_streaming's ``--min-chunk-size``), the whole buffer is transcribed again,
   with word timestamps, the confirmed text that scrolled out of the buffer as the prompt (its
   last ``PROMPT_CHARS`` characters, as whisper_streaming; the strategy keeps Whisper's last 223
   prompt tokens) and the language the first decode detected (kept for the stream) unless one
   was given.
2. Agreement (``LocalAgreement``): the new hypothesis' words are moved onto the stream's
   timeline; words that start before the last confirmed one ended are dropped, and so is a
   repeat of the last 1-5 confirmed words at its head. The longest common word prefix of this
   hypothesis and the previous one is confirmed: a ``final`` event (never taken back). What is
   left of this hypothesis is the ``partial`` (the unconfirmed tail).
3. Trimming: once the buffer is longer than ``buffer_trimming_s`` (15 s by default,
   whisper_streaming's ``--buffer_trimming_sec``), it is cut at the end of the last decode's
   segment, but one, that ends inside the confirmed text (its "segment" trimming); a buffer
   that still passes ``MAX_BUFFER_S`` (a decode that gives one segment: CTC, a transducer) is
   cut at the last confirmed word's end.
4. ``finish``: the rest of the audio is transcribed once more, agreed, and what stays
   unconfirmed is confirmed too (the last ``final``), then ``done``.

Events: each ``final`` is a piece of confirmed words and a segment of its own (its index is
the next segment's; the result's segments are the finals); ``partial`` carries the segment
after them. ``final`` events carry no token ids (``tokens`` is empty: a confirmed piece is words
cut out of a decode). With ``endpoint=True`` the endpoint rules read the latest decode:
trailing silence is the audio after its last word; rule 2 confirms the unconfirmed tail (a
``final``) and cuts the buffer after that word (an ``endpoint`` event), rule 3 (the longest
segment) cuts it after the last confirmed word, rule 1 (no words at all) drops the silence but
the last ``min_chunk_s``.

Batching: a ``step`` transcribes the buffers of every stream with a decode due in one batched
offline decode, through a decode strategy of its own (``engine.build_strategy()``: a second
instance over the same weights; the engine's strategy, driven by another thread, is never
touched). Threads, locking and fault guards are ``StreamingCore``'s (``core.StreamTable``, shared): ``open``
/ ``push`` / ``finish`` / ``close`` and the step's bookkeeping run under ``lock``; the decode runs
unlocked.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from oasr.engine.decode.base import EngineOverloaded, Request
from oasr.engine.outputs import RequestOutput, Segment, Word
from oasr.engine.streaming.core import StreamEvent, StreamOptions, StreamTable

__all__ = ["LiveOptions", "LocalAgreement", "LocalAgreementCore"]

log = logging.getLogger("oasr.engine")

PROMPT_CHARS = 200  # whisper_streaming's prompt: the last 200 characters of scrolled-out confirmed text
MAX_BUFFER_S = 30.0  # a buffer no segment end could trim is cut at its last confirmed word past this
BACK_TOLERANCE_S = 0.1  # a new word may start this much before the last confirmed one ended
REPEAT_WINDOW_S = 1.0  # a hypothesis that starts this close to the confirmed text may repeat its tail ...
MAX_REPEAT_WORDS = 5  # ... by at most this many words


@dataclass(frozen=True)
class LiveOptions:
    """The local-agreement policy's options of one stream.

    Attributes:
        min_chunk_s: seconds of new audio that make a decode due (whisper_streaming's
            ``--min-chunk-size``, 1.0).
        buffer_trimming_s: a buffer longer than this is trimmed at a confirmed segment end
            (whisper_streaming's ``--buffer_trimming_sec``, 15).
    """

    min_chunk_s: float = 1.0
    buffer_trimming_s: float = 15.0

    def __post_init__(self) -> None:
        for name in ("min_chunk_s", "buffer_trimming_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if self.buffer_trimming_s > MAX_BUFFER_S:
            raise ValueError(f"buffer_trimming_s must be at most {MAX_BUFFER_S:g} s, got {self.buffer_trimming_s!r}")

    @classmethod
    def of(cls, sopts: StreamOptions) -> LiveOptions:
        """The stream's options, the defaults where it set none."""
        given = {k: getattr(sopts, k) for k in ("min_chunk_s", "buffer_trimming_s") if getattr(sopts, k) is not None}
        return cls(**given)


def _same(a: Word, b: Word) -> bool:
    return a.word.strip() == b.word.strip()


class LocalAgreement:
    """LocalAgreement-2 over hypotheses of words on one timeline (whisper_streaming's
    ``HypothesisBuffer``): ``update`` confirms the longest common prefix of the last two
    hypotheses, past what is already confirmed.

    Attributes:
        tail: the latest hypothesis' words past the confirmed ones (the partial).
        confirmed_in_buffer: confirmed words still inside the audio buffer (a new hypothesis
            re-transcribes them; ``trim`` drops them with the audio).
        last_end: where the last confirmed word ended (seconds).
    """

    def __init__(self) -> None:
        self.tail: list[Word] = []
        self.confirmed_in_buffer: list[Word] = []
        self.last_end = 0.0

    def update(self, words: list[Word]) -> list[Word]:
        """Take a new hypothesis (words on the stream's timeline); the words it confirms."""
        done = self.confirmed_in_buffer
        if done and len(words) > len(done) and all(_same(a, b) for a, b in zip(done, words)):
            # The hypothesis re-transcribes the confirmed words still in the buffer as they were:
            # what follows them is new, wherever the word times put its first word (they may
            # overlap the last confirmed word's end by more than the time rule's tolerance).
            new = words[len(done) :]
        else:
            new = [w for w in words if w.start > self.last_end - BACK_TOLERANCE_S]
            if new and done and abs(new[0].start - self.last_end) < REPEAT_WINDOW_S:
                # The hypothesis may begin by repeating the confirmed text's last words: drop them.
                for n in range(1, min(len(done), len(new), MAX_REPEAT_WORDS) + 1):
                    if all(_same(a, b) for a, b in zip(done[-n:], new[:n])):
                        new = new[n:]
                        break
        agreed = 0
        while agreed < min(len(new), len(self.tail)) and _same(new[agreed], self.tail[agreed]):
            agreed += 1
        confirmed = new[:agreed]
        self.tail = new[agreed:]
        if confirmed:
            self.confirmed_in_buffer.extend(confirmed)
            self.last_end = confirmed[-1].end
        return confirmed

    def confirm_rest(self) -> list[Word]:
        """Confirm the unconfirmed tail (the end of the stream); those words."""
        rest, self.tail = self.tail, []
        self.confirmed_in_buffer.extend(rest)
        if rest:
            self.last_end = rest[-1].end
        return rest

    def trim(self, t: float) -> None:
        """The audio before ``t`` left the buffer: forget the confirmed words that ended by then."""
        self.confirmed_in_buffer = [w for w in self.confirmed_in_buffer if w.end > t]

    def reset(self, t: float) -> None:
        """Start over at ``t`` (an endpoint): no tail, no confirmed words in the buffer."""
        self.tail, self.confirmed_in_buffer = [], []
        self.last_end = max(self.last_end, t)


class _Live:
    """The scheduler's record of one stream."""

    def __init__(self, sid: str, options, sopts: StreamOptions, live: LiveOptions, want_words: bool) -> None:
        self.id = sid
        self.want_words = want_words  # the caller asked for word times (the decode always times words)
        self.options = options
        self.sopts = sopts
        self.live = live
        self.language = options.language  # None: detected by the first decode, then kept
        self.pending: list[np.ndarray] = []  # samples pushed (at the stream's rate), not yet in the buffer
        self.pending_samples = 0
        self.resampler = None
        self.audio = np.zeros(0, np.float32)  # the buffer, at the model's rate
        self.offset = 0.0  # stream time of the buffer's first sample
        self.decoded = 0  # samples of the buffer the last decode saw
        self.samples_in = 0
        self.input_done = False
        self.closed = False
        self.agreement = LocalAgreement()
        self.confirmed: list[Word] = []  # every confirmed word, in order
        self.scrolled = 0  # confirmed words whose audio left the buffer (the prompt's source)
        self.segment_ends: list[float] = []  # the last decode's segment ends (stream time)
        self.segment = 0
        self.utterance_start = 0.0  # stream time where the segment after the last endpoint began
        self.utterance_words = 0  # confirmed words since then
        self.last_partial = ""
        self.finals: list[Segment] = []
        self.decodes = 0

    @property
    def buffer_s(self) -> float:
        return self.audio.size / self.rate

    rate = 16000  # set per core (the model's rate)


class LocalAgreementCore(StreamTable):
    """Live streams of an offline model (see the module); ``StreamingCore``'s interface.

    Args:
        engine: the ``EngineCore`` (loaded model, config, option validation).
    """

    def __init__(self, engine) -> None:
        config = engine.config
        self._refuse_encoder_chunks(
            engine,
            "streams by local agreement over an offline decode: set min_chunk_s (seconds of audio between "
            "decodes) instead",
        )
        self.engine = engine
        # The stream loop's own decode path: a second strategy over the same weights (the
        # engine's strategy belongs to the engine thread; its request table is not thread-safe).
        self.strategy = engine.build_strategy()
        self.sampling_rate = int(engine.sampling_rate)
        self.takes_prompt = self.strategy.prompt_option == "initial_prompt"
        self.max_batch = max(1, int(config.max_streams))
        self._init_table()
        self._rids = itertools.count()
        self.decodes = 0  # buffers decoded
        self.steps = 0  # batched decodes

    # -- streams ----------------------------------------------------------------------

    def open(self, options: Any, sopts: StreamOptions, stream_id: str | None = None) -> str:
        """Admit a stream (its decoding ``options`` already validated). Raises ``EngineOverloaded``."""
        resampler = self._admission_checks(sopts)
        if sopts.endpoint_vad:
            raise ValueError(
                "endpoint_vad is for encoder-streaming models; a local-agreement stream's endpoints "
                "read its confirmed words"
            )
        live = LiveOptions.of(sopts)
        want_words = bool(options.word_timestamps)
        options = options if want_words else options.replace(word_timestamps=True)  # the agreement reads words
        with self.lock:
            if len(self.streams) >= self.max_batch:
                raise EngineOverloaded(f"all {self.max_batch} live streams (max_streams) are in use")
            sid = self._new_id(stream_id)
            stream = _Live(sid, options, sopts, live, want_words)
            stream.rate = self.sampling_rate
            stream.resampler = resampler
            self.streams[sid] = stream
        return sid

    def backlog_s(self, sid: str) -> float:
        """Seconds of a stream's audio received and not yet decoded (0 for one not open)."""
        with self.lock:
            s = self.streams.get(sid)
            if s is None:
                return 0.0
            return self._queued_s(s) + (s.audio.size - s.decoded) / self.sampling_rate

    def has_work(self) -> bool:
        """Whether a step would do anything (samples to take in, a decode due, a stream to end)."""
        with self.lock:
            return any(s.pending or s.input_done or self._due(s) for s in self.streams.values())

    def _due(self, s: _Live) -> bool:
        return (s.audio.size - s.decoded) >= s.live.min_chunk_s * self.sampling_rate

    # -- the step -------------------------------------------------------------------------

    def step(self) -> list[StreamEvent]:
        """Decode every stream with a decode due, all in one batched decode; the events."""
        events: list[StreamEvent] = []
        with self.lock:
            jobs = self._gather(events)
        if not jobs:
            return events
        try:
            results = self._decode(jobs)  # unlocked: the event loop goes on queueing samples
        except Exception as e:  # noqa: BLE001 - the step's streams fail; the others and the engine go on
            with self.lock:
                for s, *_ in jobs:
                    if not s.closed:
                        self._fail(s, "engine_error", f"decoding failed: {type(e).__name__}: {e}", events)
            return events
        with self.lock:
            self.steps += 1
            for (s, audio_size, _), result in zip(jobs, results):
                self.decodes += 1
                if s.closed:
                    continue
                if isinstance(result, BaseException):
                    self._fail(s, "engine_error", f"decoding failed: {type(result).__name__}: {result}", events)
                else:
                    self._guarded(s, events, self._after_decode, s, audio_size, result, events)
        return events

    def _gather(self, events: list[StreamEvent]) -> list[tuple[_Live, int, Request]]:
        """(Under the lock) take in the queued samples, end the streams with nothing left to
        decode; the decodes due, as requests (at most ``max_streams``)."""
        jobs: list[tuple[_Live, int, Request]] = []
        for s in list(self.streams.values()):
            self._guarded(s, events, self._take_samples, s)
            if s.closed:
                continue
            final = s.input_done and s.decoded < s.audio.size
            if len(jobs) < self.max_batch and (self._due(s) or final):
                self._guarded(s, events, lambda s=s: jobs.append((s, s.audio.size, self._request(s))))
            elif s.input_done and s.decoded >= s.audio.size:
                self._guarded(s, events, self._end, s, events)
        return jobs

    def _take_samples(self, s: _Live) -> None:
        x = self._take_pending(s)
        if x.size:
            s.audio = np.concatenate([s.audio, x.astype(np.float32, copy=False)])

    def _request(self, s: _Live) -> Request:
        """The decode of ``s``'s buffer: its options with the prompt and the kept language."""
        changes: dict[str, Any] = {"language": s.language}
        if self.takes_prompt:
            prompt = self._prompt(s)
            given = s.options.initial_prompt if isinstance(s.options.initial_prompt, str) else None
            if given:
                prompt = (given.strip() + " " + prompt).strip()
            if prompt or s.options.initial_prompt is not None:
                changes["initial_prompt"] = prompt or s.options.initial_prompt
        opts = s.options.replace(**changes)
        return Request(f"{s.id}#{next(self._rids)}", s.audio.copy(), opts)

    def _prompt(self, s: _Live) -> str:
        """The last ``PROMPT_CHARS`` characters (whole words) of the confirmed text whose audio
        left the buffer (the confirmed words still inside it are transcribed again)."""
        words: list[str] = []
        length = 0
        for w in reversed(s.confirmed[: s.scrolled]):
            if length >= PROMPT_CHARS:
                break
            words.append(w.word)
            length += len(w.word.strip()) + 1
        return "".join(reversed(words)).strip()

    def _decode(self, jobs: list[tuple[_Live, int, Request]]) -> list[RequestOutput | BaseException]:
        """Every job's buffer through the private strategy in one batched decode."""
        strategy = self.strategy
        results: dict[str, RequestOutput | BaseException] = {}
        waiting: set[str] = set()
        for _, _, request in jobs:
            try:
                strategy.add_request(strategy.prepare(request))
                waiting.add(request.request_id)
            except Exception as e:  # noqa: BLE001 - this stream's decode fails alone
                results[request.request_id] = e
        try:
            while waiting:
                events = strategy.step()
                for event in events:
                    if event.request_id not in waiting:
                        continue
                    if event.kind == "finished":
                        results[event.request_id] = event.output  # type: ignore[assignment]
                        waiting.discard(event.request_id)
                    elif event.kind == "error":
                        results[event.request_id] = event.error  # type: ignore[assignment]
                        waiting.discard(event.request_id)
                if waiting and not events and not strategy.num_unfinished():
                    raise RuntimeError(f"the decode strategy dropped {sorted(waiting)}")
        finally:
            for rid in waiting:
                strategy.abort(rid)
        return [results[request.request_id] for _, _, request in jobs]

    # -- after a decode -------------------------------------------------------------------

    def _after_decode(self, s: _Live, audio_size: int, out: RequestOutput, events: list[StreamEvent]) -> None:
        s.decoded = audio_size
        s.decodes += 1
        if s.language is None and out.language:
            s.language = out.language  # detected once, kept for the stream
        words = [
            Word(round(w.start + s.offset, 3), round(w.end + s.offset, 3), w.word, w.probability)
            for seg in out.segments
            for w in seg.words or ()
        ]
        s.segment_ends = [round(seg.end + s.offset, 3) for seg in out.segments]
        self._confirm(s, s.agreement.update(words), events)
        # Samples pushed during the decode wait in ``pending`` (and a resampler's tail in it):
        # the stream ends only once they are in the buffer and decoded too.
        if s.input_done and not s.pending and s.resampler is None and s.decoded >= s.audio.size:
            self._end(s, events)
            return
        end_time = s.offset + audio_size / self.sampling_rate
        if s.sopts.endpoint and self._endpoint(s, words, end_time, events):
            return
        self._trim(s)
        if s.sopts.partials:
            text = "".join(w.word for w in s.agreement.tail).strip()
            if text != s.last_partial:
                s.last_partial = text
                start = s.agreement.tail[0].start if s.agreement.tail else end_time
                events.append(StreamEvent("partial", s.id, s.segment, text, start, round(end_time, 3)))

    def _confirm(self, s: _Live, words: list[Word], events: list[StreamEvent]) -> None:
        """Confirmed words -> one ``final`` (a segment of the result)."""
        if not words:
            return
        s.confirmed.extend(words)
        s.utterance_words += len(words)
        text = "".join(w.word for w in words)
        if not text.strip():
            return
        want_words = s.want_words
        start, end = words[0].start, words[-1].end
        seg = Segment(
            id=len(s.finals),
            seek=0,
            start=start,
            end=end,
            text=text,
            tokens=[],
            avg_logprob=float(np.mean([math.log(max(w.probability, 1e-12)) for w in words])),
            words=list(words) if want_words else None,
        )
        s.finals.append(seg)
        events.append(
            StreamEvent("final", s.id, s.segment, text.strip(), start, end, [], list(words) if want_words else None)
        )
        s.segment += 1
        s.last_partial = ""

    def _endpoint(self, s: _Live, words: list[Word], end_time: float, events: list[StreamEvent]) -> bool:
        """The endpoint rules over the latest decode; whether one fired (the buffer was cut)."""
        rules = s.sopts.endpoint_config
        has_text = s.utterance_words > 0 or bool(s.agreement.tail)
        speech_end = max([s.utterance_start, s.agreement.last_end, *(w.end for w in words)])
        trailing = end_time - speech_end
        if has_text and trailing >= rules.rule2_min_trailing_silence:
            # Silence after the last word: the segment is over, its unconfirmed tail with it.
            self._confirm(s, s.agreement.confirm_rest(), events)
            cut = speech_end
        elif has_text and end_time - s.utterance_start >= rules.rule3_min_utterance_length:
            cut = s.agreement.last_end  # the longest segment: cut after its confirmed words
            if cut <= s.utterance_start:
                return False
        elif not has_text and trailing >= rules.rule1_min_trailing_silence:
            cut = end_time - s.live.min_chunk_s  # keep the last chunk: a word may be starting in it
        else:
            return False
        events.append(StreamEvent("endpoint", s.id, s.segment, end=round(cut, 3)))
        self._cut(s, cut)
        s.agreement.reset(cut)
        s.utterance_start, s.utterance_words = cut, 0
        s.last_partial = ""
        return True

    def _trim(self, s: _Live) -> None:
        """A buffer past ``buffer_trimming_s``: cut at the last decode's segment end, but one,
        inside the confirmed text; past ``MAX_BUFFER_S``: at the last confirmed word."""
        if s.buffer_s <= s.live.buffer_trimming_s or not s.agreement.confirmed_in_buffer:
            return
        confirmed_end = s.agreement.last_end
        ends = [e for e in s.segment_ends[:-1] if s.offset < e <= confirmed_end]
        if ends:
            self._cut(s, ends[-1])
        elif s.buffer_s > MAX_BUFFER_S and confirmed_end > s.offset:
            self._cut(s, confirmed_end)

    def _cut(self, s: _Live, t: float) -> None:
        """Drop the buffer's audio before stream time ``t``."""
        n = min(s.audio.size, max(0, int((t - s.offset) * self.sampling_rate)))
        if n <= 0:
            return
        s.audio = s.audio[n:]
        s.decoded = max(0, s.decoded - n)
        s.offset += n / self.sampling_rate
        s.agreement.trim(s.offset)
        s.scrolled = sum(1 for w in s.confirmed if w.end <= s.offset)

    def _end(self, s: _Live, events: list[StreamEvent]) -> None:
        """Everything is decoded: what is still unconfirmed is confirmed (the last final), then
        ``done``; the stream leaves."""
        self._confirm(s, s.agreement.confirm_rest(), events)
        events.append(StreamEvent("done", s.id, s.segment))
        self._retire(s)

    def _retire(self, s: _Live) -> None:
        s.closed = True
        self.result_cache[s.id] = self._result(s)
        self.streams.pop(s.id, None)

    # -- results --------------------------------------------------------------------------

    def chunks_encoded_of(self, sid: str) -> int:
        """Decodes of a stream's buffer so far (0 for a stream that is not open)."""
        s = self.streams.get(sid)
        return s.decodes if s is not None else 0

    def stats(self) -> dict[str, Any]:
        return {
            "streams_active": len(self.streams),
            "streams_capacity": self.max_batch,
            "stream_chunks_encoded": self.decodes,
            "stream_steps": self.steps,
            "stream_cache_bytes": sum(s.audio.nbytes for s in self.streams.values()),
        }
