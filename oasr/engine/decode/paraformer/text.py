"""Words from FunASR token pieces, joined as FunASR's ``sentence_postprocess`` joins them.

A CJK character (or a digit) is a word of its own and takes no space; ``@@`` marks a
piece that continues into the next one; a finished Latin word is followed by a space
unless a CJK character comes next. ``<s>``, ``</s>``, ``<unk>`` and ``<OOV>`` are not text.
"""

from __future__ import annotations

from dataclasses import dataclass

NOT_TEXT = frozenset({"<s>", "</s>", "<unk>", "<OOV>"})
CONTINUES = "@@"


def is_cjk(piece: str) -> bool:
    """FunASR's ``isAllChinese`` for one piece: CJK ideographs, digits and '@' only."""
    core = piece.replace(" ", "")
    return bool(core) and all("\u4e00" <= ch <= "\u9fff" or "0" <= ch <= "9" or ch == "@" for ch in core)


@dataclass
class PieceWord:
    """A word built from ``pieces[start:end]``; ``cjk``: takes no space around it."""

    text: str
    start: int
    end: int
    cjk: bool


def group_pieces(pieces: list[str]) -> list[PieceWord]:
    """Words of a token-piece sequence (indices into ``pieces``)."""
    words: list[PieceWord] = []
    pending, begin = "", None
    for i, piece in enumerate(pieces):
        if piece in NOT_TEXT:
            continue
        if is_cjk(piece):
            if pending:
                words.append(PieceWord(pending, begin, i, False))
                pending, begin = "", None
            words.append(PieceWord(piece.replace(" ", ""), i, i + 1, True))
            continue
        if begin is None:
            begin = i
        if CONTINUES in piece:
            pending += piece.replace(CONTINUES, "")
            continue
        words.append(PieceWord(pending + piece, begin, i + 1, False))
        pending, begin = "", None
    if pending:
        words.append(PieceWord(pending, begin, len(pieces), False))
    return words


def join_words(words: list[PieceWord]) -> list[str]:
    """Each word's text with the space that goes before it (none before the first)."""
    out = []
    for k, w in enumerate(words):
        spaced = k > 0 and not w.cjk and not words[k - 1].cjk
        out.append((" " if spaced else "") + w.text)
    return out


__all__ = ["PieceWord", "group_pieces", "is_cjk", "join_words"]
