"""Punctuation restoration over finished transcripts (``EngineConfig.punc_model``).

``Punctuating`` drives the ``VadSplitter`` as the engines do and hands on its events, except
that a request's ``segment`` and ``delta`` events wait for its ``finished`` one: the
CT-Transformer reads the whole transcript (a mini-sentence's last words are punctuated with the
next one's), so no piece of it is final before the end. At the end of a step every transcript
that finished in it is punctuated in one batched call (``Punctuator.punctuate``: their
mini-sentences share each forward), then its segments, its text as one delta (for a strategy
that streams text) and the output go out, in that order.

Which transcripts: those without a mark the punctuation model writes (full-width or ASCII
comma, period, question mark, enumeration comma): the output of Paraformer, WeNet, a lowercase
CTC model, SenseVoice without ITN. A transcript that has one (Whisper, Canary, a punctuating
Parakeet, SenseVoice with ITN) is left as it is, unless ``EngineConfig.punc_always``.

What changes (``punctuate_output``): ``RequestOutput.text`` becomes funasr's punctuated text
(with the leading whitespace of the original: funasr puts a space before an ASCII first word);
each segment's text becomes its words' share of it (the words of the text are the segments'
words in order, else the segments are left as they were); each ``Word``'s text takes its own
share the same way (marks and capitals; the word keeps its leading space). Token ids and times
do not change.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from oasr.engine.decode.base import Request, StepEvent
from oasr.engine.outputs import RequestOutput, Segment

if TYPE_CHECKING:
    from oasr.engine.chunking import VadSplitter
    from oasr.postprocess.punctuation import PunctuatedText, Punctuator


def _lead(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


def _share(original: str, pieces: list[str]) -> str:
    """``original`` rewritten as its punctuated pieces, keeping its leading whitespace."""
    return _lead(original) + "".join(pieces).lstrip()


def _take(texts: list[str], pieces: list[str], words: list[str]) -> list[list[str]] | None:
    """Each text's run of ``pieces``, when the texts' words are ``words`` in order; else None."""
    from oasr.postprocess.punctuation import split_words

    out, at = [], 0
    for text in texts:
        own = split_words(text)
        if words[at : at + len(own)] != own:
            return None
        out.append(pieces[at : at + len(own)])
        at += len(own)
    return out if at == len(words) else None


def _punctuate_segment(segment: Segment, pieces: list[str], words: list[str]) -> None:
    if segment.words:
        shares = _take([w.word for w in segment.words], pieces, words)
        if shares is not None:
            for word, share in zip(segment.words, shares):
                word.word = _share(word.word, share)
    segment.text = _share(segment.text, pieces)


def punctuate_output(output: RequestOutput, result: PunctuatedText) -> None:
    """Write ``result`` (the punctuation of ``output.text``) into the output, in place."""
    output.text = _share(output.text, result.pieces)
    shares = _take([s.text for s in output.segments], result.pieces, result.words)
    if shares is None:
        return
    at = 0
    for segment, pieces in zip(output.segments, shares):
        _punctuate_segment(segment, pieces, result.words[at : at + len(pieces)])
        at += len(pieces)


class Punctuating:
    """The engines' strategy driver with punctuation: ``VadSplitter``'s calls, its events held
    per request until the request finishes, its transcripts punctuated as they finish.

    Args:
        inner: the splitter it drives.
        punctuator: the loaded punctuation model.
        always: punctuate transcripts that already have punctuation too.
    """

    def __init__(self, inner: VadSplitter, punctuator: Punctuator, always: bool = False) -> None:
        self.inner = inner
        self.punctuator = punctuator
        self.always = always
        self.held: dict[str, list[StepEvent]] = defaultdict(list)
        self.punctuated = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def streams_text(self) -> bool:
        return self.inner.streams_text

    @property
    def prompt_option(self) -> str | None:
        return self.inner.prompt_option

    def add_request(self, request: Request) -> None:
        self.inner.add_request(request)

    def abort(self, request_id: str) -> bool:
        self.held.pop(request_id, None)
        return self.inner.abort(request_id)

    def stats(self) -> dict[str, float]:
        return {**self.inner.stats(), "transcripts_punctuated": self.punctuated}

    def wanted(self, text: str) -> bool:
        return bool(text.strip()) and (self.always or not self.punctuator.has_punctuation(text))

    def step(self) -> list[StepEvent]:
        """One step of the splitter; the transcripts finished in it punctuated in one batch."""
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
                events.append(event)
        if not finished:
            return events
        todo = [e for e in finished if self.wanted(e.output.text)]  # type: ignore[union-attr]
        failed: Exception | None = None
        try:
            results = self.punctuator.punctuate([e.output.text for e in todo])  # type: ignore[union-attr]
        except Exception as e:  # noqa: BLE001 - these requests fail; the engine goes on
            failed, results = e, []
        done = {id(e) for e in todo}
        for event, result in zip(todo, results):
            punctuate_output(event.output, result)  # type: ignore[arg-type]
            self.punctuated += 1
        for event in finished:
            held = self.held.pop(event.request_id, [])
            if failed is not None and id(event) in done:
                events.append(StepEvent(event.request_id, "error", error=failed))
                continue
            events += [e for e in held if e.kind == "segment"]
            deltas = [e for e in held if e.kind == "delta"]
            if deltas and id(event) in done:
                deltas = [StepEvent(event.request_id, "delta", delta=event.output.text)]  # type: ignore[union-attr]
            events += deltas
            events.append(event)
        return events


__all__ = ["Punctuating", "punctuate_output"]
