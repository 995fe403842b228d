"""Fusion for CTC prefix beam search: word-level n-gram LM (KenLM) and hotwords.

Both are ``PrefixScorer``s (``oasr.engine.decode.ctc.search``): a bonus that is a
function of a prefix's tokens, added to its CTC log-probability when the beam is
ranked.

* ``LmFusion`` is shallow fusion at word boundaries: when a prefix completes a word
  (the next token starts a new one, see ``oasr.engine.decode.words``, or the
  hypothesis ends) it gains ``alpha * ln P_lm(word | previous words) + beta``; a
  finished hypothesis also gains ``alpha * ln P_lm(</s> | ...)``. Words are the
  pieces' text joined (markers removed), passed to the LM as they are (no case
  folding). KenLM reads ARPA and its binary format; it is the optional ``kenlm``
  package (oasr's ``lm`` extra).
* ``ContextGraph`` is hotword boosting on an Aho-Corasick automaton over the
  phrases' token ids: each token that extends a (partial) match gains ``weight``;
  a match that breaks gives its partial bonus back; completing a phrase adds the
  phrase's bonus once more, which it keeps. At the end of a hypothesis a partial
  match is given back as well, so, net, a hypothesis gains
  ``weight x tokens`` for each complete phrase it contains and nothing else, and
  the beam is re-sorted on these final scores. (WeNet's Python search instead
  overwrites the bonus with the give-back at the end and does not re-sort; its
  graph is the same automaton, so the search itself ranks prefixes identically,
  skipped ids aside: oasr keeps them out of the graph.)
"""

from __future__ import annotations

import math
import os
import re
from collections import deque
from collections.abc import Iterable, Sequence

from oasr.engine.decode.words import PieceKind, TokenPieces
from oasr.install import install_hint
from oasr.tokenizers import Tokenizer

LN10 = math.log(10.0)


