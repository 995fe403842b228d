"""CTC search over one utterance: greedy collapse and prefix beam search.

Both follow WeNet's ``ctc_greedy_search`` / ``ctc_prefix_beam_search`` exactly where
WeNet defines the result, so a checkpoint decodes to WeNet's tokens:

* greedy takes ``topk(1)`` per frame (torch's tie rule), collapses runs of a
  symbol and drops blanks;
* prefix beam search keeps, per prefix, the log-probability of all alignments that
  end in blank (``pb``) and in its last token (``pnb``); at each frame only the
  ``beam_size`` most likely symbols are expanded (``topk``, in its order), every
  beam prefix is expanded by each of them in beam order, and the ``beam_size``
  prefixes with the highest ``logaddexp(pb, pnb)`` (plus any fusion bonus) survive
  (a stable sort, so ties keep first-created order). Log-addition uses WeNet's
  double-precision formula, so scores agree to the last bit.

Where WeNet is silent or quirky oasr decides:

* ``skip_ids`` (a checkpoint's special ids) take part in the search as ordinary
  symbols (the search is unchanged, so WeNet's tokens are reproduced whatever is
  skipped) and are dropped from the results; n-best entries that become equal after
  dropping are merged (their CTC probabilities added) and re-ranked.
* spike frames: each token is placed at the frame of its highest posterior within
  its run of frames on the best (Viterbi) alignment of the hypothesis; greedy and
  beam search agree on this, so beam 1 == greedy in tokens, frames and score.
* prefixes of probability zero (WeNet keeps them at the end of a beam that has
  room) are dropped, so every hypothesis returned has a finite score.
* fusion (an n-gram LM, hotwords; see ``oasr.engine.decode.ctc.lm``): a bonus that
  is a function of the prefix's tokens, added to the ranking score; at the end each
  scorer's ``finalize`` bonus is added and the beam re-sorted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

NEG_INF = -math.inf


@dataclass(frozen=True)
class CtcHypothesis:
    """One decoded token sequence.

    Attributes:
        tokens: token ids (no blank, no skipped ids).
        frames: encoder frame of each token's spike (same length as ``tokens``).
        score: the ranking score: the CTC log-probability, plus LM / hotword
            bonuses when fused, or the combined score after attention rescoring.
        ctc_score: the CTC log-probability alone (``score`` when not given).
    """

    tokens: tuple[int, ...]
    frames: tuple[int, ...]
    score: float
    ctc_score: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.frames):
            raise ValueError(f"{len(self.tokens)} tokens but {len(self.frames)} frames")
        if self.ctc_score is None:
            object.__setattr__(self, "ctc_score", self.score)


class PrefixScorer(Protocol):
    """A bonus on CTC prefixes that depends only on their tokens (LM, hotwords).

    States are opaque and never mutated: ``advance`` returns a new one.
    """

    def initial(self) -> Any:
        """The state of the empty prefix."""

    def advance(self, state: Any, token: int) -> tuple[float, Any]:
        """Bonus (natural log) for appending ``token``, and the new state."""

    def finalize(self, state: Any) -> float:
        """Bonus when the prefix is a complete hypothesis."""


def log_add(a: float, b: float) -> float:
    """``log(exp(a) + exp(b))`` in double precision, by WeNet's formula (bit-compatible scores)."""
    if a == NEG_INF and b == NEG_INF:
        return NEG_INF
    m = a if a > b else b
    return m + math.log(math.exp(a - m) + math.exp(b - m))


def _cpu_float(log_probs: torch.Tensor) -> torch.Tensor:
    if log_probs.dim() != 2:
        raise ValueError(f"log_probs must be (T, V), got shape {tuple(log_probs.shape)}")
    return log_probs.detach().to(device="cpu", dtype=torch.float32)


