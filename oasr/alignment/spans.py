"""A forced-alignment path made into word times, as ``ctc-forced-aligner`` makes them.

The path's frames are merged into runs of one label (a label aligned to several frames is one
run; the blank between two equal labels separates them). Each unit of the prepared text (a word,
or a star or delimiter between words) takes the runs of its labels, in order. A word's span
then widens into the blank runs on either side: half of each (rounded as ctc-forced-aligner
rounds: the start down with ``int``, the end down with ``floor``), all of the leading blank for the
first unit and all of the trailing blank for the last; a neighbouring star or delimiter run is
not taken. A word that has no unit (punctuation alone) starts and ends where the word before it
ends, with score 0 and probability 0. Its times are ``frame_times`` of the span's first and last run's *first-frame
indices* as ctc-forced-aligner writes them (``start`` and inclusive ``end`` frame indices times
the frame duration: so a word ends at the start of its last frame, not its end); its ``score`` is
the sum of the path's log-probabilities over frames ``[start, end)`` of the span (ctc-forced-
aligner's ``score``). ``probability`` is torchaudio's tutorial's word score: each of its labels'
mean frame probability (``merge_tokens``' ``TokenSpan.score``), averaged weighted by frames; 0 for
a word aligned as a star alone (the star matches any audio: its times are where the audio between
its neighbours lies, not a recognition).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from oasr.alignment.text import PreparedText


@dataclass
class AlignedWord:
    """A word of the aligned text with its times (seconds on the audio's timeline).

    Attributes:
        start, end: seconds.
        word: the word as written in the text.
        score: the sum of the path's log-probabilities over the word's frames (ctc-forced-aligner's).
        probability: the mean probability of its labels' frames (torchaudio's tutorial's word score).
    """

    start: float
    end: float
    word: str
    score: float
    probability: float


@dataclass(frozen=True)
class _Run:
    label: int
    start: int  # first frame
    end: int  # last frame (inclusive), as ctc-forced-aligner's Segment


def _runs(path: np.ndarray) -> list[_Run]:
    """Maximal runs of one label in ``path``."""
    if len(path) == 0:
        return []
    cuts = np.flatnonzero(np.diff(path)) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [len(path)]]) - 1
    return [_Run(int(path[a]), int(a), int(b)) for a, b in zip(starts, ends)]


def word_spans(
    path: np.ndarray, scores: np.ndarray, text: PreparedText, blank_id: int, frame_times: np.ndarray
) -> list[AlignedWord]:
    """The words of ``text`` with their times, from one row's alignment.

    Args:
        path: each frame's label (``forced_align``'s row, its valid frames only).
        scores: each frame's log-probability of that label.
        text: the prepared text whose labels ``path`` aligns.
        blank_id: the blank label.
        frame_times: each frame's start time in seconds.

    Shapes:
        path, scores, frame_times: (T,)

    Raises:
        ValueError: ``path`` does not spell ``text``'s labels.
    """
    runs = _runs(path)
    labelled = [i for i, r in enumerate(runs) if r.label != blank_id]
    if [runs[i].label for i in labelled] != text.labels:
        raise ValueError("the alignment path does not spell the text's labels")
    intervals, at = [], 0  # each unit's first and last run index
    for unit in text.units:
        n = len(unit.labels)
        intervals.append((labelled[at], labelled[at + n - 1]))
        at += n
    probs = np.exp(scores.astype(np.float64))
    timed: dict[int, AlignedWord] = {}
    last = len(intervals) - 1
    for k, (unit, (a, b)) in enumerate(zip(text.units, intervals)):
        if unit.word is None:
            continue
        first, final = runs[a].start, runs[b].end
        if a > 0 and runs[a - 1].label == blank_id:
            prev = runs[a - 1]
            first = prev.start if k == 0 else int((prev.start + prev.end) / 2)
        if b + 1 < len(runs) and runs[b + 1].label == blank_id:
            nxt = runs[b + 1]
            final = nxt.end if k == last else math.floor((nxt.start + nxt.end) / 2)
        label_frames = [(r.start, r.end + 1) for r in runs[a : b + 1] if r.label != blank_id]
        n_frames = sum(e - s for s, e in label_frames)
        probability = sum(float(probs[s:e].sum()) for s, e in label_frames) / n_frames
        if unit.labels == (text.star_id,):  # nothing of it was recognised: the star matches any audio
            probability = 0.0
        timed[unit.word] = AlignedWord(
            start=float(frame_times[first]),
            end=float(frame_times[final]),
            word=text.words[unit.word],
            score=float(scores[first:final].sum()),
            probability=probability,
        )
    words: list[AlignedWord] = []
    for index, word in enumerate(text.words):  # an unaligned word (punctuation alone) where the last one ends
        at = words[-1].end if words else float(frame_times[0]) if len(frame_times) else 0.0
        words.append(timed.get(index) or AlignedWord(at, at, word, 0.0, 0.0))
    return words


__all__ = ["AlignedWord", "word_spans"]
