"""NeMo's token, word and segment times: what ``transcribe(..., timestamps=True)`` puts in
``hypothesis.timestamp`` (``char`` / ``word`` / ``segment`` offsets in encoder frames, seconds =
offset x ``window_stride`` x ``subsampling_factor``), for the models that declare
``token_timing = "nemo"`` (the Parakeet families: CTC, RNN-T, TDT and the hybrid's two heads).
The CTC and transducer strategies call it in place of their own frame-synchronous timing
(``oasr.engine.decode.words.token_times``, segments cut at pauses).

Token offsets ``[start, end)`` in encoder frames, per decoder:

* CTC (greedy): from the first frame of each token's run on the best path: a token ends where
  it starts to be emitted, and starts where the token before it started (the first token one
  frame before its own run, at 0 at the earliest). That is NeMo's arithmetic (its token
  "lengths" are the distances between run starts), kept as it is so the times equal NeMo's.
  Beam search reports no runs, so its tokens are placed at their spike frames instead (NeMo's
  own CTC beam searches time tokens differently again; only greedy is held to NeMo).
* RNN-T: ``[t, t + 1]`` at the frame ``t`` the label was emitted at.
* TDT: ``[t, t + d]`` with ``d`` the duration the joint predicted for the label (0 allowed;
  the search's ``token_durations``, before the max-symbols rule forces a move).

Then, where the vocabulary holds punctuation (characters of Unicode category P in a piece that is
not a word start, a ``<...>`` / ``[...]`` control or blank), NeMo's refinements: a CTC token
whose text starts with one ends where it starts; a TDT token that is one is moved to the end of
the token before it, with no length. RNN-T tokens are left as emitted.

Words: a piece whose text differs from the piece itself (the SentencePiece ``▁`` word start)
starts a word, unless it is punctuation, which joins the word being built (or, when none is,
the word before it); a word runs from its first token's start to its last token's end, and the
first word starts at the first token's start. Its text is its pieces decoded together.

Segments: a word whose text ends with (or is) a segment separator (the archive's
``decoding.segment_seperators``, NeMo's default ``. ? !``) closes a segment; where the archive
sets ``decoding.segment_gap_threshold`` (frames), a gap of that many frames between two words
starts one instead, and separators then close a segment only when it has no words yet (NeMo's
order of tests). A segment's text is its words joined by spaces.

What oasr decides where NeMo's notion and its own differ: for these models a segment *is* NeMo's
segment (users of a NeMo model read sentence-level ``segment`` times, and subtitles cut at
sentences), so segments are no longer cut at pauses; they are still cut where oasr cuts long
audio into windows (``EngineConfig.ctc_window_s``: NeMo transcribes a file in one pass), so a
sentence that spans a window cut becomes two segments, each timed as NeMo times its part. Times
are NeMo's offsets converted as NeMo converts them, plus the window's start, rounded to the
millisecond like every oasr time, and never past the end of the window's audio: NeMo's last RNN-T
/ TDT token may end a few frames past the end of the file (its frames cover the padding), oasr ends
it with the audio, as it ends every time. ``Word.word`` carries a leading space as every oasr
word does, and ``Segment.text`` is NeMo's segment text after one space; a word or segment with no
text (a lone ``▁`` piece) still bounds its neighbours' times but is not listed, as no oasr family
lists one. The request's text is NeMo's text: each window's tokens decoded together with one space
before each punctuation mark removed (``NemoTiming.text``), windows joined by a space.

Greedy CTC, RNN-T and TDT are held to NeMo by tests/models/parakeet/test_nemo_timestamps.py.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oasr.tokenizers import Tokenizer

DEFAULT_SEGMENT_SEPARATORS = (".", "?", "!")  # NeMo's decoding.segment_seperators default
WORD_START_MARK = "\u2581"  # SentencePiece's "▁"
_BARE_SPACES = (" ", "_", WORD_START_MARK)  # pieces dropped before punctuation joins a word


def vocabulary_punctuation(tokenizer: Tokenizer) -> frozenset[str]:
    """The punctuation marks NeMo finds in a vocabulary (``supported_punctuation``): characters of
    Unicode category P in pieces that are not word starts, ``<...>`` / ``[...]`` controls,
    ``##`` continuations or blank."""
    marks: set[str] = set()
    for i in range(tokenizer.vocab_size):
        piece = tokenizer.id_to_token(i) or ""
        if not piece.strip() or piece.startswith((WORD_START_MARK, "##")):
            continue
        if (piece[0], piece[-1]) in (("<", ">"), ("[", "]")) and len(piece) > 1:
            continue
        marks.update(c for c in piece if unicodedata.category(c).startswith("P"))
    return frozenset(marks)


def ctc_offsets(run_starts: Sequence[int]) -> list[tuple[int, int]]:
    """NeMo's CTC token offsets from the first frame of each token's run on the best path."""
    out = []
    for i, s in enumerate(run_starts):
        out.append((run_starts[i - 1] if i else max(0, s - 1), s))
    return out


def transducer_offsets(frames: Sequence[int], durations: Sequence[int] | None) -> list[tuple[int, int]]:
    """NeMo's RNN-T (``durations`` None: one frame each) or TDT token offsets."""
    if durations is None:
        return [(f, f + 1) for f in frames]
    return [(f, f + d) for f, d in zip(frames, durations)]


def best_path_run_starts(best: Sequence[int], blank_id: int, skip_ids: frozenset[int] = frozenset()) -> list[int]:
    """The first frame of each token's run on a frame-wise best path (``skip_ids`` dropped, as the
    CTC collapse drops them)."""
    starts, prev = [], blank_id
    for t, sym in enumerate(best):
        if sym != prev and sym != blank_id and sym not in skip_ids:
            starts.append(t)
        prev = sym
    return starts