def ctc_greedy_search(log_probs: torch.Tensor, blank_id: int, skip_ids: Iterable[int] = ()) -> CtcHypothesis:
    """Best path decoding: the most likely symbol per frame, runs collapsed, blanks dropped.

    Shapes:
        log_probs: (T, V) log-probabilities of one utterance (valid frames only).

    Args:
        blank_id: the model's blank.
        skip_ids: ids never emitted (special tokens); a run of one still separates
            repeats of its neighbours, as in the path the model chose.

    Returns:
        the hypothesis; ``score`` is the log-probability of the best path.
    """
    lp = _cpu_float(log_probs)
    if lp.shape[0] == 0:
        return CtcHypothesis((), (), 0.0)
    values, ids = lp.topk(1, dim=-1)
    return collapse_best_path(ids[:, 0].tolist(), values[:, 0].tolist(), blank_id, skip_ids)


def collapse_best_path(
    best: Sequence[int], probs: Sequence[float], blank_id: int, skip_ids: Iterable[int] = ()
) -> CtcHypothesis:
    """``ctc_greedy_search`` from each frame's best symbol and its log-probability
    (``CtcProjection.best_path``): runs collapsed, blanks and ``skip_ids`` dropped, each
    token at the frame of its run's highest probability."""
    score = 0.0
    for p in probs:  # sequential, as the beam search accumulates (sum() compensates on 3.12+)
        score += p
    skip = frozenset(int(i) for i in skip_ids)
    tokens: list[int] = []
    frames: list[int] = []
    t, n = 0, len(best)
    while t < n:
        sym, peak_t, peak_p = best[t], t, probs[t]
        t += 1
        while t < n and best[t] == sym:
            if probs[t] > peak_p:
                peak_t, peak_p = t, probs[t]
            t += 1
        if sym != blank_id and sym not in skip:
            tokens.append(sym)
            frames.append(peak_t)
    return CtcHypothesis(tuple(tokens), tuple(frames), score)


class _Prefix:
    """Scores of one prefix at one frame: total (``pb``, ``pnb``) and best-path
    (``vb``, ``vnb``, with their spike frames ``tb``, ``tnb``) probabilities of the
    alignments ending in blank / in its last token.

    Spike frames are cons lists ``(frame, rest)`` (newest first), so extending or
    moving the last spike is O(1) whatever the prefix length.
    """

    __slots__ = ("pb", "pnb", "vb", "vnb", "tb", "tnb", "peak", "bonus", "states")

    def __init__(self, bonus: float, states: tuple) -> None:
        self.pb = NEG_INF
        self.pnb = NEG_INF
        self.vb = NEG_INF
        self.vnb = NEG_INF
        self.tb: tuple | None = None
        self.tnb: tuple | None = None
        self.peak = NEG_INF  # posterior of the last token at its spike on the vnb path
        self.bonus = bonus
        self.states = states

    def ctc(self) -> float:
        return log_add(self.pb, self.pnb)

    def viterbi(self) -> tuple[float, tuple | None]:
        return (self.vb, self.tb) if self.vb > self.vnb else (self.vnb, self.tnb)


class _PrefixTrie:
    """Prefixes as nodes of a trie (node 0 is the empty prefix): an extension is a dict
    lookup on (node, token) instead of building and hashing a token tuple."""

    def __init__(self) -> None:
        self.parent = [-1]
        self.last = [-1]
        self.child: dict[tuple[int, int], int] = {}

    def extend(self, node: int, token: int) -> int:
        key = (node, token)
        child = self.child.get(key)
        if child is None:
            child = self.child[key] = len(self.parent)
            self.parent.append(node)
            self.last.append(token)
        return child

    def tokens(self, node: int) -> tuple[int, ...]:
        out = []
        while node > 0:
            out.append(self.last[node])
            node = self.parent[node]
        return tuple(reversed(out))


def _frames(cons: tuple | None) -> tuple[int, ...]:
    out = []
    while cons is not None:
        out.append(cons[0])
        cons = cons[1]
    return tuple(reversed(out))


