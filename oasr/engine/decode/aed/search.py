"""Token selection for one decode task (one window at one temperature).

Three searches share one interface: ``update`` receives the filtered log-probs of
the task's rows and says which rows continue (as parent indices, for
``BaseDecoder.select``) and with which next input tokens. Their semantics are
faster-whisper's (CTranslate2's) so transcripts match it token for token:

* greedy: argmax (first index on ties); the score sums the chosen log-probs,
  end-of-text included, and is normalised by ``len ** length_penalty``;
* sampling (best_of rows): each row samples from ``softmax(logprobs / T)`` and
  scores with the untempered log-prob; the best normalised row wins;
* beam: 2 x beam candidates per step over (beam, vocab) by cumulative log-prob;
  only the first ``beam`` candidates may finish, a finished slot is refilled from
  the next non-EOS candidate; the search stops once ``round(beam x patience)``
  hypotheses finished (or, with length_penalty 0, once the top beam did), and at
  the step budget every live beam becomes a hypothesis.

A result that ended at the step budget rather than on end-of-text is ``cut`` (the window's
``finish_reason`` is then "length").
"""

from __future__ import annotations

import abc
import math

import torch

from oasr.engine.decode.logits import SamplingParams, sampling_probs


def _normalised(tokens: list[int], cum: float, length_penalty: float) -> float:
    if not tokens:
        return float("-inf")
    return cum / (len(tokens) ** length_penalty)


class TaskSearch(abc.ABC):
    """Selection state of one task.

    Attributes:
        k: rows the task occupies once running.
        done: the task has its result.
        cut: (once done) the result ended at ``decode_max`` tokens, not on end-of-text.
    """

    k: int = 1

    def __init__(self, prefix: tuple[int, ...], decode_max: int, eot: int, length_penalty: float) -> None:
        self.eot = eot
        self.decode_max = decode_max
        self.length_penalty = length_penalty
        self.prefix_len = len(prefix)
        self.done = len(prefix) >= decode_max
        self.cut = self.done  # a forced prefix that fills the budget leaves no room for end-of-text
        self.initial = list(prefix[:decode_max])

    @abc.abstractmethod
    def row_tokens(self) -> list[list[int]]:
        """Tokens generated so far by each current row (prefix included)."""

    @abc.abstractmethod
    def update(self, logprobs: torch.Tensor, argmax: list[tuple[int, float]]) -> tuple[list[int], list[int]]:
        """Advance one step.

        Args:
            logprobs: (rows, V) filtered log-probs of this task's current rows.
            argmax: per row, (argmax id, its log-prob), precomputed for the batch.

        Returns:
            parents: for each next row, the current row it continues (empty when done).
            next_tokens: the input token of each next row.
        """

    @abc.abstractmethod
    def result(self) -> tuple[list[int], float]:
        """(tokens without end-of-text, normalised score)."""

    @abc.abstractmethod
    def candidates(self) -> list[list[int]]:
        """Every sequence the result will be or extend: their common prefix (up to an
        end-of-text) is already final, whatever the search does next."""


class GreedySearch(TaskSearch):
    k = 1

    def __init__(self, prefix, decode_max, eot, length_penalty) -> None:
        super().__init__(prefix, decode_max, eot, length_penalty)
        self.seq = list(self.initial)
        self.cum = 0.0

    def row_tokens(self) -> list[list[int]]:
        return [self.seq]

    def update(self, logprobs, argmax):
        tok, lp = argmax[0]
        self.cum += lp
        if tok == self.eot:
            self.done = True
            return [], []
        self.seq.append(tok)
        if len(self.seq) >= self.decode_max:
            self.done = self.cut = True
            return [], []
        return [0], [tok]

    def result(self):
        return self.seq, _normalised(self.seq, self.cum, self.length_penalty)

    def candidates(self):
        return [self.seq]


