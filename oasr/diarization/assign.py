"""Speakers for a transcript: words and segments assigned to the turns of a ``Diarization``.

The rule is WhisperX's ``assign_word_speakers`` (whisperx 3.8, ``diarize.py``), applied to each
word that has a time span and to each segment:

* the span's overlap with every turn (``min(ends) - max(starts)``) is summed per speaker over
  the turns that overlap it by more than zero; the speaker with the largest sum wins (on a tie,
  the speaker whose turn comes first in start order);
* no turn overlaps it: no speaker (None), unless ``fill_nearest``, which takes the speaker of
  the turn whose midpoint is nearest the span's midpoint (the first such turn in start order).

Segments: a segment whose words got speakers takes the speaker of most of its words (the most
words; on a tie the one whose words came first), so a segment never names a speaker none of its
words has; a segment without words (a model that times no words, or ``word_timestamps`` off)
takes the rule above over its own span, as WhisperX does for every segment.

``speaker_runs`` cuts segments where the speaker changes between words, as OpenAI's
``diarized_json`` does (each of its segments has one speaker); the engine's segments are never
cut (their tokens and decode statistics belong to the whole segment).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from oasr.diarization.types import Diarization, SpeakerTurn

if TYPE_CHECKING:  # annotations only: the engine imports this module
    from oasr.engine.outputs import RequestOutput, Segment, Word


class SpeakerIndex:
    """Turns sorted by start, for overlap queries (WhisperX's ``IntervalTree``)."""

    def __init__(self, turns: Sequence[SpeakerTurn]) -> None:
        ordered = sorted(turns, key=lambda t: t.start)  # stable: equal starts keep their order
        self.starts = np.array([t.start for t in ordered], dtype=np.float64)
        self.ends = np.array([t.end for t in ordered], dtype=np.float64)
        self.speakers = [t.speaker for t in ordered]

    def speaker(self, start: float, end: float, fill_nearest: bool = False) -> str | None:
        """The speaker of ``[start, end]`` by the rule in the module's docstring."""
        if not self.speakers:
            return None
        stop = int(np.searchsorted(self.starts, end, side="left"))
        totals: dict[str, float] = {}
        for i in range(stop):
            overlap = min(self.ends[i], end) - max(self.starts[i], start)
            if overlap > 0:
                totals[self.speakers[i]] = totals.get(self.speakers[i], 0.0) + float(overlap)
        if totals:
            return max(totals.items(), key=lambda kv: kv[1])[0]  # max keeps the first of equals
        if not fill_nearest:
            return None
        mids = (self.starts + self.ends) / 2
        return self.speakers[int(np.argmin(np.abs(mids - (start + end) / 2)))]


def majority(speakers: Sequence[str | None]) -> str | None:
    """The most frequent non-None label (on a tie, the one that came first)."""
    counts: dict[str, int] = {}
    for s in speakers:
        if s is not None:
            counts[s] = counts.get(s, 0) + 1
    return max(counts.items(), key=lambda kv: kv[1])[0] if counts else None


def assign_speakers(output: RequestOutput, diarization: Diarization, *, fill_nearest: bool = False) -> RequestOutput:
    """Set ``Word.speaker`` and ``Segment.speaker`` of ``output`` from ``diarization``, in place.

    Returns:
        ``output``.
    """
    index = SpeakerIndex(diarization.turns)
    for segment in output.segments:
        assign_segment(segment, index, fill_nearest=fill_nearest)
    return output


def assign_segment(segment: Segment, index: SpeakerIndex, *, fill_nearest: bool = False) -> None:
    """One segment and its words (see the module's docstring), in place."""
    for word in segment.words or ():
        word.speaker = index.speaker(word.start, word.end, fill_nearest)
    from_words = majority([w.speaker for w in segment.words or ()])
    segment.speaker = from_words if from_words is not None else index.speaker(segment.start, segment.end, fill_nearest)


@dataclass
class SpeakerRun:
    """A stretch of one segment said by one speaker (``speaker_runs``)."""

    start: float
    end: float
    text: str
    speaker: str | None
    words: list[Word] | None


def speaker_runs(segments: Sequence[Segment]) -> list[SpeakerRun]:
    """The segments cut where the speaker changes between consecutive words (a segment without
    words, or whose words all have one speaker, is one run). Texts keep their leading spaces."""
    runs: list[SpeakerRun] = []
    for segment in segments:
        words = segment.words or []
        if not words or len({w.speaker for w in words}) == 1:
            runs.append(SpeakerRun(segment.start, segment.end, segment.text, segment.speaker, segment.words))
            continue
        group: list[Word] = [words[0]]
        groups = [group]
        for word in words[1:]:
            if word.speaker == group[-1].speaker or word.speaker is None:
                group.append(word)
            elif group[-1].speaker is None and all(w.speaker is None for w in group):
                group.append(word)  # a leading run without a speaker joins the first speaker's
            else:
                group = [word]
                groups.append(group)
        for i, group in enumerate(groups):
            speaker = majority([w.speaker for w in group])
            start = segment.start if i == 0 else group[0].start
            end = segment.end if i == len(groups) - 1 else group[-1].end
            runs.append(SpeakerRun(start, end, "".join(w.word for w in group), speaker, group))
    return runs


def letter_labels(speakers: Sequence[str | None], keep: Sequence[str] = ()) -> dict[str, str]:
    """OpenAI's names for speakers: ``A``, ``B``, ... by first appearance (then ``AA``, ``AB``,
    ...), the labels in ``keep`` (known speakers' names) left as they are."""
    names: dict[str, str] = {}
    kept = set(keep)
    for s in speakers:
        if s is None or s in names:
            continue
        if s in kept:
            names[s] = s
            continue
        n = sum(1 for v in names.values() if v not in kept)
        names[s] = _letters(n)
    return names


def _letters(n: int) -> str:
    out = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(ord("A") + r) + out
    return out


__all__ = [
    "SpeakerIndex",
    "SpeakerRun",
    "assign_segment",
    "assign_speakers",
    "letter_labels",
    "majority",
    "speaker_runs",
]
