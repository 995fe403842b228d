"""Batched greedy transducer search (``oasr.models.nemotron.search``) against a plain one-row,
one-step-at-a-time loop written here (NeMo's greedy RNN-T / TDT), and the LSTM predictor's contract."""

from __future__ import annotations

import pytest
import torch

from oasr.models.nemotron.predictor import AdditiveJoint, LstmPredictor
from oasr.models.nemotron.search import greedy_search

VOCAB, BLANK, D, DJ = 12, 11, 8, 6


def _parts(durations=(), seed: int = 0, blank_bias: float = 0.0):
    torch.manual_seed(seed)
    predictor = LstmPredictor(VOCAB, DJ, 2, BLANK).double().eval()
    joint = AdditiveJoint(D, DJ, VOCAB, len(durations)).double().eval()
    with torch.no_grad():
        for p in (*predictor.parameters(), *joint.parameters()):
            p.copy_(torch.randn(p.shape, dtype=p.dtype))
        joint.head.bias[BLANK] += blank_bias
    return joint, predictor


def _one_row(joint, predictor, enc, n, max_sym, durations=None):
    """Greedy for one row, step by step: (tokens, frames, durations)."""
    state = predictor.init_state(1)
    t, sym, toks, frames, durs = 0, 0, [], [], []
    while t < n:
        logits = joint(enc[t][None], predictor.predict(state))[0]
        k = int(logits[:VOCAB].argmax())
        if durations is None:
            if k == BLANK:
                t, sym = t + 1, 0
                continue
            toks.append(k)
            frames.append(t)
            sym += 1
            state = predictor.advance(state, torch.tensor([k]), torch.tensor([True]))
            if sym >= max_sym:
                t, sym = t + 1, 0
        else:
            d = durations[int(logits[VOCAB:].argmax())]
            if k == BLANK and d == 0:
                d = 1
            sym = sym + 1 if d == 0 else 0
            if sym >= max_sym:
                d, sym = 1, 0
            if k != BLANK:
                toks.append(k)
                frames.append(t)
                durs.append(d)
                state = predictor.advance(state, torch.tensor([k]), torch.tensor([True]))
            t += d
    return toks, frames, durs


@pytest.mark.parametrize("durations", [None, (0, 1, 2, 3), (0, 2, 5)])
def test_batched_greedy_equals_one_row_at_a_time(durations):
    joint, predictor = _parts(durations or (), blank_bias=1.0)
    torch.manual_seed(1)
    lens = torch.tensor([17, 5, 0, 11])
    enc = torch.randn(4, 17, D, dtype=torch.float64)
    with torch.no_grad():
        out = greedy_search(joint, predictor, enc, lens, blank_id=BLANK, max_symbols_per_step=3, durations=durations)
        emitted = 0
        for row, n in enumerate(lens.tolist()):
            toks, frames, durs = _one_row(joint, predictor, enc[row], n, 3, durations)
            assert out.tokens[row] == toks and out.frames[row] == frames, row
            if durations is not None:
                assert out.durations[row] == durs, row
            emitted += len(toks)
    assert out.tokens[2] == [] and emitted > 10
    assert (out.durations is None) == (durations is None)


def test_max_symbols_per_step_caps_each_frame():
    joint, predictor = _parts(blank_bias=-1e4)  # blank never wins
    enc = torch.randn(2, 6, D, dtype=torch.float64)
    with torch.no_grad():
        out = greedy_search(joint, predictor, enc, torch.tensor([6, 4]), blank_id=BLANK, max_symbols_per_step=2)
    assert out.frames == [[0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5], [0, 0, 1, 1, 2, 2, 3, 3]]
    with pytest.raises(ValueError, match="max_symbols_per_step"):
        greedy_search(joint, predictor, enc, torch.tensor([6, 4]), blank_id=BLANK, max_symbols_per_step=0)


def test_predictor_starts_from_blank_and_keeps_rows_that_do_not_emit():
    _, predictor = _parts()
    with torch.no_grad():
        state = predictor.init_state(3)
        out, _ = predictor.lstm(predictor.embedding(torch.tensor([[BLANK]])))
        assert torch.allclose(state.pred[0], predictor.decoder_projector(out[0, 0]))
        assert not torch.equal(state.h, torch.zeros_like(state.h))
        moved = predictor.advance(state, torch.tensor([1, 2, 3]), torch.tensor([True, False, True]))
    assert torch.equal(moved.h[:, 1], state.h[:, 1]) and torch.equal(moved.c[:, 1], state.c[:, 1])
    assert not torch.equal(moved.pred[0], state.pred[0])
    rows = predictor.unstack_states(moved)
    assert len(rows) == 3
    again = predictor.stack_states(rows)
    assert all(torch.equal(a, b) for a, b in zip(again, moved))


def test_the_shared_transducer_search_drives_this_joint():
    """``oasr.models.transducer.search.greedy_search`` (icefall's, written for a
    ``encoder_proj`` / ``decoder_proj`` / ``join`` joiner) gives the same RNN-T labels here."""
    from types import SimpleNamespace

    from oasr.models.transducer.search import greedy_search as shared_greedy

    joint, predictor = _parts(blank_bias=1.0)
    model = SimpleNamespace(predictor=predictor, joiner=joint, blank_id=BLANK)
    enc = torch.randn(3, 13, D, dtype=torch.float64)
    lens = torch.tensor([13, 7, 2])
    with torch.no_grad():
        ours = greedy_search(joint, predictor, enc, lens, blank_id=BLANK, max_symbols_per_step=3)
    shared = shared_greedy(model, enc, lens, max_sym_per_frame=3)
    assert shared.tokens == ours.tokens and shared.frames == ours.frames
    assert sum(map(len, ours.tokens)) > 5
