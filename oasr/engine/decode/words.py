"""Words and times for the frame-synchronous decoders (CTC, transducer, and the text joins of VAD
chunks): which token pieces start a word, grouping them, and token times from the frames they were
emitted at (CTC spikes, transducer emissions).

A piece (``tokenizer.id_to_token``) that starts with the SentencePiece marker ``▁``
(or byte-level BPE's ``Ġ``) begins a word; a piece made only of characters of a
script written without spaces (Han, kana, CJK punctuation and full-width forms) is
a word by itself; any other piece continues the current word. A tokenizer's word delimiter
(``Tokenizer.word_delimiter_id``: a character CTC vocabulary's ``|``) ends the word before it and
belongs to no word, so a word's time is its characters' alone. These rules serve word
timestamps, segment text and the word-level LM fusion alike.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from oasr.engine.outputs import Word
from oasr.languages import is_no_space_char
from oasr.tokenizers import Tokenizer

WORD_MARKERS = ("\u2581", "\u0120")  # SentencePiece "▁", byte-level BPE "Ġ"


class PieceKind(enum.Enum):
    WORD_START = "word_start"  # begins a word (after a space)
    STANDALONE = "standalone"  # a word of its own, no space before it (CJK)
    CONTINUE = "continue"  # continues the current word
    DELIMITER = "delimiter"  # ends the current word, text of no word (a character vocabulary's "|")
    SKIP = "skip"  # not text (blank, special ids)


@dataclass(frozen=True)
class PieceInfo:
    kind: PieceKind
    text: str  # the piece without its word marker


class TokenPieces:
    """Per-id piece classification of a tokenizer, cached.

    Args:
        tokenizer: the checkpoint's tokenizer.
        skip_ids: ids that are not text (blank and special ids).
    """

    def __init__(self, tokenizer: Tokenizer, skip_ids: Iterable[int] = ()) -> None:
        self.tokenizer = tokenizer
        self.skip_ids = frozenset(int(i) for i in skip_ids)
        self._cache: dict[int, PieceInfo] = {}

    def info(self, token_id: int) -> PieceInfo:
        info = self._cache.get(token_id)
        if info is None:
            info = self._cache[token_id] = self._classify(token_id)
        return info

    def _classify(self, token_id: int) -> PieceInfo:
        if token_id in self.skip_ids:
            return PieceInfo(PieceKind.SKIP, "")
        if token_id == self.tokenizer.word_delimiter_id:
            return PieceInfo(PieceKind.DELIMITER, "")
        piece = self.tokenizer.id_to_token(token_id) or ""
        if self.tokenizer.word_delimiter_id is not None:
            # a character vocabulary: no word markers, and a piece's text is as decoded (lower-cased
            # where the vocabulary says), which is what the LM fusion scores
            piece = self.tokenizer.decode([token_id])
        elif piece[:1] in WORD_MARKERS:
            return PieceInfo(PieceKind.WORD_START, piece[1:])
        if piece and all(is_no_space_char(c) for c in piece):
            return PieceInfo(PieceKind.STANDALONE, piece)
        return PieceInfo(PieceKind.CONTINUE, piece)


@dataclass(frozen=True)
class WordSpan:
    """A word as a run of a hypothesis' tokens.

    Attributes:
        start, end: token positions [start, end) in the hypothesis.
        spaced: written with a space before it (False for CJK characters).
    """

    start: int
    end: int
    spaced: bool


def group_words(tokens: Sequence[int], pieces: TokenPieces) -> list[WordSpan]:
    """Split a token sequence into words (every token but a word delimiter lands in exactly one
    word).

    A skipped id joins the word it is in, so positions stay aligned with ``tokens``.
    """
    words: list[WordSpan] = []
    start: int | None = None
    spaced = True
    for i, tok in enumerate(tokens):
        kind = pieces.info(int(tok)).kind
        if kind is PieceKind.DELIMITER:
            if start is not None:
                words.append(WordSpan(start, i, spaced))
            start = None
        elif kind is PieceKind.STANDALONE:
            if start is not None:
                words.append(WordSpan(start, i, spaced))
            words.append(WordSpan(i, i + 1, False))
            start = None
        elif kind is PieceKind.WORD_START or start is None:
            if start is not None:
                words.append(WordSpan(start, i, spaced))
            # A continuation right after a CJK word starts a word without a space.
            spaced = kind is PieceKind.WORD_START or not words or words[-1].spaced
            start = i
    if start is not None:
        words.append(WordSpan(start, len(tokens), spaced))
    return words


def timed_word(
    span: WordSpan,
    tokens: Sequence[int],
    token_spans: Sequence[tuple[float, float]],
    probs: Sequence[float],
    tokenizer: Tokenizer,
) -> Word | None:
    """One word of a hypothesis with its time (from its tokens' ``token_times`` spans, rounded to
    the millisecond) and probability (the mean of its tokens'; 1.0 when the search gives none);
    None for a word whose tokens decode to no text."""
    text = tokenizer.decode(list(tokens[span.start : span.end])).strip()
    if not text:
        return None
    p = probs[span.start : span.end]
    return Word(
        start=round(token_spans[span.start][0], 3),
        end=round(token_spans[span.end - 1][1], 3),
        word=(" " if span.spaced else "") + text,
        probability=float(np.mean(p)) if len(p) else 1.0,
    )


def text_labels(
    skip_ids: Collection[int], tokens: Sequence[int], frames: Sequence[int], probs: Sequence[float] | None = None
) -> tuple[list[int], list[int], list[float] | None]:
    """A transducer hypothesis's labels without the ids that are not text (the checkpoint's
    special ids, such as Nemotron's ``<en-US>`` language tags), each with its frame and
    probability: what the offline strategy and the streaming search both build text from."""
    keep = [j for j, tok in enumerate(tokens) if int(tok) not in skip_ids]
    return (
        [int(tokens[j]) for j in keep],
        [int(frames[j]) for j in keep],
        None if probs is None else [float(probs[j]) for j in keep],
    )


def token_times(
    frames: Sequence[int],
    frame_s: float,
    offset_s: float = 0.0,
    end_s: float | None = None,
    max_token_s: float = 1.0,
) -> list[tuple[float, float]]:
    """(start, end) seconds of each token from its spike frame.

    A token spans from the midpoint to the previous spike to the midpoint to the
    next one, but at most ``max_token_s / 2`` on either side of its own spike and
    within ``[offset_s, end_s]``.

    Args:
        frames: spike frame per token (ascending).
        frame_s: seconds per encoder frame (subsampling rate x feature frame shift).
        offset_s: time of frame 0.
        end_s: end of the audio the frames cover (None: unbounded).
        max_token_s: longest time given to one token.
    """
    half = max_token_s / 2
    peaks = [offset_s + f * frame_s for f in frames]
    spans = []
    for i, p in enumerate(peaks):
        start = max(offset_s, p - half) if i == 0 else max((peaks[i - 1] + p) / 2, p - half)
        end = p + half if i == len(peaks) - 1 else min((p + peaks[i + 1]) / 2, p + half)
        if end_s is not None:  # a spike in padding past the audio (a causal model's tail) ends with it
            start, end = min(start, end_s), min(end, end_s)
        spans.append((start, max(start, end)))
    return spans


__all__ = [
    "PieceInfo",
    "PieceKind",
    "TokenPieces",
    "WordSpan",
    "group_words",
    "is_no_space_char",
    "text_labels",
    "timed_word",
    "token_times",
]