class SamplingSearch(TaskSearch):
    """``best_of`` independent samples at a temperature; rows that finish early keep
    their slot (fed end-of-text) until the whole task is done."""

    def __init__(
        self, prefix, decode_max, eot, length_penalty, *, best_of: int, temperature: float, generator: torch.Generator
    ) -> None:
        super().__init__(prefix, decode_max, eot, length_penalty)
        self.k = best_of
        self.temperature = temperature
        self.params = SamplingParams(temperature=temperature)
        self.generator = generator
        self.seqs = [list(self.initial) for _ in range(best_of)]
        self.cums = [0.0] * best_of
        self.finished = [self.done] * best_of
        self.row_cut = [self.done] * best_of
        self.first = True

    def row_tokens(self):
        return [self.seqs[0]] if self.first else self.seqs

    def update(self, logprobs, argmax):
        rows = logprobs.shape[0]
        probs = sampling_probs(logprobs, None, self.params)
        if rows == 1 and self.k > 1:
            # The prefilled row: every sample draws its first token from it.
            probs = probs.expand(self.k, -1)
            logprobs = logprobs.expand(self.k, -1)
        draws = torch.multinomial(probs.cpu(), 1, generator=self.generator)[:, 0].tolist()
        picked = logprobs.float().gather(1, torch.tensor(draws, device=logprobs.device)[:, None])[:, 0].tolist()
        next_tokens = []
        for j in range(self.k):
            if self.finished[j]:
                next_tokens.append(self.eot)
                continue
            tok = draws[j]
            self.cums[j] += picked[j]
            if tok == self.eot:
                self.finished[j] = True
            else:
                self.seqs[j].append(tok)
                if len(self.seqs[j]) >= self.decode_max:
                    self.finished[j] = self.row_cut[j] = True
            next_tokens.append(tok)
        parents = [0] * self.k if self.first else list(range(self.k))
        self.first = False
        if all(self.finished):
            self.done = True
            return [], []
        return parents, next_tokens

    def candidates(self):
        return self.seqs  # the result is the best of them

    def result(self):
        best = max(range(self.k), key=lambda j: _normalised(self.seqs[j], self.cums[j], self.length_penalty))
        self.cut = self.row_cut[best]
        return self.seqs[best], _normalised(self.seqs[best], self.cums[best], self.length_penalty)


class BeamSearch(TaskSearch):
    def __init__(self, prefix, decode_max, eot, length_penalty, *, beam_size: int, patience: float) -> None:
        super().__init__(prefix, decode_max, eot, length_penalty)
        self.k = beam_size
        self.beam_size = beam_size
        # std::round: half away from zero.
        self.max_candidates = int(math.floor(beam_size * patience + 0.5))
        self.early_exit = length_penalty == 0
        self.beams: list[tuple[list[int], float]] = [(list(self.initial), 0.0)]
        self.hyps: list[tuple[list[int], float, bool]] = []  # (tokens, score, cut)
        self.top_finished = False

    def row_tokens(self):
        return [b[0] for b in self.beams]

    def update(self, logprobs, argmax):
        rows, vocab = logprobs.shape
        b = self.beam_size
        n_cand = 2 * b
        cum = torch.tensor([c for _, c in self.beams], dtype=torch.float32, device=logprobs.device)
        scores = (logprobs.float() + cum[:, None]).flatten()
        values, indices = torch.topk(scores, min(n_cand, scores.numel()))
        cands = [(i // vocab, i % vocab, v) for i, v in zip(indices.tolist(), values.tolist())]
        step = len(self.beams[0][0])
        if step == self.prefix_len > 0:
            cands = [(o, 0, -1e10) if (k > 0 and t == self.eot) else (o, t, v) for k, (o, t, v) in enumerate(cands)]
        is_last = step + 1 >= self.decode_max
        new_beams: list[tuple[list[int], float]] = []
        parents: list[int] = []
        next_secondary = b
        for k in range(b):
            origin, tok, val = cands[k]
            pick = k
            if tok == self.eot or is_last:
                if k == 0:
                    self.top_finished = True
                seq = self.beams[origin][0] + ([] if tok == self.eot else [tok])
                self.hyps.append((seq, val, tok != self.eot))
                for j in range(next_secondary, len(cands)):
                    if cands[j][1] != self.eot:
                        pick = j
                        next_secondary = j + 1
                        break
            origin, tok, val = cands[pick]
            new_beams.append((self.beams[origin][0] + [tok], val))
            parents.append(origin)
        finished = is_last or (
            (self.top_finished and len(self.hyps) >= 1) if self.early_exit else len(self.hyps) >= self.max_candidates
        )
        if finished:
            self.done = True
            return [], []
        self.beams = new_beams
        return parents, [seq[-1] for seq, _ in new_beams]

    def candidates(self):
        # Every later hypothesis and beam extends a live beam, so the result extends one of these.
        return [b[0] for b in self.beams] + [h[0] for h in self.hyps]

    def result(self):
        if not self.hyps:
            return list(self.initial), 0.0
        best = max(self.hyps, key=lambda h: _normalised(h[0], h[1], self.length_penalty))
        self.cut = best[2]
        return best[0], _normalised(best[0], best[1], self.length_penalty)