class CtcPrefixBeam:
    """CTC prefix beam search (WeNet's algorithm) that can be resumed, optionally fused with
    an LM and hotwords: ``feed`` the log-probabilities of consecutive pieces of an utterance
    (streaming chunks), read the n-best at any point. The search is frame by frame, so the
    state after feeding pieces is the state after feeding their concatenation, and the
    n-best equals ``ctc_prefix_beam_search`` over it.

    Args:
        beam_size: prefixes kept, and symbols expanded, per frame.
        blank_id: the model's blank.
        skip_ids: ids never emitted (see the module docstring).
        lm: word-level n-gram fusion (``LmFusion``), or None.
        hotwords: a hotword ``ContextGraph``, or None.
    """

    def __init__(
        self,
        beam_size: int,
        blank_id: int,
        skip_ids: Iterable[int] = (),
        lm: PrefixScorer | None = None,
        hotwords: PrefixScorer | None = None,
    ) -> None:
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        self.beam_size = beam_size
        self.blank_id = blank_id
        self.skip = frozenset(int(i) for i in skip_ids)
        self.scorers = [s for s in (lm, hotwords) if s is not None]
        self.trie = _PrefixTrie()
        root = _Prefix(0.0, tuple(s.initial() for s in self.scorers))
        root.pb, root.vb = 0.0, 0.0
        self.beam: list[tuple[int, _Prefix]] = [(0, root)]
        self.frames = 0  # frames fed so far (spike frames count from the first)

    def _extend(self, parent: _Prefix, token: int) -> _Prefix:
        if not self.scorers or token in self.skip:
            return _Prefix(parent.bonus, parent.states)
        bonus = parent.bonus
        states = []
        for scorer, state in zip(self.scorers, parent.states):
            delta, new_state = scorer.advance(state, token)
            bonus += delta
            states.append(new_state)
        return _Prefix(bonus, tuple(states))

    def feed(self, log_probs: torch.Tensor) -> None:
        """Advance the beam over the next frames.

        Shapes:
            log_probs: (T, V) log-probabilities of the utterance's next T frames (T may be 0).
        """
        lp = _cpu_float(log_probs)
        n_frames, vocab = lp.shape
        if not n_frames:
            return
        beam_size, blank_id, trie, extend = self.beam_size, self.blank_id, self.trie, self._extend
        last = trie.last
        beam = self.beam
        values, ids = lp.topk(min(beam_size, vocab), dim=-1)
        all_ids, all_values = ids.tolist(), values.tolist()
        for i in range(n_frames):
            t = self.frames + i
            nxt: dict[int, _Prefix] = {}
            # per prefix: node, scores, its total CTC log-prob and its best path (fixed during the frame)
            current = [(node, cur, cur.ctc(), cur.viterbi()) for node, cur in beam]
            for u, p in zip(all_ids[i], all_values[i]):
                for node, cur, total, (v_best, t_best) in current:
                    if u == blank_id:
                        # prefix + blank: same prefix, now ending in blank
                        new = nxt.get(node)
                        if new is None:
                            new = nxt[node] = _Prefix(cur.bonus, cur.states)
                        new.pb = log_add(new.pb, total + p)
                        new.vb, new.tb = v_best + p, t_best
                        continue
                    if node and last[node] == u:
                        # repeated symbol without a blank between: collapses into the same prefix
                        new = nxt.get(node)
                        if new is None:
                            new = nxt[node] = _Prefix(cur.bonus, cur.states)
                        new.pnb = log_add(new.pnb, cur.pnb + p)
                        v = cur.vnb + p
                        if v > new.vnb:
                            if p > cur.peak:  # the spike moves to this frame
                                new.tnb, new.peak = (t, cur.tnb[1]), p  # type: ignore[index]
                            else:
                                new.tnb, new.peak = cur.tnb, cur.peak
                            new.vnb = v
                        # after a blank, the same symbol again is a new token
                        longer = trie.extend(node, u)
                        new = nxt.get(longer)
                        if new is None:
                            new = nxt[longer] = extend(cur, u)
                        new.pnb = log_add(new.pnb, cur.pb + p)
                        v = cur.vb + p
                        if v > new.vnb:
                            new.vnb, new.tnb, new.peak = v, (t, cur.tb), p
                        continue
                    longer = trie.extend(node, u)
                    new = nxt.get(longer)
                    if new is None:
                        new = nxt[longer] = extend(cur, u)
                    new.pnb = log_add(new.pnb, total + p)
                    if v_best + p > new.vnb:
                        new.vnb, new.tnb, new.peak = v_best + p, (t, t_best), p
            ranked_next = sorted(nxt.items(), key=lambda item: item[1].ctc() + item[1].bonus, reverse=True)
            # Prefixes of probability zero (a repeat after a frame with no blank-ending mass) sort
            # last and can never recover: dropping them changes no surviving prefix.
            beam = [item for item in ranked_next[:beam_size] if item[1].ctc() > NEG_INF] or ranked_next[:1]
        self.beam = beam
        self.frames += n_frames

    def nbest(self) -> list[CtcHypothesis]:
        """The hypotheses of the frames fed so far, best first (the beam is not changed):
        ``score`` = CTC log-probability of the prefix (all its alignments) + fusion
        bonuses (each scorer's ``finalize`` included), ``ctc_score`` = the CTC part."""
        ranked: list[CtcHypothesis] = []
        for node, cur in self.beam:
            ctc = cur.ctc()
            bonus = cur.bonus
            for scorer, state in zip(self.scorers, cur.states):
                bonus += scorer.finalize(state)
            score = ctc + bonus if self.scorers else ctc
            ranked.append(CtcHypothesis(self.trie.tokens(node), _frames(cur.viterbi()[1]), score, ctc))
        if self.scorers:
            ranked.sort(key=lambda h: h.score, reverse=True)
        return _drop_skipped(ranked, self.skip)


