"""Logit processors of the autoregressive strategies (Whisper's ``aed`` and the speech-LLMs'
``llm``), written once: repetition penalty, no-repeat n-gram ban, suppression, and the sampling
chain (temperature -> top-k -> top-p -> softmax -> one draw).

Each strategy composes them in its reference's order: Whisper (``aed/logits.py``) runs
faster-whisper's CTranslate2 order on a whole decode batch in place (``apply_token_rules``:
penalty, n-gram ban, suppression; then its begin suppression and timestamp rules) and samples
with ``sampling_probs`` at a temperature; the LLM strategy runs transformers' ``generate`` chain
per sampled row (``choose_token``) and keeps a batched argmax for its plain greedy rows.
Disabled scores become -inf.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

NEG_INF = float("-inf")


# ---------------------------------------------------------------------------
# Penalties and bans


def penalize_repetitions_(scores: torch.Tensor, ids: torch.Tensor, penalty: float) -> torch.Tensor:
    """transformers' / CTranslate2's repetition penalty, in place: the score of every id in ``ids``
    is divided by ``penalty`` when positive and multiplied by it when negative.

    Shapes:
        scores: (V,) (a row of a batch is fine: it is written through); ids: (n,) int64 -> scores
    """
    s = scores.index_select(0, ids)
    scores.index_copy_(0, ids, torch.where(s < 0, s * penalty, s / penalty))
    return scores


def apply_repetition_penalty(scores: torch.Tensor, seen: torch.Tensor | None, penalty: float) -> torch.Tensor:
    """``penalize_repetitions_`` on a copy (``scores`` itself is left as it is).

    Shapes:
        scores: (V,) float32; seen: (n,) int64 ids -> (V,)
    """
    if penalty == 1.0 or seen is None or seen.numel() == 0:
        return scores
    return penalize_repetitions_(scores.clone(), seen, penalty)


def banned_ngram_tokens(seq: Sequence[int], n: int) -> list[int]:
    """Tokens that would complete an n-gram already present in ``seq``."""
    if len(seq) < n:
        return []
    tail = list(seq[len(seq) - n + 1 :])
    return [seq[i + n - 1] for i in range(len(seq) - n + 1) if list(seq[i : i + n - 1]) == tail]


@dataclass(kw_only=True)
class TokenRules:
    """Penalties, bans and suppression of one decode task (shared by all its rows).

    Attributes:
        suppress: ids disabled at every step.
        repetition_penalty: > 1 discourages tokens the row already generated.
        no_repeat_ngram_size: forbid repeating n-grams of this size (0 = off).
    """

    suppress: tuple[int, ...] = ()
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    _suppress_t: dict = field(default_factory=dict, repr=False)

    def suppress_tensor(self, device: torch.device) -> torch.Tensor:
        t = self._suppress_t.get(device)
        if t is None:
            t = self._suppress_t[device] = torch.tensor(self.suppress, dtype=torch.long, device=device)
        return t


def apply_token_rules(logits: torch.Tensor, rows: Sequence[tuple[TokenRules, Sequence[int]]]) -> torch.Tensor:
    """Repetition penalty, n-gram ban, then suppression, on a batch of logits in place.

    Penalties and bans are rare and handled row by row; suppression is one indexed write
    per distinct ``TokenRules`` (one for the whole batch when every row shares it).

    Args:
        logits: (n, V) raw logits of the rows.
        rows: per row, its task's rules and the tokens it generated so far.

    Returns:
        ``logits`` (modified in place).
    """
    n = logits.shape[0]
    dev = logits.device
    for r, (rules, seq) in enumerate(rows):
        if rules.repetition_penalty != 1.0 and seq:
            ids = torch.tensor(sorted(set(seq)), dtype=torch.long, device=dev)
            penalize_repetitions_(logits[r], ids, rules.repetition_penalty)
        if rules.no_repeat_ngram_size > 0:
            banned = banned_ngram_tokens(seq, rules.no_repeat_ngram_size)
            if banned:
                logits[r, banned] = NEG_INF
    by_rules: dict[int, list[int]] = {}
    for r, (rules, _) in enumerate(rows):
        if rules.suppress:
            by_rules.setdefault(id(rules), []).append(r)
    for rows_idx in by_rules.values():
        sup = rows[rows_idx[0]][0].suppress_tensor(dev)
        if len(rows_idx) == n:
            logits[:, sup] = NEG_INF
        else:
            ri = torch.tensor(rows_idx, device=dev)
            logits[ri[:, None], sup[None, :]] = NEG_INF
    return logits


# ---------------------------------------------------------------------------
# Sampling


@dataclass(frozen=True)
class SamplingParams:
    """How one row chooses its tokens.

    Attributes:
        temperature: <= 0 is greedy.
        top_k: keep the k highest scores (0 = off).
        top_p: keep the smallest top set reaching this probability (1.0 = off).
        repetition_penalty: > 1 penalises ids already in the prompt or generated.
        seed: the request generator's seed.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


