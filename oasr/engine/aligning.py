"""Word times from a CTC aligner for any family's transcripts (``EngineConfig.align_model``).

``Aligning`` drives the engines' strategy driver (the VAD splitter, or punctuation over it) as
they do and hands on its events, except that a request's ``segment`` and ``delta`` events wait for
its ``finished`` one. ``prepare`` decodes the audio once, at the aligner's sampling rate, and hands
the samples on as the request's source (decoded again only where the model's rate differs); the
samples stay with the request until it finishes (4 bytes a sample: 230 MB an hour). At the end of a
step every segment of every transcript that finished in it is aligned within its own span of the
audio, all in one batched call (``CtcAligner.align_pieces``: one Viterbi row a segment, so the work
is linear in the audio's length), and each segment's ``words`` become the aligner's: the segment's
words as the model wrote them, with the aligner's start, end and probability (``Word.word`` with
its leading space). Segment times, text and tokens stay as decoded.

A segment whose text cannot be aligned within its span (more characters than the span has frames:
a family's segment times that are too tight) keeps the family's own words, or none; the stats count
it (``segments_unaligned``). A failure of the aligner itself fails the step's finished requests.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from oasr.engine.decode.base import Request, StepEvent
from oasr.engine.outputs import RequestOutput, Word

if TYPE_CHECKING:
    from oasr.alignment.aligner import CtcAligner

_AUDIO = "aligning.audio"  # Request.metadata key of the decoded samples, from prepare to add_request


class Aligning:
    """The engines' strategy driver with forced-aligned word times (module docstring).

    Args:
        inner: the driver it wraps (``VadSplitter`` or ``Punctuating``).
        aligner: the loaded CTC aligner.
        max_audio_s: longer audio is refused while it is decoded (``EngineConfig.max_audio_s``).
    """

    def __init__(self, inner: Any, aligner: CtcAligner, max_audio_s: float | None = None) -> None:
        self.inner = inner
        self.aligner = aligner
        self.max_audio_s = max_audio_s
        self.held: dict[str, list[StepEvent]] = defaultdict(list)
        self.audio: dict[str, Any] = {}
        self.aligned = 0
        self.unaligned = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def streams_text(self) -> bool:
        return self.inner.streams_text

    @property
    def prompt_option(self) -> str | None:
        return self.inner.prompt_option

    def prepare(self, request: Request) -> Request:
        from oasr.audio import load_audio

        sr = self.aligner.sampling_rate
        audio = load_audio(request.source, sr, max_duration_s=self.max_audio_s)
        request.metadata[_AUDIO] = audio
        if getattr(self.inner, "sampling_rate", sr) == sr:
            request.source = audio
        return self.inner.prepare(request)

    def add_request(self, request: Request) -> None:
        self.inner.add_request(request)
        self.audio[request.request_id] = request.metadata.pop(_AUDIO, None)

    def abort(self, request_id: str) -> bool:
        self.held.pop(request_id, None)
        self.audio.pop(request_id, None)
        return self.inner.abort(request_id)

    def stats(self) -> dict[str, float]:
        return {**self.inner.stats(), "segments_aligned": self.aligned, "segments_unaligned": self.unaligned}

    def step(self) -> list[StepEvent]:
        """One step of the inner driver; the transcripts finished in it aligned in one batch."""
        events: list[StepEvent] = []
        finished: list[StepEvent] = []
        for event in self.inner.step():
            if event.kind in ("segment", "delta"):
                self.held[event.request_id].append(event)
            elif event.kind == "finished" and event.output is not None:
                finished.append(event)
            else:
                if event.kind == "error":
                    self.held.pop(event.request_id, None)
                    self.audio.pop(event.request_id, None)
                events.append(event)
        if not finished:
            return events
        failed: Exception | None = None
        try:
            self._align([(e.output, self.audio.get(e.request_id)) for e in finished])  # type: ignore[misc]
        except Exception as e:  # noqa: BLE001 - these requests fail; the engine goes on
            failed = e
        for event in finished:
            held = self.held.pop(event.request_id, [])
            self.audio.pop(event.request_id, None)
            if failed is not None:
                events.append(StepEvent(event.request_id, "error", error=failed))
                continue
            events += held
            events.append(event)
        return events

    def _align(self, outputs: list[tuple[RequestOutput, Any]]) -> None:
        from oasr.alignment.aligner import Piece

        sr = self.aligner.sampling_rate
        pieces, segments = [], []
        for output, audio in outputs:
            if audio is None:
                continue
            for segment in output.segments:
                if not segment.text.strip():
                    continue
                a, b = round(segment.start * sr), round(segment.end * sr)
                pieces.append(Piece(audio[a:b], segment.text, offset=a / sr))
                segments.append(segment)
        results = self.aligner.align_pieces(pieces, return_exceptions=True)
        for segment, words in zip(segments, results):
            if isinstance(words, Exception):
                self.unaligned += 1
                continue
            segment.words = [Word(w.start, w.end, " " + w.word, w.probability) for w in words]
            self.aligned += 1


__all__ = ["Aligning"]
