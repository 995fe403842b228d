"""Phrase boosting with the semantics of NeMo's boosting tree (GPU-PB: ``GPUBoostingTreeModel``
of ``nemo/collections/asr/parts/context_biasing/boosting_graph_batched.py``), model-neutral: a
fusion model over token ids that any search adding ``alpha x score`` to its candidates can use
(the CTC ``beam_batch`` / ``greedy_batch`` searches of ``oasr.engine.decode.ctc.batched_beam``;
the transducer searches may take it the same way).

The tree is built from the phrases' token ids as NeMo builds it:

* a trie of the phrases; the arc into the i-th token (0-based) of a phrase weighs
  ``context_score`` for the first token and ``context_score x depth_scaling + ln(i + 1)`` for
  the others (``uniform_weights``: ``context_score`` for every token). A phrase may carry its own
  score instead of ``context_score``: ``round(score_per_phrase / len(phrase text), 2)`` when
  ``score_per_phrase`` is not 0. An arc that phrases share keeps the larger weight (compared
  with the plain score of the phrase inserted later), and its node the score through it;
* every node falls back (Aho-Corasick fail arc) to the longest proper suffix of its path that is
  a trie path, and the fall back costs ``fail's score - node's score`` (the bonus collected
  so far is given back), except from a node that ends a phrase (a complete match keeps its
  bonus); from the root, a token that starts no phrase loops back with ``unk_score``;
* advancing a state by a token follows fall backs until a node has an arc for it: the score is
  the fall backs' costs plus that arc's weight (in float32, in this order, as NeMo's sums);
* a node that ends a phrase has the final weight ``final_eos_score`` (NeMo adds it at an
  end-of-sequence token of AED models; CTC and transducer searches do not use it).

States are node ids (0: the root); ``advance`` answers for the whole vocabulary at once, for a
batch of states, on the tensors' device. The vocabulary excludes the blank (NeMo's
``tokenizer.vocab_size``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

ROOT = 0


@dataclass(frozen=True)
class BoostingConfig:
    """The shape of a boosting tree: NeMo's ``BoostingTreeModelConfig`` knobs, with its defaults.

    Attributes:
        context_score: weight of a phrase's first token (and the base of the later ones).
        depth_scaling: factor of ``context_score`` for the tokens after the first.
        unk_score: weight of a token that starts no phrase (from the root).
        final_eos_score: final weight of a node that ends a phrase.
        score_per_phrase: when not 0, a phrase's own score is this over its length in characters
            (rounded to 2 decimals), in place of ``context_score``.
        uniform_weights: every token weighs ``context_score`` (icefall's tree), and the arc that
            completes a phrase of two or more tokens adds the phrase's score once more.
    """

    context_score: float = 1.0
    depth_scaling: float = 2.0
    unk_score: float = 0.0
    final_eos_score: float = 1.0
    score_per_phrase: float = 0.0
    uniform_weights: bool = False

    def __post_init__(self) -> None:
        for name in ("context_score", "depth_scaling", "unk_score", "final_eos_score", "score_per_phrase"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"boosting {name} must be a finite number, got {value!r}")


class _Node:
    __slots__ = ("token_score", "node_score", "is_end", "depth", "next", "fail")

    def __init__(self, token_score: float, node_score: float, is_end: bool, depth: int) -> None:
        self.token_score = token_score
        self.node_score = node_score
        self.is_end = is_end
        self.depth = depth
        self.next: dict[int, _Node] = {}
        self.fail: _Node | None = None


def _trie(phrases: Sequence[Sequence[int]], scores: Sequence[float], config: BoostingConfig) -> _Node:
    """The weighted trie with fail arcs (see the module docstring), float64 scores as NeMo's."""
    root = _Node(0.0, 0.0, False, 0)
    root.fail = root
    for tokens, own in zip(phrases, scores):
        base = config.context_score if own == 0.0 else own
        node = root
        for i, token in enumerate(tokens):
            last = i == len(tokens) - 1
            child = node.next.get(token)
            if child is None:
                scaled = i > 0 and not config.uniform_weights
                weight = base * config.depth_scaling + float(np.log(i + 1)) if scaled else base
                child = node.next[token] = _Node(weight, node.node_score + weight, last, i + 1)
            else:
                child.token_score = max(base, child.token_score)
                child.node_score = node.node_score + child.token_score
                child.is_end = child.is_end or last
            node = child
    queue = deque()
    for child in root.next.values():
        child.fail = root
        queue.append(child)
    while queue:
        node = queue.popleft()
        for token, child in node.next.items():
            fail = node.fail
            while fail is not root and token not in fail.next:
                fail = fail.fail
            child.fail = fail.next.get(token, root)
            queue.append(child)
    return root


class BoostingTree:
    """A phrase-boosting tree over token ids (see the module docstring).

    Args:
        phrases: each phrase's token ids (none empty), each id in ``[0, vocab_size)``.
        vocab_size: tokens the searches score (the blank excluded).
        config: the tree's weights.
        texts: each phrase's text (its length sets ``score_per_phrase``'s share); needed only
            when ``config.score_per_phrase`` is not 0.
    """

    def __init__(
        self,
        phrases: Sequence[Sequence[int]],
        vocab_size: int,
        config: BoostingConfig = BoostingConfig(),
        texts: Sequence[str] | None = None,
    ) -> None:
        if not phrases:
            raise ValueError("a boosting tree needs at least one phrase")
        for tokens in phrases:
            if not tokens:
                raise ValueError("a boosting phrase has no tokens")
            bad = [t for t in tokens if not 0 <= int(t) < vocab_size]
            if bad:
                raise ValueError(f"boosting phrase token ids {bad} are outside the vocabulary [0, {vocab_size})")
        if config.score_per_phrase != 0.0:
            if texts is None or len(texts) != len(phrases):
                raise ValueError("score_per_phrase needs each phrase's text")
            scores = [round(config.score_per_phrase / len(text), 2) for text in texts]
        else:
            scores = [0.0] * len(phrases)
        self.vocab_size = int(vocab_size)
        self.config = config
        self._build(_trie([[int(t) for t in p] for p in phrases], scores, config))

    def _build(self, root: _Node) -> None:
        """Flatten the trie into arrays: the root's arcs dense over the vocabulary, the other
        nodes' arcs contiguous (``arc_start`` / ``arc_end``); weights in float32."""
        nodes, index = [root], {id(root): ROOT}
        queue = deque([root])
        while queue:  # breadth first: a node's fail target is numbered before it is needed
            node = queue.popleft()
            for token in sorted(node.next):
                child = node.next[token]
                index[id(child)] = len(nodes)
                nodes.append(child)
                queue.append(child)
        n, uniform = len(nodes), self.config.uniform_weights
        arc_label, arc_to, arc_weight = [], [], []
        start, end = np.zeros(n, np.int64), np.zeros(n, np.int64)
        backoff_to, backoff_w = np.zeros(n, np.int64), np.zeros(n, np.float32)
        final = np.zeros(n, np.float32)
        for token in range(self.vocab_size):  # the root: every token, a phrase's first or a loop
            child = root.next.get(token)
            arc_label.append(token)
            arc_to.append(index[id(child)] if child is not None else ROOT)
            arc_weight.append(child.token_score if child is not None else self.config.unk_score)
        end[ROOT] = self.vocab_size
        for i, node in enumerate(nodes[1:], start=1):
            start[i] = len(arc_label)
            for token in sorted(node.next):
                child = node.next[token]
                arc_label.append(token)
                arc_to.append(index[id(child)])
                bonus = child.node_score if uniform and child.is_end else 0.0
                arc_weight.append(child.token_score + bonus)
            end[i] = len(arc_label)
            backoff_to[i] = index[id(node.fail)]
            keeps = node.is_end and (node.depth == 1 or not uniform)
            backoff_w[i] = 0.0 if keeps else node.fail.node_score - node.node_score
            final[i] = self.config.final_eos_score if node.is_end else 0.0
        self.num_states = n
        self.max_depth = max(node.depth for node in nodes)
        self.arc_label = torch.tensor(arc_label, dtype=torch.long)
        self.arc_to = torch.tensor(arc_to, dtype=torch.long)
        self.arc_weight = torch.tensor(np.asarray(arc_weight, dtype=np.float32))
        self.arc_start, self.arc_end = torch.from_numpy(start), torch.from_numpy(end)
        self.backoff_to, self.backoff_w = torch.from_numpy(backoff_to), torch.from_numpy(backoff_w)
        self.final_weight = torch.from_numpy(final)
        self.max_fanout = int((self.arc_end - self.arc_start).max())

    def to(self, device: torch.device | str) -> BoostingTree:
        """Move the tree's tensors to ``device`` (in place); returns self."""
        for name in ("arc_label", "arc_to", "arc_weight", "arc_start", "arc_end", "backoff_to", "backoff_w"):
            setattr(self, name, getattr(self, name).to(device))
        self.final_weight = self.final_weight.to(device)
        return self

    def initial(self, n: int, device: torch.device | str | None = None) -> torch.Tensor:
        """(n,) root states."""
        return torch.full((n,), ROOT, dtype=torch.long, device=device or self.arc_label.device)

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every token's score and next state from each of ``states``.

        Shapes:
            states: (N,) node ids.

        Returns:
            scores (N, V) float32 and next states (N, V) long.
        """
        if self.arc_label.device != states.device:
            self.to(states.device)
        n, vocab, device = states.shape[0], self.vocab_size, states.device
        scores = torch.zeros((n, vocab), dtype=torch.float32, device=device)
        nxt = torch.full((n, vocab), -1, dtype=torch.long, device=device)
        given_back = torch.zeros(n, dtype=torch.float32, device=device)  # fall backs' costs so far
        cur = states.to(torch.long).clone()
        pending = torch.ones(n, dtype=torch.bool, device=device)  # the root not yet reached
        offsets = torch.arange(self.max_fanout, device=device)
        rows = torch.arange(n, device=device)[:, None].expand(n, self.max_fanout)
        for _ in range(self.max_depth + 1):
            arcs = self.arc_start[cur][:, None] + offsets  # (N, F)
            valid = (arcs < self.arc_end[cur][:, None]) & pending[:, None]
            arcs = torch.where(valid, arcs, 0)
            label = torch.where(valid, self.arc_label[arcs], vocab)  # invalid arcs land in a spare column
            found_w = torch.zeros((n, vocab + 1), dtype=torch.float32, device=device)
            found_to = torch.full((n, vocab + 1), -1, dtype=torch.long, device=device)
            found_w[rows, label] = self.arc_weight[arcs]
            found_to[rows, label] = self.arc_to[arcs]
            known = nxt >= 0
            scores = torch.where(known, scores, given_back[:, None] + found_w[:, :vocab])
            nxt = torch.where(known, nxt, found_to[:, :vocab])
            pending &= cur != ROOT
            if not bool(pending.any()):
                break
            given_back = torch.where(pending, given_back + self.backoff_w[cur], given_back)
            cur = torch.where(pending, self.backoff_to[cur], cur)
        return scores, nxt

    def final(self, states: torch.Tensor) -> torch.Tensor:
        """(N,) final weights of ``states`` (``final_eos_score`` where a phrase ends)."""
        if self.final_weight.device != states.device:
            self.to(states.device)
        return self.final_weight[states]

    @classmethod
    def from_phrases(
        cls, phrases: Sequence[str], encode, vocab_size: int, config: BoostingConfig = BoostingConfig()
    ) -> BoostingTree:
        """A tree of text phrases (repeats counted once, in first-seen order), each tokenized by
        ``encode(text) -> ids`` (the checkpoint tokenizer's plain-text encoding).

        Raises:
            ValueError: no phrase, or one that encodes to no tokens.
        """
        texts = list(dict.fromkeys(p for p in phrases))
        if not texts:
            raise ValueError("hotwords: no phrase given")
        ids = []
        for text in texts:
            tokens = list(encode(text))
            if not tokens:
                raise ValueError(f"hotwords: {text!r} has no tokens in this model's vocabulary")
            ids.append(tokens)
        return cls(ids, vocab_size, config, texts)


__all__ = ["BoostingConfig", "BoostingTree"]