@dataclass(frozen=True)
class NemoWord:
    """A word: tokens ``[lo, hi)`` of the hypothesis, its text and ``[start, end]`` in frames."""

    lo: int
    hi: int
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class NemoSegment:
    """A segment: its words, its text and ``[start, end]`` in frames."""

    words: tuple[NemoWord, ...]
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class NemoTiming:
    """The timing rule of one checkpoint and decoder.

    Attributes:
        tokenizer: the checkpoint's tokenizer.
        decoder: "ctc", "rnnt" or "tdt" (which refinement applies).
        punctuation: the vocabulary's punctuation marks (``vocabulary_punctuation``).
        segment_separators: word endings that close a segment.
        segment_gap_frames: a gap between words that starts a segment (None: separators only).
    """

    tokenizer: Tokenizer
    decoder: str
    punctuation: frozenset[str]
    segment_separators: tuple[str, ...] = DEFAULT_SEGMENT_SEPARATORS
    segment_gap_frames: int | None = None

    @classmethod
    def from_params(cls, tokenizer: Tokenizer, decoder: str, params: Mapping | None) -> NemoTiming:
        """The rule for ``decoder`` with the archive's ``decoding`` settings (``params``: the
        ``DecodingSpec.params["timestamps"]`` entry; None: NeMo's defaults)."""
        params = params or {}
        separators = params.get("segment_separators")
        gap = params.get("segment_gap_threshold")
        return cls(
            tokenizer,
            decoder,
            vocabulary_punctuation(tokenizer),
            DEFAULT_SEGMENT_SEPARATORS if separators is None else tuple(str(s) for s in separators),
            None if gap is None else int(gap),
        )

    def text(self, tokens: Sequence[int]) -> str:
        """NeMo's text of a hypothesis: its tokens decoded together, one space before each
        punctuation mark removed."""
        text = self.tokenizer.decode([int(t) for t in tokens])
        if not self.punctuation:
            return text
        marks = "|".join(re.escape(p) for p in sorted(self.punctuation))
        return re.sub(rf"\s({marks})", r"\1", text)

    def refine(self, tokens: Sequence[int], offsets: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """Token offsets after NeMo's punctuation refinement for this decoder."""
        out = list(offsets)
        if not self.punctuation or self.decoder == "rnnt":
            return out
        for i in range(1, len(out)):
            text = self.tokenizer.decode([int(tokens[i])])
            if self.decoder == "ctc" and text[:1] in self.punctuation:
                out[i] = (out[i][0], out[i][0])
            elif self.decoder == "tdt" and text in self.punctuation:
                out[i] = (out[i - 1][1], out[i - 1][1])
        return out

    def words(self, tokens: Sequence[int], offsets: Sequence[tuple[int, int]]) -> list[NemoWord]:
        """NeMo's words of a hypothesis (``offsets``: refined token offsets)."""
        decode = self.tokenizer.decode
        words: list[NemoWord] = []
        built: list[int] = []  # positions of the word being built
        first = 0  # its first position

        def close(upto: int) -> None:
            ids = [int(tokens[j]) for j in built]
            words.append(NemoWord(first, upto, decode(ids), offsets[first][0], offsets[upto - 1][1]))

        texts = [decode([int(tok)]) for tok in tokens]
        for i, tok in enumerate(tokens):
            piece, text = self.tokenizer.id_to_token(int(tok)) or "", texts[i]
            punct = text in self.punctuation
            if (piece != text or (text == " " and self._next_word(texts, i) not in self.punctuation)) and not punct:
                if built:  # a word start closes the word before; a bare space is in neither
                    close(i)
                built, first = ([i], i) if text != " " else ([], first)
            elif punct and not built and words:  # closes the word before
                last = words[-1]
                merged = (last.text[:-1] if last.text.endswith(" ") else last.text) + text
                words[-1] = NemoWord(last.lo, i + 1, merged, last.start, offsets[i][1])
            elif punct and built:
                if (self.tokenizer.id_to_token(int(tokens[built[-1]])) or "") in _BARE_SPACES:
                    built.pop()
                built.append(i)
            else:
                if not built:
                    first = i
                built.append(i)
        if built:
            close(len(tokens))
        if words and offsets:
            w = words[0]
            words[0] = NemoWord(w.lo, w.hi, w.text, offsets[0][0], w.end)
        return words

    @staticmethod
    def _next_word(texts: Sequence[str], i: int) -> str | None:
        """The text of the first token after ``i`` that is not a bare space."""
        return next((t for t in texts[i + 1 :] if t and t != " "), None)

    def segments(self, words: Sequence[NemoWord]) -> list[NemoSegment]:
        """NeMo's segments of a hypothesis's words."""
        out: list[NemoSegment] = []
        current: list[NemoWord] = []

        def close() -> None:
            text = " ".join(w.text for w in current)
            out.append(NemoSegment(tuple(current), text, current[0].start, current[-1].end))

        for i, word in enumerate(words):
            if self.segment_gap_frames and current:
                if word.start - words[i - 1].end >= self.segment_gap_frames:
                    close()
                    current = [word]
                    continue
            elif word.text and (word.text[-1] in self.segment_separators or word.text in self.segment_separators):
                current.append(word)
                close()
                current = []
                continue
            current.append(word)
        if current:
            close()
        return out


__all__ = [
    "DEFAULT_SEGMENT_SEPARATORS",
    "NemoSegment",
    "NemoTiming",
    "NemoWord",
    "best_path_run_starts",
    "ctc_offsets",
    "transducer_offsets",
    "vocabulary_punctuation",
]
