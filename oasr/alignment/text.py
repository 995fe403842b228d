"""A transcript made into the aligner's labels, its original words kept for the output.

The text is split at whitespace into words, and each character of a script written without
spaces (Chinese, Japanese: ``oasr.languages.is_no_space_char``) is a word of its own, as Whisper and
oasr's CTC decoding time such scripts; each word is normalised as ``ctc-forced-aligner``
does before it aligns (Unicode NFKC, lower case, punctuation and symbols dropped: Unicode
categories P* and S*, except characters the vocabulary itself has, such as the apostrophe), then
each character is looked up in the vocabulary (as written, or upper-cased for an upper-case
vocabulary like wav2vec2-base-960h's).

A word with characters the vocabulary lacks is romanised first (``romanize=True``): with
``uroman`` (the ``align`` extra), as ctc-forced-aligner and torchaudio's MMS tutorial do
(``Uroman().romanize_string``), else by Unicode decomposition with the combining marks dropped
(``é`` -> ``e``; no other script is transliterated then). Characters still missing are dropped;
a word left with none (digits, another script without ``uroman``) becomes one star token
``<star>``, a label added to the posteriors with log-probability 0 on every frame (torchaudio's
MMS tutorial's ``*``): it takes the word's audio, whatever it sounds like, so the words around it
stay in place. ``star="segment"`` puts a star before every word, as ctc-forced-aligner does by
default (``star_frequency="segment"``), ``"edges"`` one at each end of the text; with
``delimiter_id`` a vocabulary's word delimiter (``|``) goes between words (where no star does), as
torchaudio's wav2vec2 tutorial writes its transcript. A word of punctuation alone (``—``) is not
aligned: it is given the time where the word before it ends (``spans.word_spans``).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field

from oasr.languages import is_no_space_char

STAR = "<star>"
STAR_MODES = ("none", "segment", "edges")


@dataclass(frozen=True)
class Unit:
    """A run of labels aligned as one piece: a word of the text (``word`` its index in
    ``PreparedText.words``) or a filler between words (a star or the delimiter: ``word`` None)."""

    labels: tuple[int, ...]
    word: int | None = None


@dataclass
class PreparedText:
    """What ``prepare_text`` makes of a transcript.

    Attributes:
        words: the text's words as written (what the output shows).
        units: the label runs to align, in order (every word once, with fillers between).
        star_id: the star's label id (the posteriors' width: its column is added), or None when
            no unit uses it.
    """

    words: list[str]
    units: list[Unit] = field(default_factory=list)
    star_id: int | None = None

    @property
    def labels(self) -> list[int]:
        return [label for unit in self.units for label in unit.labels]


@functools.lru_cache(maxsize=1)
def _uroman():
    """uroman's romaniser (its tables load once, ~2 s), or None when it is not installed."""
    try:
        import uroman
    except ImportError:
        return None
    return uroman.Uroman()


def romanize(word: str) -> str:
    """``word`` in Latin letters: uroman's romanisation where uroman is installed, else the word
    decomposed (NFKD) with its combining marks dropped."""
    ur = _uroman()
    if ur is not None:
        return str(ur.romanize_string(word))
    return "".join(c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c))


def _normalize(word: str, vocab: Mapping[str, int]) -> str:
    """NFKC, lower case, punctuation and symbols dropped unless the vocabulary has them."""
    word = unicodedata.normalize("NFKC", word).lower()
    return "".join(c for c in word if c in vocab or c.upper() in vocab or unicodedata.category(c)[0] not in "PS")


def _labels(chars: str, vocab: Mapping[str, int], skip: frozenset[int]) -> tuple[list[int], bool]:
    """The labels of the characters the vocabulary has, and whether it lacked any."""
    out, missing = [], False
    for c in chars:
        i = vocab.get(c, vocab.get(c.upper()))
        if i is None or i in skip:
            missing = missing or not c.isspace()
            continue
        out.append(i)
    return out, missing


def split_words(text: str) -> list[str]:
    """``text``'s words: whitespace-separated pieces, each character of a script written
    without spaces a word of its own (``"我们 go"`` -> ``["我", "们", "go"]``)."""
    words: list[str] = []
    for piece in text.split():
        run = ""
        for ch in piece:
            if is_no_space_char(ch):
                if run:
                    words.append(run)
                words.append(ch)
                run = ""
            else:
                run += ch
        if run:
            words.append(run)
    return words


def prepare_text(
    text: str,
    vocab: Mapping[str, int],
    *,
    blank_id: int,
    star_id: int,
    delimiter_id: int | None = None,
    special_ids: frozenset[int] = frozenset(),
    romanize_missing: bool = True,
    star: str = "none",
) -> PreparedText:
    """Split ``text`` into words and make each the aligner's labels (module docstring).

    Args:
        text: the transcript, as written.
        vocab: the aligner's token -> id table (single characters are what words are spelt with).
        blank_id: the CTC blank (never a label).
        star_id: the star's label: the posteriors' width, where the aligner adds its column.
        delimiter_id: the word delimiter to put between words, or None for none.
        special_ids: ids no word is spelt with (``<unk>``, ``<s>``, ...).
        romanize_missing: romanise a word with characters the vocabulary lacks.
        star: "none" (stars only for words with no label), "segment" (before every word) or "edges".

    Raises:
        ValueError: an unknown ``star`` mode.
    """
    if star not in STAR_MODES:
        raise ValueError(f"star={star!r}: expected one of {STAR_MODES}")
    skip = frozenset(special_ids) | {blank_id} | ({delimiter_id} if delimiter_id is not None else set())
    words = split_words(text)
    units: list[Unit] = []
    used_star = star != "none" and bool(words)
    for index, word in enumerate(words):
        norm = _normalize(word, vocab)
        if not norm:  # punctuation alone: no unit; it takes the time where the word before it ends
            continue
        labels, missing = _labels(norm, vocab, skip)
        if missing and romanize_missing:
            labels, _ = _labels(_normalize(romanize(norm), vocab), vocab, skip)
        if star == "segment" or (star == "edges" and not units):
            units.append(Unit((star_id,)))
        elif units and delimiter_id is not None:
            units.append(Unit((delimiter_id,)))
        if not labels:
            labels, used_star = [star_id], True
        units.append(Unit(tuple(labels), index))
    if star == "edges" and words:
        units.append(Unit((star_id,)))
    return PreparedText(words, units, star_id if used_star else None)


__all__ = ["STAR", "STAR_MODES", "PreparedText", "Unit", "prepare_text", "romanize"]
