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

from typing import TYPE_CHECKING, Any

from oasr.engine.decode.base import Request, StepEvent
from oasr.engine.holding import HoldingDriver
from oasr.engine.outputs import RequestOutput, Word
from oasr.languages import is_no_space_char

if TYPE_CHECKING:
    from oasr.alignment.aligner import CtcAligner

_AUDIO = "aligning.audio"  # Request.metadata key of the decoded samples, from prepare to add_request


class Aligning(HoldingDriver):
    """The engines' strategy driver with forced-aligned word times (module docstring).

    Args:
        inner: the driver it wraps (``VadSplitter`` or ``Punctuating``).
        aligner: the loaded CTC aligner.
        max_audio_s: longer audio is refused while it is decoded (``EngineConfig.max_audio_s``).
    """

    def __init__(self, inner: Any, aligner: CtcAligner, max_audio_s: float | None = None) -> None:
        super().__init__(inner)
        self.aligner = aligner
        self.max_audio_s = max_audio_s
        self.audio: dict[str, Any] = {}
        self.aligned = 0
        self.unaligned = 0

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

    def forget(self, request_id: str) -> None:
        super().forget(request_id)
        self.audio.pop(request_id, None)

    def stats(self) -> dict[str, float]:
        return {**self.inner.stats(), "segments_aligned": self.aligned, "segments_unaligned": self.unaligned}

    def step(self) -> list[StepEvent]:
        """One step of the inner driver; the transcripts finished in it aligned in one batch."""
        events, finished = self.take_step()
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
            events += [StepEvent(event.request_id, "error", error=failed)] if failed is not None else [*held, event]
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
            segment.words = [
                Word(w.start, w.end, _space(words[i - 1].word if i else "", w.word) + w.word, w.probability)
                for i, w in enumerate(words)
            ]
            self.aligned += 1


def _space(before: str, word: str) -> str:
    """A word's leading space: none between two characters of a script written without spaces
    (each is a word of its own there), one otherwise."""
    return "" if before and is_no_space_char(before[-1]) and is_no_space_char(word[0]) else " "


__all__ = ["Aligning"]