def ctc_prefix_beam_search(
    log_probs: torch.Tensor,
    beam_size: int,
    blank_id: int,
    skip_ids: Iterable[int] = (),
    lm: PrefixScorer | None = None,
    hotwords: PrefixScorer | None = None,
) -> list[CtcHypothesis]:
    """CTC prefix beam search (WeNet's algorithm) over one utterance, optionally fused with
    an LM and hotwords (``CtcPrefixBeam`` fed the whole utterance).

    Shapes:
        log_probs: (T, V) log-probabilities of one utterance (valid frames only).

    Args:
        beam_size, blank_id, skip_ids, lm, hotwords: as ``CtcPrefixBeam`` takes them.

    Returns:
        up to ``beam_size`` hypotheses, best first; ``score`` = CTC log-probability
        of the prefix (all its alignments) + fusion bonuses, ``ctc_score`` = the
        CTC part.
    """
    search = CtcPrefixBeam(beam_size, blank_id, skip_ids, lm=lm, hotwords=hotwords)
    search.feed(log_probs)
    return search.nbest()


def _drop_skipped(ranked: Sequence[CtcHypothesis], skip: frozenset[int]) -> list[CtcHypothesis]:
    """Hypotheses without skipped ids; entries that become equal are merged (CTC
    probabilities added to the first, which keeps its bonus) and re-ranked."""
    if not skip or not any(u in skip for h in ranked for u in h.tokens):
        return list(ranked)
    merged: dict[tuple[int, ...], list] = {}
    for h in ranked:
        keep = [i for i, u in enumerate(h.tokens) if u not in skip]
        tokens = tuple(h.tokens[i] for i in keep)
        entry = merged.get(tokens)
        if entry is None:
            bonus = h.score - h.ctc_score if h.score != h.ctc_score else 0.0
            merged[tokens] = [tuple(h.frames[i] for i in keep), bonus, h.ctc_score]
        else:
            entry[2] = log_add(entry[2], h.ctc_score)
    out = [CtcHypothesis(tokens, frames, ctc + bonus, ctc) for tokens, (frames, bonus, ctc) in merged.items()]
    out.sort(key=lambda h: h.score, reverse=True)
    return out


__all__ = [
    "CtcHypothesis",
    "CtcPrefixBeam",
    "PrefixScorer",
    "collapse_best_path",
    "ctc_greedy_search",
    "ctc_prefix_beam_search",
    "log_add",
]
