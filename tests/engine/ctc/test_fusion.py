"""Hotword boosting (context graph) and n-gram LM fusion in CTC prefix beam search."""

from __future__ import annotations

import importlib.util
import math
import re

import pytest
import torch

from oasr.audio.frontends import build_frontend
from oasr.engine import ASREngine
from oasr.engine.decode.ctc import ContextGraph, ctc_prefix_beam_search, parse_hotwords
from oasr.engine.decode.words import TokenPieces
from oasr.tokenizers import TableTokenizer
from tests.conftest import checkout_hint

from .conftest import EOS, HIGH_HZ, LOW_HZ, make_loaded, tone_audio
from .conftest import UNK as UNK_ID

HAS_KENLM = importlib.util.find_spec("kenlm") is not None
needs_kenlm = pytest.mark.skipif(not HAS_KENLM, reason="kenlm is not installed (oasr's lm extra)")

UNITS = ["<blank>", "\u2581i", "\u2581red", "\u2581read", "\u2581books", "\u2581re", "ad", "<unk>"]
BLANK, I, RED, READ, BOOKS, RE, AD, UNK = range(len(UNITS))


@pytest.fixture
def tok(tmp_path):
    path = tmp_path / "units.txt"
    path.write_text("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)), encoding="utf-8")
    return TableTokenizer.from_file(path)


def _competing_words() -> torch.Tensor:
    """ "i", then "red" (0.5) against "read" (0.4), then "books": greedy and plain beam say "i red books"."""
    rows = []

    def frame(**probs):
        row = [1e-4] * len(UNITS)
        for name, p in probs.items():
            row[{"blank": BLANK, "i": I, "red": RED, "read": READ, "books": BOOKS}[name]] = p
        rest = 1.0 - sum(row)
        row[BLANK] += rest
        rows.append(row)

    frame(i=0.9)
    frame(blank=0.9)
    frame(red=0.5, read=0.4)
    frame(blank=0.9)
    frame(books=0.9)
    frame(blank=0.9)
    return torch.tensor(rows, dtype=torch.float64).log().float()


def _text(tok, hyp) -> str:
    return tok.decode(hyp.tokens)


# -- context graph --------------------------------------------------------------------------


def test_context_graph_bonus_for_full_and_partial_matches():
    w = 2.0
    g = ContextGraph([[5, 6]], w)

    def run(tokens):
        state, total = g.initial(), 0.0
        for t in tokens:
            delta, state = g.advance(state, t)
            total += delta
        return total, total + g.finalize(state)

    running, final = run([5])
    assert (running, final) == (w, 0.0)  # a partial match keeps its bonus only while it lasts
    running, final = run([5, 7])
    assert (running, final) == (0.0, 0.0)  # broken: given back
    running, final = run([5, 6])
    assert final == 2 * w  # a complete phrase nets weight x tokens
    running, final = run([1, 5, 6, 9, 5, 6])
    assert final == 4 * w  # twice
    # overlapping phrases: "ab" and "b" both match in "ab"
    g = ContextGraph([[1, 2], [2]], w)
    state, total = g.initial(), 0.0
    for t in (1, 2):
        delta, state = g.advance(state, t)
        total += delta
    assert total + g.finalize(state) == 3 * w
    # "a b c" with phrases "a b c" and "b d": after "a b", d follows the fail arc into "b d"
    g = ContextGraph([[1, 2, 3], [2, 4]], w)
    state, total = g.initial(), 0.0
    for t in (1, 2, 4):
        delta, state = g.advance(state, t)
        total += delta
    assert total + g.finalize(state) == 2 * w


def test_parse_hotwords():
    assert parse_hotwords("read, books;Anthropic\n\n  ") == ["read", "books", "Anthropic"]
    assert parse_hotwords(["new york", " paris "]) == ["new york", "paris"]
    assert parse_hotwords(" , ") == []


def test_hotword_flips_the_competing_word(tok):
    lp = _competing_words()
    plain = ctc_prefix_beam_search(lp, 4, BLANK)
    assert _text(tok, plain[0]) == "i red books"
    graph = ContextGraph.from_text("read", tok, weight=1.0)
    assert graph.phrases == [(READ,)]
    boosted = ctc_prefix_beam_search(lp, 4, BLANK, hotwords=graph)
    assert _text(tok, boosted[0]) == "i read books"
    # the score is the CTC log-probability plus the phrase's bonus
    assert boosted[0].score == pytest.approx(boosted[0].ctc_score + 1.0)
    # a hotword that is not in play changes nothing
    other = ctc_prefix_beam_search(lp, 4, BLANK, hotwords=ContextGraph.from_text("books", tok, weight=1.0))
    assert _text(tok, other[0]) == "i red books"
    # too small a bonus does not overturn the acoustics: ln(0.5 / 0.4) = 0.22
    weak = ctc_prefix_beam_search(lp, 4, BLANK, hotwords=ContextGraph.from_text("read", tok, weight=0.2))
    assert _text(tok, weak[0]) == "i red books"


def test_hotwords_need_known_tokens(tok):
    with pytest.raises(ValueError, match="hotwords"):
        ContextGraph.from_text(" , ", tok, 1.0)


# -- n-gram LM ---------------------------------------------------------------------------------

# A bigram LM where "i read books" is far likelier than "i red books".
ARPA = """
\\data\\
ngram 1=7
ngram 2=4

\\1-grams:
-1.0\t<s>\t-0.5
-1.0\t</s>
-2.0\t<unk>
-1.0\ti\t-0.5
-3.0\tred\t-0.5
-1.5\tread\t-0.5
-1.2\tbooks\t-0.5

\\2-grams:
-0.2\t<s> i
-0.3\ti read
-0.3\tread books
-0.2\tbooks </s>

\\end\\
"""


@pytest.fixture
def arpa(tmp_path):
    path = tmp_path / "lm.arpa"
    path.write_text(ARPA.lstrip(), encoding="utf-8")
    return path


@needs_kenlm
def test_lm_flips_the_competing_word(tok, arpa):
    from oasr.engine.decode.ctc import LmFusion, NgramLanguageModel

    lm = NgramLanguageModel(arpa)
    assert lm.order == 2
    pieces = TokenPieces(tok, skip_ids=(BLANK, UNK))
    lp = _competing_words()
    fused = ctc_prefix_beam_search(lp, 4, BLANK, lm=LmFusion(lm, pieces, alpha=0.5, beta=0.0))
    assert _text(tok, fused[0]) == "i read books"
    # the bonus is alpha * ln P(i read books </s>) + beta per word, computed from the ARPA by hand
    log10 = -0.2 + -0.3 + -0.3 + -0.2
    assert fused[0].score - fused[0].ctc_score == pytest.approx(0.5 * log10 * math.log(10), abs=1e-5)
    # alpha = beta = 0 is no fusion at all
    neutral = ctc_prefix_beam_search(lp, 4, BLANK, lm=LmFusion(lm, pieces, alpha=0.0, beta=0.0))
    plain = ctc_prefix_beam_search(lp, 4, BLANK)
    assert [(h.tokens, h.score) for h in neutral] == [(h.tokens, h.score) for h in plain]


@needs_kenlm
def test_lm_scores_words_built_from_several_pieces(tok, arpa):
    from oasr.engine.decode.ctc import LmFusion, NgramLanguageModel

    lm = NgramLanguageModel(arpa)
    fusion = LmFusion(lm, TokenPieces(tok, skip_ids=(BLANK, UNK)), alpha=1.0, beta=0.5)
    state = fusion.initial()
    total = 0.0
    for t in (I, RE, AD, BOOKS):  # "i re+ad books": "read" is scored when "books" starts
        delta, state = fusion.advance(state, t)
        total += delta
        if t == AD:
            assert state[1] == "read"
    total += fusion.finalize(state)
    expected = (-0.2 + -0.3 + -0.3 + -0.2) * math.log(10) + 3 * 0.5
    assert total == pytest.approx(expected, abs=1e-5)


def test_missing_kenlm_names_the_extra(monkeypatch, arpa):
    import builtins

    from oasr.engine.decode.ctc import NgramLanguageModel

    real_import = builtins.__import__

    def no_kenlm(name, *args, **kwargs):
        if name == "kenlm":
            raise ImportError("No module named 'kenlm'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_kenlm)
    with pytest.raises(ImportError, match=re.escape(checkout_hint("lm"))):
        NgramLanguageModel(arpa)


# -- through the engine ------------------------------------------------------------------------------


@needs_kenlm
def test_engine_fuses_the_configured_lm(tmp_path):
    from oasr.engine.decode.ctc import LmFusion

    loaded = make_loaded(tmp_path)
    path = tmp_path / "hello.arpa"
    path.write_text(
        "\\data\\\nngram 1=4\nngram 2=1\n\n\\1-grams:\n-1.0\t<s>\n-1.0\t</s>\n-0.5\thello\n-0.8\tworld\n\n"
        "\\2-grams:\n-0.1\thello world\n\n\\end\\\n",
        encoding="utf-8",
    )
    engine = ASREngine(loaded, lm_path=str(path), lm_alpha=0.7, lm_beta=0.3)
    lm = engine.strategy.lm
    assert isinstance(lm, LmFusion) and (lm.alpha, lm.beta) == (0.7, 0.3)
    audio = tone_audio([(1.0, 1.3, LOW_HZ), (2.0, 2.3, HIGH_HZ)], 3.0)
    out = engine.transcribe(audio, beam_size=3)
    feats = build_frontend(loaded.feature_spec)(audio)
    with torch.no_grad():
        lp, lens = loaded.model.forward_offline(feats[None], torch.tensor([feats.shape[0]]))
    lp = lp[0, : int(lens[0])]
    (want, *_) = ctc_prefix_beam_search(lp, 3, 0, skip_ids=(UNK_ID, EOS), lm=lm)
    assert out.text == "hello world"
    assert [t for s in out.segments for t in s.tokens] == list(want.tokens)
    # the LM bonus ranks the beam; avg_logprob stays the CTC log-probability per frame
    assert want.score - want.ctc_score == pytest.approx((0.7 * (-0.5 - 0.1 - 1.0) * math.log(10)) + 2 * 0.3, abs=1e-5)
    assert out.segments[0].avg_logprob == pytest.approx(want.ctc_score / lp.shape[0])
    # greedy decoding ignores the LM
    assert engine.transcribe(audio, beam_size=1).text == "hello world"
    with pytest.raises(FileNotFoundError, match="nope.arpa"):
        ASREngine(loaded, lm_path=str(tmp_path / "nope.arpa"))
