"""Attention rescoring's combination of decoder and CTC scores, with a fake decoder."""

from __future__ import annotations

import pytest
import torch

from oasr.engine.decode.ctc import CtcHypothesis, attention_rescoring


class ScriptedDecoder:
    """Returns fixed attention scores and records what it was asked."""

    def __init__(self, scores: list[float]) -> None:
        self.scores = scores
        self.calls: list = []

    def score_hypotheses(self, encoder_out, encoder_len, hyps, reverse_weight):
        self.calls.append((tuple(encoder_out.shape), encoder_len, hyps, reverse_weight))
        return torch.tensor(self.scores, dtype=torch.float64)


NBEST = [
    CtcHypothesis((1, 2), (3, 7), -1.0),
    CtcHypothesis((1,), (3,), -2.0),
    CtcHypothesis((1, 2, 2), (3, 7, 9), -1.5),
]


def test_combination_by_hand():
    enc = torch.zeros(1, 12, 4)
    dec = ScriptedDecoder([-5.0, -3.0, -4.0])
    best = attention_rescoring(dec, enc, 12, NBEST, ctc_weight=0.3, reverse_weight=0.25)
    # -5 + 0.3 * -1 = -5.3;  -3 + 0.3 * -2 = -3.6;  -4 + 0.3 * -1.5 = -4.45
    assert best.tokens == (1,) and best.frames == (3,)
    assert best.score == pytest.approx(-3.6)
    assert best.ctc_score == -2.0
    assert dec.calls == [((1, 12, 4), 12, [[1, 2], [1], [1, 2, 2]], 0.25)]
    # a heavy CTC weight gives the CTC best back: -15, -23, -19
    best = attention_rescoring(ScriptedDecoder([-5.0, -3.0, -4.0]), enc, 12, NBEST, ctc_weight=10.0, reverse_weight=0)
    assert best.tokens == (1, 2) and best.score == pytest.approx(-15.0)


def test_ties_go_to_the_earlier_hypothesis():
    enc = torch.zeros(1, 5, 2)
    # combined: -2 + 0.5 * -1 = -2.5 and -1.5 + 0.5 * -2 = -2.5
    best = attention_rescoring(ScriptedDecoder([-2.0, -1.5, -9.0]), enc, 5, NBEST, 0.5, 0.0)
    assert best.tokens == (1, 2)


def test_bad_inputs():
    enc = torch.zeros(1, 5, 2)
    with pytest.raises(ValueError, match="at least one"):
        attention_rescoring(ScriptedDecoder([]), enc, 5, [], 0.5, 0.0)
    with pytest.raises(ValueError, match="2 scores for 3"):
        attention_rescoring(ScriptedDecoder([0.0, 0.0]), enc, 5, NBEST, 0.5, 0.0)
