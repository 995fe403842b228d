"""Unit checks of the AED decoding pieces against hand-worked expectations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.engine.decode.aed.logits import FilterRules, TimestampIds, apply_filters
from oasr.engine.decode.aed.prompt import build_prompt, plan_prompt
from oasr.engine.decode.aed.search import BeamSearch, GreedySearch, SamplingSearch
from oasr.engine.decode.aed.strategy import compression_ratio
from oasr.engine.decode.aed.timing import dtw, median_filter
from oasr.engine.decode.autoregressive import compaction_order
from oasr.models.bundled import bundled_path
from oasr.models.whisper.tokenizer import WhisperTokenizer, normalize_language
from oasr.tokenizers import HFTokenizer


@pytest.fixture(scope="module")
def tok():
    path = bundled_path("whisper-base")
    if path is None:
        pytest.skip("whisper-base vocabulary not installed")
    return WhisperTokenizer.from_tokenizer(HFTokenizer.from_file(path / "tokenizer.json"), multilingual=True)


def test_special_ids_of_the_multilingual_vocabulary(tok):
    sp = tok.special
    assert (sp.eot, sp.sot, sp.translate, sp.transcribe, sp.sot_lm, sp.sot_prev, sp.no_speech, sp.no_timestamps) == (
        50257,
        50258,
        50358,
        50359,
        50360,
        50361,
        50362,
        50363,
    )
    assert sp.timestamp_begin == 50364 and len(sp.language_ids) == 99
    assert tok.language_to_id["en"] == 50259 and tok.language_to_id["su"] == 50357
    assert normalize_language("English") == normalize_language("EN") == "en"


def test_non_speech_tokens_match_the_published_list(tok):
    # faster-whisper / CTranslate2's suppress list of whisper-base (config.json suppress_ids minus specials).
    cfg = __import__("json").loads((bundled_path("whisper-base") / "config.json").read_text())
    specials = {50257, 50258, 50358, 50359, 50360, 50361, 50362}
    assert sorted(set(tok.non_speech_tokens) | specials) == sorted(set(cfg["suppress_ids"]) | specials)


def test_prompt_layout_and_split(tok):
    sot, en, tr, nts, prev = 50258, 50259, 50359, 50363, 50361
    p = build_prompt(tok, [], language="en", task="transcribe")
    assert p == [sot, en, tr]
    plan = plan_prompt(p, tok)
    assert plan.prefill == (sot, en, tr) and plan.prefix == () and plan.sot_index == 0
    assert plan.decode_max == 224 and plan.timestamp_rules
    p = build_prompt(tok, list(range(300)), language="en", task="transcribe", without_timestamps=True, prefix="Hi")
    assert p[0] == prev and p[1:224] == list(range(300))[-223:]  # previous text keeps its last 223 tokens
    assert p[224:228] == [sot, en, tr, nts] and p[228:] == tok.encode_text(" Hi")
    plan = plan_prompt(p, tok)
    assert plan.sot_index == 224 and not plan.timestamp_rules
    assert plan.prefix == tuple(tok.encode_text(" Hi"))
    assert plan.decode_max == min(224, 448 - 227)
    p = build_prompt(tok, [], language="en", task="transcribe", prefix="So")
    assert p[3] == tok.timestamp_begin  # a prefix with timestamps starts at <|0.00|>
    assert plan_prompt(p, tok, max_length=13).decode_max == 6


def _rules(**kw) -> FilterRules:
    base = dict(suppress=(), begin_suppress=(), sample_begin=0, timestamp_rules=True, max_initial_id=50364 + 50)
    base.update(kw)
    return FilterRules(**base)


IDS = TimestampIds(eot=50257, no_timestamps=50363, timestamp_begin=50364)


def _allowed(logits: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(logits)


def test_timestamp_rules():
    v = 51865
    tsb = IDS.timestamp_begin
    # First step: only <|0.00|> .. <|1.00|>.
    lg = torch.zeros(1, v)
    apply_filters(lg, [(_rules(), [])], IDS)
    ok = _allowed(lg[0]).nonzero()[:, 0]
    assert ok.min() == tsb and ok.max() == tsb + 50
    # After "<|0.00|> text <|1.00|>": text is banned, timestamps before 1.00 are banned, eot allowed
    # (here eot outweighs the timestamp mass, so no timestamp is forced).
    lg = torch.zeros(1, v)
    lg[0, IDS.eot] = 20.0
    apply_filters(lg, [(_rules(), [tsb, 100, tsb + 50])], IDS)
    a = _allowed(lg[0])
    assert not a[: IDS.eot].any() and a[IDS.eot] and not a[tsb : tsb + 50].any() and a[tsb + 50 :].all()
    # Two timestamps in a row: only text (or eot) may follow.
    lg = torch.zeros(1, v)
    apply_filters(lg, [(_rules(), [tsb, 100, tsb + 50, tsb + 50])], IDS)
    a = _allowed(lg[0])
    assert not a[tsb:].any() and a[100] and not a[IDS.no_timestamps]
    # After text, timestamps must not go back; high timestamp mass forces a timestamp.
    lg = torch.zeros(1, v)
    lg[0, tsb + 80 :] = 5.0
    apply_filters(lg, [(_rules(), [tsb + 10, 100])], IDS)
    a = _allowed(lg[0])
    assert not a[tsb : tsb + 11].any() and not a[:tsb].any() and a[tsb + 11 :].all()
    # Suppression and begin suppression (first free step only).
    lg = torch.zeros(2, v)
    rules = _rules(suppress=(5, 7), begin_suppress=(220, IDS.eot), timestamp_rules=False)
    apply_filters(lg, [(rules, []), (rules, [9])], IDS)
    assert not _allowed(lg[0])[[5, 7, 220, IDS.eot]].any() and _allowed(lg[1])[[220, IDS.eot]].all()


def test_greedy_and_beam_follow_the_reference_rules():
    eot = 3
    g = GreedySearch((), decode_max=5, eot=eot, length_penalty=1.0)
    lp = torch.log_softmax(torch.tensor([[0.0, 2.0, 1.0, 0.5]]), -1)
    parents, nxt = g.update(lp, [(1, float(lp[0, 1]))])
    assert parents == [0] and nxt == [1] and not g.done
    g.update(lp, [(eot, float(lp[0, eot]))])
    tokens, score = g.result()
    assert g.done and tokens == [1] and score == pytest.approx(float(lp[0, 1] + lp[0, eot]))
    # Beam: 2 x beam candidates from the single start row; finished slots refill from the rest.
    b = BeamSearch((), decode_max=10, eot=eot, length_penalty=1.0, beam_size=2, patience=1.0)
    first = torch.log(torch.tensor([[0.04, 0.5, 0.06, 0.4]]))
    parents, nxt = b.update(first, [])
    assert parents == [0, 0] and nxt == [1, 2] and b.hyps == [([], float(first[0, 3]), False)]
    assert b.top_finished is False and b.max_candidates == 2


@pytest.mark.parametrize("kind", ["greedy", "beam", "sampling"])
def test_a_decode_that_reaches_decode_max_is_cut_and_one_that_ends_is_not(kind):
    """``cut`` (the window's finish_reason "length") is set exactly when the step budget, not
    end-of-text, ended the chosen hypothesis."""
    eot = 3

    def search(decode_max):
        args = ((), decode_max, eot, 1.0)
        if kind == "greedy":
            return GreedySearch(*args)
        if kind == "beam":
            return BeamSearch(*args, beam_size=2, patience=1.0)
        return SamplingSearch(*args, best_of=2, temperature=1.0, generator=torch.Generator().manual_seed(0))

    def run(s, favourite):
        lp = torch.full((1, 4), -30.0)
        lp[0, favourite] = 0.0
        lp = torch.log_softmax(lp, -1)
        while not s.done:
            rows = lp.expand(len(s.row_tokens()), -1)
            s.update(rows, [(favourite, float(lp[0, favourite]))] * rows.shape[0])
        return s.result()[0]

    talking = search(decode_max=3)
    assert run(talking, 1) == [1, 1, 1] and talking.cut
    ending = search(decode_max=3)
    assert len(run(ending, eot)) < 3 and not ending.cut


def test_dtw_matches_the_loop_definition():
    rng = np.random.default_rng(0)
    for n, m in ((1, 1), (3, 7), (8, 5), (12, 40)):
        x = rng.standard_normal((n, m)).astype(np.float32)
        ti, tj = dtw(x)
        # The loop definition (CTranslate2 / openai-whisper).
        cost = np.full((n + 1, m + 1), np.inf, np.float32)
        cost[0, 0] = 0
        trace = -np.ones((n + 1, m + 1), int)
        for j in range(1, m + 1):
            for i in range(1, n + 1):
                c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
                t = 0 if (c0 < c1 and c0 < c2) else (1 if (c1 < c0 and c1 < c2) else 2)
                cost[i, j] = x[i - 1, j - 1] + (c0, c1, c2)[t]
                trace[i, j] = t
        trace[0, :], trace[:, 0] = 2, 1
        i, j, path = n, m, []
        while i > 0 or j > 0:
            path.append((i - 1, j - 1))
            t = trace[i, j]
            i, j = (i - 1, j - 1) if t == 0 else ((i - 1, j) if t == 1 else (i, j - 1))
        assert list(zip(ti.tolist(), tj.tolist())) == path[::-1]


def test_median_filter_mirrors_without_repeating_the_edge():
    x = torch.tensor([[5.0, 1.0, 4.0, 2.0, 8.0, 3.0, 7.0, 6.0]])
    # width 3 by hand: edges mirror [1,5,1] -> 1 and [3? ...]
    y = median_filter(x, 3)
    assert y.tolist() == [[1.0, 4.0, 2.0, 4.0, 3.0, 7.0, 6.0, 7.0]]
    assert torch.equal(median_filter(x[:, :1], 3), x[:, :1])  # too short: unchanged


def test_compaction_order_fills_holes_from_the_tail():
    # 5 tasks, tasks 1 and 3 finished: survivors at 0, 2, 4 -> task 4 moves into slot 1.
    assert compaction_order([0, 2, 4], 5) == [0, 2, 1]
    assert compaction_order([0, 1, 2], 4) == [0, 1, 2]
    assert compaction_order([3], 4) == [0]


def test_compression_ratio_of_repetition_is_high():
    assert compression_ratio("the cat sat on the mat " * 20) > 2.4 > compression_ratio("a short varied sentence.")