def filter_scores(scores: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature, then top-k, then top-p; filtered scores become -inf.

    Top-k keeps every score tied with the k-th; top-p keeps the highest-probability
    tokens whose cumulative probability reaches ``top_p`` (at least one), as
    transformers' warpers do. Rows are independent.

    Shapes:
        scores: (..., V) float32 (after any penalty) -> (..., V)
    """
    scores = scores / params.temperature
    if params.top_k > 0:
        k = min(params.top_k, scores.shape[-1])
        kth = torch.topk(scores, k).values[..., -1:]
        scores = scores.masked_fill(scores < kth, -math.inf)
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        cum = sorted_scores.softmax(-1).cumsum(-1)
        remove = cum <= 1 - params.top_p
        remove[..., -1] = False  # the most likely token always stays
        scores = scores.masked_fill(remove.scatter(-1, order, remove), -math.inf)
    return scores


def sampling_probs(logits: torch.Tensor, seen: torch.Tensor | None, params: SamplingParams) -> torch.Tensor:
    """The distribution a sampling draw reads: the whole chain before the draw.

    Shapes:
        logits: (V,) (or (..., V) without ``seen``) -> probabilities, same shape, float32
    """
    scores = apply_repetition_penalty(logits.float(), seen, params.repetition_penalty)
    return filter_scores(scores, params).softmax(-1)


def request_seed(seed: int | None) -> int:
    """The seed a request samples with: ``seed`` as given (the same seed replays the same
    samples), or a fresh one from the OS's entropy when None (vLLM's semantics: requests
    without a seed are independent draws)."""
    return int(seed) if seed is not None else random.SystemRandom().randrange(2**63)


def draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One multinomial draw by inverse CDF, from a uniform of ``generator`` (CPU).

    The uniform does not depend on the device or the batch; a zero-probability id is
    never drawn.
    """
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    cdf = probs.double().cumsum(-1)
    x = torch.tensor([u], dtype=torch.float64, device=cdf.device) * cdf[-1]
    return min(int(torch.searchsorted(cdf, x, right=True)), probs.shape[-1] - 1)


def choose_token(
    logits: torch.Tensor, seen: torch.Tensor | None, params: SamplingParams, generator: torch.Generator | None
) -> int:
    """transformers' ``generate`` chain for one row: greedy (argmax after the repetition
    penalty) or a ``draw`` from ``sampling_probs``."""
    if params.greedy:
        return int(apply_repetition_penalty(logits.float(), seen, params.repetition_penalty).argmax())
    if generator is None:
        raise ValueError("sampling needs a generator")
    return draw(sampling_probs(logits, seen, params), generator)


__all__ = [
    "NEG_INF",
    "SamplingParams",
    "TokenRules",
    "apply_repetition_penalty",
    "apply_token_rules",
    "banned_ngram_tokens",
    "choose_token",
    "draw",
    "filter_scores",
    "penalize_repetitions_",
    "request_seed",
    "sampling_probs",
]
