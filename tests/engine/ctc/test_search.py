"""CTC greedy and prefix beam search against hand-worked and brute-force expectations."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from oasr.engine.decode.ctc import CtcHypothesis, ctc_greedy_search, ctc_prefix_beam_search
from oasr.engine.decode.ctc.search import log_add
from oasr.engine.decode.words import PieceKind, TokenPieces, group_words, token_times
from oasr.tokenizers import TableTokenizer


def _random_log_probs(seed: int, t: int, v: int, sharpness: float = 3.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(t, v, generator=g) * sharpness, dim=-1)


def _from_probs(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64).log().float()


def _collapse(path: tuple[int, ...], blank: int) -> tuple[int, ...]:
    out = []
    prev = None
    for s in path:
        if s != prev and s != blank:
            out.append(s)
        prev = s
    return tuple(out)


def _exact_label_log_probs(lp: torch.Tensor, blank: int) -> dict[tuple[int, ...], float]:
    """log P(labels) by summing over every alignment (V ** T of them)."""
    t, v = lp.shape
    probs = lp.double().exp()
    total: dict[tuple[int, ...], float] = {}
    for path in itertools.product(range(v), repeat=t):
        p = 1.0
        for i, s in enumerate(path):
            p *= float(probs[i, s])
        key = _collapse(path, blank)
        total[key] = total.get(key, 0.0) + p
    return {k: math.log(p) for k, p in total.items() if p > 0}


def test_greedy_collapses_runs_and_drops_blanks():
    # argmax path: a a _ a b b _ _ b  (a=1, b=2, blank=0)
    rows = [
        [0.1, 0.8, 0.1],
        [0.1, 0.6, 0.3],
        [0.7, 0.2, 0.1],
        [0.2, 0.5, 0.3],
        [0.1, 0.1, 0.8],
        [0.1, 0.2, 0.7],
        [0.6, 0.2, 0.2],
        [0.9, 0.05, 0.05],
        [0.3, 0.1, 0.6],
    ]
    lp = _from_probs(rows)
    hyp = ctc_greedy_search(lp, blank_id=0)
    assert hyp.tokens == (1, 1, 2, 2)
    assert hyp.frames == (0, 3, 4, 8)  # the most probable frame of each run
    best = [max(r) for r in rows]
    assert hyp.score == pytest.approx(sum(math.log(p) for p in best), abs=1e-5)


def test_greedy_with_another_blank_id_and_empty_input():
    lp = _from_probs([[0.1, 0.2, 0.7], [0.8, 0.1, 0.1], [0.1, 0.1, 0.8]])
    assert ctc_greedy_search(lp, blank_id=2).tokens == (0,)
    assert ctc_greedy_search(lp, blank_id=0).tokens == (2, 2)
    empty = ctc_greedy_search(torch.zeros(0, 3), blank_id=0)
    assert empty == CtcHypothesis((), (), 0.0)
    assert ctc_prefix_beam_search(torch.zeros(0, 3), 4, blank_id=0)[0].tokens == ()


@pytest.mark.parametrize("seed", range(20))
def test_beam_one_is_greedy(seed):
    lp = _random_log_probs(seed, 40, 7)
    g = ctc_greedy_search(lp, blank_id=seed % 7)
    (b,) = ctc_prefix_beam_search(lp, 1, blank_id=seed % 7)
    assert (b.tokens, b.frames) == (g.tokens, g.frames)
    assert b.score == g.score  # the same additions in the same order


def test_beam_search_is_at_least_as_good_as_greedy():
    improved = 0
    for seed in range(200):
        lp = _random_log_probs(seed, 30, 6, sharpness=1.5)
        greedy = ctc_greedy_search(lp, blank_id=0)
        best = ctc_prefix_beam_search(lp, 6, blank_id=0)[0]
        # the best prefix's probability (all its alignments) is at least the greedy path's
        assert best.ctc_score >= greedy.score - 1e-9
        improved += best.tokens != greedy.tokens
    assert improved > 0  # on flat posteriors the beam does find other label sequences


@pytest.mark.parametrize("seed", range(12))
def test_prefix_scores_are_sums_over_alignments(seed):
    t, v = 5, 3
    lp = _random_log_probs(seed, t, v, sharpness=1.0)
    exact = _exact_label_log_probs(lp, blank=0)
    hyps = ctc_prefix_beam_search(lp, 1000, blank_id=0)  # wide enough to prune nothing
    assert len(hyps) == len(exact)
    for h in hyps:
        assert h.ctc_score == pytest.approx(exact[h.tokens], abs=1e-9)
        assert h.score == h.ctc_score
    assert hyps[0].tokens == max(exact, key=exact.get)
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def test_pruning_keeps_the_beam_size_best_prefixes():
    lp = _random_log_probs(3, 12, 5, sharpness=1.0)
    for beam in (2, 3, 5):
        hyps = ctc_prefix_beam_search(lp, beam, blank_id=0)
        assert len(hyps) == beam
        assert len({h.tokens for h in hyps}) == beam
    # a beam wider than the vocabulary expands every symbol (no error)
    assert len(ctc_prefix_beam_search(lp, 50, blank_id=0)) == 50


def test_skipped_ids_are_never_emitted():
    # symbols: 0 blank, 1 a, 2 <special>; the best path is a <s> a <s> <s>
    rows = [
        [0.1, 0.7, 0.2],
        [0.1, 0.2, 0.7],
        [0.1, 0.8, 0.1],
        [0.2, 0.1, 0.7],
        [0.1, 0.1, 0.8],
    ]
    lp = _from_probs(rows)
    assert ctc_greedy_search(lp, 0).tokens == (1, 2, 1, 2)
    g = ctc_greedy_search(lp, 0, skip_ids=(2,))
    assert g.tokens == (1, 1) and g.frames == (0, 2)  # the special token still separated the two a's
    hyps = ctc_prefix_beam_search(lp, 4, 0, skip_ids=(2,))
    assert all(2 not in h.tokens and len(h.tokens) == len(h.frames) for h in hyps)
    assert len({h.tokens for h in hyps}) == len(hyps)  # merged where only the special id differed
    # merging adds the probabilities of what became the same hypothesis
    plain = ctc_prefix_beam_search(lp, 4, 0)
    merged = {}
    for h in plain:
        key = tuple(u for u in h.tokens if u != 2)
        merged[key] = log_add(merged.get(key, -math.inf), h.ctc_score)
    for h in hyps:
        assert h.ctc_score == pytest.approx(merged[h.tokens])
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def test_beam_frames_are_spikes_on_the_best_alignment():
    # a at frames 1-3 (peak at 2), blank, b at 5-6 (peak at 6)
    rows = [
        [0.9, 0.05, 0.05],
        [0.3, 0.6, 0.1],
        [0.1, 0.85, 0.05],
        [0.2, 0.7, 0.1],
        [0.9, 0.05, 0.05],
        [0.3, 0.1, 0.6],
        [0.1, 0.1, 0.8],
    ]
    hyp = ctc_prefix_beam_search(_from_probs(rows), 3, blank_id=0)[0]
    assert hyp.tokens == (1, 2) and hyp.frames == (2, 6)


def test_token_times_from_spikes():
    # 40 ms frames (subsampling 4 x 10 ms), window starting at 10 s, spikes at frames 5, 8, 50
    spans = token_times([5, 8, 50], 0.04, offset_s=10.0, end_s=12.1, max_token_s=1.0)
    peaks = [10.2, 10.32, 12.0]
    assert spans[0] == pytest.approx((10.0, (peaks[0] + peaks[1]) / 2))  # clamped at the window start
    assert spans[1] == pytest.approx(((peaks[0] + peaks[1]) / 2, peaks[1] + 0.5))  # at most half a second
    assert spans[2] == pytest.approx((peaks[2] - 0.5, 12.1))  # clamped at the end
    assert token_times([], 0.04) == []


def _units(tmp_path, units):
    path = tmp_path / "units.txt"
    path.write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)), encoding="utf-8")
    return TableTokenizer.from_file(path)


def test_words_from_pieces(tmp_path):
    tok = _units(tmp_path, ["<blank>", "\u2581hel", "lo", "\u2581wor", "ld", ",", "你", "好", "ok", "<unk>"])
    pieces = TokenPieces(tok, skip_ids=(0, 9))
    assert pieces.info(1).kind is PieceKind.WORD_START and pieces.info(1).text == "hel"
    assert pieces.info(2).kind is PieceKind.CONTINUE
    assert pieces.info(6).kind is PieceKind.STANDALONE
    assert pieces.info(9).kind is PieceKind.SKIP
    # "hello world, 你好ok"
    tokens = [1, 2, 3, 4, 5, 6, 7, 8]
    words = group_words(tokens, pieces)
    assert [(w.start, w.end, w.spaced) for w in words] == [
        (0, 2, True),
        (2, 5, True),
        (5, 6, False),
        (6, 7, False),
        (7, 8, False),
    ]
    texts = [(" " if w.spaced else "") + tok.decode(tokens[w.start : w.end]) for w in words]
    assert "".join(texts).strip() == tok.decode(tokens) == "hello world,你好ok"
    # a hypothesis starting mid-word still makes a (spaced) word
    assert [(w.start, w.end, w.spaced) for w in group_words([2, 1], pieces)] == [(0, 1, True), (1, 2, True)]
