"""Punctuation restoration over finished transcripts (``EngineConfig.punc_model``).

``Punctuating`` drives the ``VadSplitter`` as the engines do and hands on its events, except
that a request's ``segment`` and ``delta`` events wait for its ``finished`` one: the
CT-Transformer reads the whole transcript (a mini-sentence's last words are punctuated with the
next one's), so no piece of it is final before the end. At the end of a step every transcript
that finished in it is punctuated in one batched call (``Punctuator.punctuate``: their
mini-sentences share each forward), then its segments, its text as one delta (for a strategy
that streams text) and the output go out, in that order.

Live streams (``engine/streaming/core.py::StreamingCore``, a streaming encoder's): each
``final`` is punctuated alone as it goes out (``punctuate_finals``; an endpoint's segment is an
utterance), partials stay as decoded. An offline model's live stream (local agreement) is not
punctuated: its finals are confirmed runs of words, not utterances.

Which transcripts: those without a mark the punctuation model writes (full-width or ASCII
comma, period, question mark, enumeration comma): the output of Paraformer, WeNet, a lowercase
CTC model, SenseVoice without ITN. A transcript that has one (Whisper, Canary, a punctuating
Parakeet, SenseVoice with ITN) is left as it is, unless ``EngineConfig.punc_always``.

What changes (``punctuate_output``): ``RequestOutput.text`` becomes funasr's punctuated text
(with the leading whitespace of the original: funasr puts a space before an ASCII first word);
each segment's text becomes its characters' share of it, with the marks written after its last
character (``split_like``; the segments' characters must be the text's in order, else they are
left as they were); each ``Word``'s text takes its share of its segment's the same way (marks
and capitals; it keeps its leading space). Token ids and times do not change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oasr.engine.decode.base import StepEvent
from oasr.engine.holding import HoldingDriver
from oasr.engine.outputs import RequestOutput, Segment, Word

if TYPE_CHECKING:
    from oasr.engine.chunking import VadSplitter
    from oasr.postprocess.punctuation import PunctuatedText, Punctuator


def _lead(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


def split_like(punctuated: str, parts: list[str]) -> list[str] | None:
    """``punctuated`` (the punctuation of the characters of ``parts`` in order) cut where the
    parts meet: each part's characters (re-cased as written) with the marks after its last one;
    the spaces between parts are dropped. None when its characters are not the parts'.

    Example:
        ``split_like(" Hello world, how.", [" hello world", " how"]) == ["Hello world,", "how."]``
    """
    chars = [c for part in parts for c in part if not c.isspace()]
    at: list[int] = []  # where each of chars is in punctuated; the rest of it is inserted
    for i, c in enumerate(punctuated):
        if len(at) < len(chars) and c.lower() == chars[len(at)].lower():
            at.append(i)
    if len(at) < len(chars):
        return None
    out, start, seen = [], 0, 0
    for part in parts:
        n = sum(not c.isspace() for c in part)
        if n == 0:
            out.append("")
            continue
        seen += n
        end, stop = at[seen - 1] + 1, at[seen] if seen < len(at) else len(punctuated)
        while end < stop and not punctuated[end].isspace():  # the marks after its last character
            end += 1
        out.append(punctuated[start:end].strip())
        start = end
    return out


def _rewrite(items: list, get, put, punctuated: str) -> bool:
    """Give each item its share of ``punctuated`` (keeping its own leading whitespace)."""
    shares = split_like(punctuated, [get(item) for item in items])
    if shares is None:
        return False
    for item, share in zip(items, shares):
        put(item, _lead(get(item)) + share)
    return True


def punctuate_output(output: RequestOutput, result: PunctuatedText) -> None:
    """Write ``result`` (the punctuation of ``output.text``) into the output, in place."""
    output.text = _lead(output.text) + result.text.lstrip()

    def set_text(segment: Segment, text: str) -> None:
        segment.text = text

    if not _rewrite(output.segments, lambda s: s.text, set_text, output.text):
        return
    for segment in output.segments:
        if segment.words:
            _rewrite(segment.words, lambda w: w.word, _set_word, segment.text)


def _set_word(word: Word, text: str) -> None:
    word.word = text


def wanted(punctuator: Punctuator, always: bool, text: str) -> bool:
    """Whether ``text`` is punctuated: it has words, and no mark of the model's unless ``always``."""
    return bool(text.strip()) and (always or not punctuator.has_punctuation(text))


def punctuate_finals(punctuator: Punctuator, always: bool, events: list) -> set[str]:
    """Punctuate a live stream step's ``final`` events (``StreamEvent``) in place, each alone
    (an endpoint's segment is an utterance; partials stay as decoded), in one batched call.

    Returns:
        the ids of the streams whose punctuation failed: their final became an ``engine_error``
        event and their later events of the step were dropped (the caller retires them).
    """
    finals = [e for e in events if e.type == "final" and wanted(punctuator, always, e.text)]
    if not finals:
        return set()
    try:
        results = punctuator.punctuate([e.text for e in finals])
    except Exception as error:  # noqa: BLE001 - these streams fail; the others and the engine go on
        failed = {e.stream_id for e in finals}
        kept, ended = [], set()
        for event in events:
            if event.stream_id in ended:
                continue
            if event.type == "final" and event.stream_id in failed:
                event.type, event.code = "error", "engine_error"
                event.message = f"punctuation failed: {type(error).__name__}: {error}"
                ended.add(event.stream_id)
            kept.append(event)
        events[:] = kept
        return failed
    for event, result in zip(finals, results):
        event.text = result.text.strip()
        if event.words:
            _rewrite(event.words, lambda w: w.word, _set_word, event.text)
    return set()


class Punctuating(HoldingDriver):
    """The engines' strategy driver with punctuation: ``VadSplitter``'s calls, its events held
    per request until the request finishes, its transcripts punctuated as they finish.

    Args:
        inner: the splitter it drives.
        punctuator: the loaded punctuation model.
        always: punctuate transcripts that already have punctuation too.
    """

    def __init__(self, inner: VadSplitter, punctuator: Punctuator, always: bool = False) -> None:
        super().__init__(inner)
        self.punctuator = punctuator
        self.always = always
        self.punctuated = 0

    def stats(self) -> dict[str, float]:
        return {**self.inner.stats(), "transcripts_punctuated": self.punctuated}

    def step(self) -> list[StepEvent]:
        """One step of the splitter; the transcripts finished in it punctuated in one batch."""
        events, finished = self.take_step()
        if not finished:
            return events
        todo = [e for e in finished if wanted(self.punctuator, self.always, e.output.text)]  # type: ignore[union-attr]
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


__all__ = ["Punctuating", "punctuate_finals", "punctuate_output", "split_like", "wanted"]
