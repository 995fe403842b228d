"""Attention rescoring: re-rank a CTC n-best with an attention decoder (WeNet's recipe).

Each hypothesis is scored teacher-forced by the decoder over the utterance's encoder
output (``decoder.score_hypotheses``: left-to-right token log-probabilities plus
``<eos>``, mixed with the right-to-left decoder's as
``(1 - reverse_weight) * left + reverse_weight * right``), and the best of
``attention + ctc_weight * ctc`` wins; ties go to the earlier (better CTC) entry,
as in WeNet. The CTC term is the hypothesis' search score (including any hotword /
LM bonus), as WeNet uses its prefix-beam scores. The sum is taken in float64 (WeNet
adds in float32), which can only matter for hypotheses within float32 rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from oasr.engine.decode.ctc.search import CtcHypothesis


class HypothesisScorer(Protocol):
    """The decoder member attention rescoring needs."""

    def score_hypotheses(
        self, encoder_out: torch.Tensor, encoder_len: int, hyps: list[list[int]], reverse_weight: float
    ) -> torch.Tensor:
        """(N,) attention log-probability of each hypothesis (no CTC term)."""


def attention_rescoring(
    decoder: HypothesisScorer,
    encoder_out: torch.Tensor,
    encoder_len: int,
    nbest: Sequence[CtcHypothesis],
    ctc_weight: float,
    reverse_weight: float,
) -> CtcHypothesis:
    """The best of ``nbest`` by ``attention score + ctc_weight * ctc score``.

    Shapes:
        encoder_out: (1, T', D) encoder output of the utterance.

    Args:
        decoder: has ``score_hypotheses`` (WeNet-compatible attention decoder).
        encoder_len: valid frames of ``encoder_out``.
        nbest: CTC prefix beam search hypotheses, best first.
        ctc_weight: weight of the CTC score.
        reverse_weight: weight of the right-to-left decoder (0 for left-to-right only).

    Returns:
        the winner, with ``score`` = its combined score (``ctc_score`` kept).

    Raises:
        ValueError: an empty n-best, or a decoder that returns the wrong number of scores.
    """
    if not nbest:
        raise ValueError("attention_rescoring needs at least one hypothesis")
    hyps = [list(h.tokens) for h in nbest]
    scores = decoder.score_hypotheses(encoder_out, int(encoder_len), hyps, float(reverse_weight))
    att = torch.as_tensor(scores, dtype=torch.float64).reshape(-1).tolist()
    if len(att) != len(nbest):
        raise ValueError(f"score_hypotheses returned {len(att)} scores for {len(nbest)} hypotheses")
    best_index, best_score = 0, -float("inf")
    for i, (a, h) in enumerate(zip(att, nbest)):
        combined = a + ctc_weight * h.score
        if combined > best_score:
            best_index, best_score = i, combined
    if best_score == -float("inf"):  # every score -inf (or NaN): keep the CTC best
        best_score = att[0] + ctc_weight * nbest[0].score
    h = nbest[best_index]
    return CtcHypothesis(h.tokens, h.frames, best_score, h.ctc_score)


__all__ = ["HypothesisScorer", "attention_rescoring"]