class NgramLanguageModel:
    """A KenLM n-gram model (ARPA text or KenLM binary).

    Raises:
        ImportError: the ``kenlm`` package is not installed (the ``lm`` extra).
        FileNotFoundError: no file at ``path``.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        try:
            import kenlm
        except ImportError as e:
            raise ImportError(f"n-gram LM fusion needs the `kenlm` package: {install_hint('lm', ['kenlm'])}") from e
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no language model at {os.fspath(path)!r}")
        self._kenlm = kenlm
        self.path = os.fspath(path)
        self.model = kenlm.Model(self.path)
        self.order = int(self.model.order)

    def begin(self):
        """The state after ``<s>``."""
        state = self._kenlm.State()
        self.model.BeginSentenceWrite(state)
        return state

    def score(self, state, word: str):
        """``(log10 P(word | state), next state)``; words the LM lacks score as ``<unk>``."""
        out = self._kenlm.State()
        return self.model.BaseScore(state, word, out), out

    def __contains__(self, word: str) -> bool:
        return word in self.model


class LmFusion:
    """Word-level shallow fusion of an n-gram LM into CTC prefix beam search.

    State: ``(lm_state, pending)`` — the LM state after the prefix's completed words
    and the text of the word in progress ("" for none).

    Args:
        lm: the n-gram model.
        pieces: the checkpoint's piece classification (word boundaries, text).
        alpha: LM weight (on natural-log probabilities).
        beta: bonus per completed word (counters the LM's preference for short output).
    """

    def __init__(self, lm: NgramLanguageModel, pieces: TokenPieces, alpha: float = 0.5, beta: float = 1.0) -> None:
        self.lm = lm
        self.pieces = pieces
        self.alpha = float(alpha)
        self.beta = float(beta)

    def initial(self):
        return (self.lm.begin(), "")

    def _word(self, lm_state, word: str):
        log10p, new_state = self.lm.score(lm_state, word)
        return self.alpha * log10p * LN10 + self.beta, new_state

    def advance(self, state, token: int):
        lm_state, pending = state
        info = self.pieces.info(token)
        if info.kind is PieceKind.SKIP:
            return 0.0, state
        if info.kind is PieceKind.CONTINUE:
            return 0.0, (lm_state, pending + info.text)
        bonus = 0.0
        if pending:
            bonus, lm_state = self._word(lm_state, pending)
        if info.kind in (PieceKind.WORD_START, PieceKind.DELIMITER):
            return bonus, (lm_state, info.text)
        extra, lm_state = self._word(lm_state, info.text)  # STANDALONE: a whole word
        return bonus + extra, (lm_state, "")

    def finalize(self, state) -> float:
        lm_state, pending = state
        bonus = 0.0
        if pending:
            bonus, lm_state = self._word(lm_state, pending)
        log10p, _ = self.lm.score(lm_state, "</s>")
        return bonus + self.alpha * log10p * LN10


class ContextGraph:
    """Hotword boosting: an Aho-Corasick automaton over token-id phrases.

    State: a node id (0 is the root).

    Args:
        phrases: token ids of each phrase (empty ones are ignored).
        weight: bonus per matched token (natural log).
    """

    def __init__(self, phrases: Iterable[Sequence[int]], weight: float) -> None:
        if weight < 0:
            raise ValueError(f"hotword weight must be >= 0, got {weight}")
        self.weight = float(weight)
        self.children: list[dict[int, int]] = [{}]
        self.node_score: list[float] = [0.0]  # bonus accumulated from the root to the node
        self.out_score: list[float] = [0.0]  # bonus of the phrases that end here (self or by suffix)
        self.is_end: list[bool] = [False]
        self.fail: list[int] = [0]
        self.phrases: list[tuple[int, ...]] = []
        for phrase in phrases:
            ids = tuple(int(t) for t in phrase)
            if not ids:
                continue
            self.phrases.append(ids)
            node = 0
            for tok in ids:
                child = self.children[node].get(tok)
                if child is None:
                    child = len(self.children)
                    self.children[node][tok] = child
                    self.children.append({})
                    self.node_score.append(self.node_score[node] + self.weight)
                    self.out_score.append(0.0)
                    self.is_end.append(False)
                    self.fail.append(0)
                node = child
            self.is_end[node] = True
        self._link()

    def _link(self) -> None:
        """Fail arcs (longest proper suffix that is a trie path) and output bonuses, breadth first."""
        queue = deque(self.children[0].values())
        for node in queue:
            self.out_score[node] = self.node_score[node] if self.is_end[node] else 0.0
        while queue:
            node = queue.popleft()
            for tok, child in self.children[node].items():
                f = self.fail[node]
                while f and tok not in self.children[f]:
                    f = self.fail[f]
                self.fail[child] = self.children[f].get(tok, 0)
                own = self.node_score[child] if self.is_end[child] else 0.0
                self.out_score[child] = own + self.out_score[self.fail[child]]
                queue.append(child)

    @property
    def num_nodes(self) -> int:
        return len(self.children)

    def initial(self) -> int:
        return 0

    def advance(self, state: int, token: int) -> tuple[float, int]:
        node = state
        while node and token not in self.children[node]:
            node = self.fail[node]
        nxt = self.children[node].get(token, 0)
        return self.node_score[nxt] - self.node_score[state] + self.out_score[nxt], nxt

    def finalize(self, state: int) -> float:
        return -self.node_score[state]

    @classmethod
    def from_text(cls, hotwords: str | Sequence[str], tokenizer: Tokenizer, weight: float) -> ContextGraph:
        """Build from phrases (see ``parse_hotwords``) tokenized by the checkpoint's tokenizer.

        Raises:
            ValueError: no phrase, or one the tokenizer turns into no tokens.
        """
        phrases = parse_hotwords(hotwords)
        if not phrases:
            raise ValueError("hotwords: no phrase given")
        ids = []
        for phrase in phrases:
            toks = tokenizer.encode_text(phrase)
            if not toks:
                raise ValueError(f"hotwords: {phrase!r} has no tokens in this model's vocabulary")
            ids.append(toks)
        return cls(ids, weight)


def parse_hotwords(hotwords: str | Sequence[str]) -> list[str]:
    """Phrases from a string (separated by commas, semicolons or newlines) or a list of strings."""
    items = [hotwords] if isinstance(hotwords, str) else list(hotwords)
    phrases = []
    for item in items:
        phrases.extend(p.strip() for p in re.split(r"[,;\n]", str(item)))
    return [p for p in phrases if p]


__all__ = ["ContextGraph", "LmFusion", "NgramLanguageModel", "parse_hotwords"]
