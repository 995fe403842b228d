"""oasr's transducer (stateless predictor, joiner, batched greedy and modified beam search)
against icefall's own modules and search (the ``zipformer`` package) on the same hybrid
checkpoint loaded with ``architecture="transducer"``, in float64: predictor output and joiner
logits per stage, greedy tokens and emission frames, modified beam search (beam 4) token for
token; oasr decodes the clips as one padded batch, icefall one at a time."""

from __future__ import annotations

import pytest
import torch

import oasr
from oasr.models.transducer.search import greedy_search, modified_beam_search
from tests.models.zipformer.conftest import pad, parity, reference_encoded

COSINE = 0.99999


@pytest.fixture(scope="module")
def ours(reference):
    loaded = oasr.load_pretrained(reference.path, architecture="transducer")
    assert loaded.model.architecture == "transducer" and loaded.report.ok and not loaded.report.missing
    return loaded.model.double()


@pytest.fixture(scope="module")
def encoded(ours, features):
    feats, lens = pad(features)
    with torch.no_grad():
        return ours.encode_offline(feats, lens)


@pytest.fixture(scope="module")
def ref_encoded(reference, features):
    return reference_encoded(reference, features)


def test_encoder_output_matches(encoded, ref_encoded):
    enc, lens = encoded
    for i, (r, r_lens) in enumerate(ref_encoded):
        n = int(r_lens[0])
        assert int(lens[i]) == n
        max_abs, cos = parity(enc[i, :n], r[0])
        assert max_abs < 1e-9 and cos >= COSINE, (i, max_abs, cos)


def test_predictor_output_matches(ours, reference):
    ref_dec = reference.model.decoder
    windows = torch.tensor([[-1, 0], [0, 5], [7, 7], [3, 22], [-1, 9]])
    with torch.no_grad():
        got = ours.predictor.predict(windows)
        want = ref_dec(windows, need_pad=False)[:, 0]
    max_abs, cos = parity(got, want)
    assert max_abs < 1e-12 and cos >= COSINE, (max_abs, cos)
    start = ours.predictor.init_state(3, "cpu")
    assert start.tolist() == [[-1, 0]] * 3  # icefall's start window: [-1] * (context - 1) + [blank]


def test_joiner_logits_match(ours, reference, encoded):
    enc, _ = encoded
    torch.manual_seed(0)
    pred = torch.randn(enc.shape[0], enc.shape[1], ours.config.decoder_dim, dtype=torch.float64)
    with torch.no_grad():
        got = ours.joiner(enc, pred)
        want = reference.model.joiner(enc, pred)
    max_abs, cos = parity(got, want)
    assert max_abs < 1e-9 and cos >= COSINE, (max_abs, cos)


@pytest.mark.parametrize("max_sym", [1, 2])
def test_greedy_matches_icefall(ours, reference, encoded, ref_encoded, max_sym):
    from zipformer.decode.search import greedy_search as icefall_greedy

    enc, lens = encoded
    got = greedy_search(ours, enc, lens, max_sym_per_frame=max_sym)
    for i, (r, r_lens) in enumerate(ref_encoded):
        with torch.no_grad():
            want = icefall_greedy(reference.model, r, r_lens, max_sym_per_frame=max_sym, return_timestamps=True)
        assert got.tokens[i] == want.hyps[0], i
        assert got.frames[i] == want.timestamps[0], i
    assert sum(map(len, got.tokens)) >= 10
    assert any(len(set(f)) < int(n) for f, n in zip(got.frames, lens)), "every frame emitted: blank never wins"


def test_blank_penalty_matches_icefall(ours, reference, encoded, ref_encoded):
    from zipformer.decode.search import greedy_search as icefall_greedy

    enc, lens = encoded
    got = greedy_search(ours, enc, lens, blank_penalty=1.5)
    r, r_lens = ref_encoded[0]
    with torch.no_grad():
        want = icefall_greedy(reference.model, r, r_lens, blank_penalty=1.5, return_timestamps=True)
    assert (got.tokens[0], got.frames[0]) == (want.hyps[0], want.timestamps[0])
    assert got.tokens[0] != greedy_search(ours, enc, lens).tokens[0]


def test_modified_beam_search_matches_icefall(ours, reference, encoded, ref_encoded):
    from zipformer.decode.search import modified_beam_search as icefall_beam

    enc, lens = encoded
    got = modified_beam_search(ours, enc, lens, beam=4)
    greedy = greedy_search(ours, enc, lens)
    for i, (r, r_lens) in enumerate(ref_encoded):
        with torch.no_grad():
            want = icefall_beam(reference.model, r, r_lens, beam=4, return_timestamps=True)
        assert got.tokens[i] == want.hyps[0], i
        assert got.frames[i] == want.timestamps[0], i
    assert got.tokens != greedy.tokens, "beam 4 should differ from greedy somewhere on these heads"


def test_batch_equals_each_alone(ours, features, encoded):
    enc, lens = encoded
    batch_greedy = greedy_search(ours, enc, lens)
    batch_beam = modified_beam_search(ours, enc, lens, beam=3)
    for i in range(enc.shape[0]):
        n = int(lens[i])
        one = enc[i : i + 1, :n]
        one_lens = torch.tensor([n])
        g = greedy_search(ours, one, one_lens)
        b = modified_beam_search(ours, one, one_lens, beam=3)
        assert (g.tokens[0], g.frames[0]) == (batch_greedy.tokens[i], batch_greedy.frames[i])
        assert (b.tokens[0], b.frames[0]) == (batch_beam.tokens[i], batch_beam.frames[i])


def test_beam_one_is_greedy(ours, encoded):
    enc, lens = encoded
    assert modified_beam_search(ours, enc, lens, beam=1).tokens == greedy_search(ours, enc, lens).tokens


def test_bad_search_arguments(ours, encoded):
    enc, lens = encoded
    with pytest.raises(ValueError, match="max_sym_per_frame"):
        greedy_search(ours, enc, lens, max_sym_per_frame=0)
    with pytest.raises(ValueError, match="beam"):
        modified_beam_search(ours, enc, lens, beam=0)
    with pytest.raises(ValueError, match="enc_lens"):
        greedy_search(ours, enc, lens + 1000)
    with pytest.raises(ValueError, match=r"\(B, T, D\)"):
        greedy_search(ours, enc[0], lens)


class _IcefallGraph:
    """icefall's ContextGraph behind the search's biasing interface."""

    def __init__(self, graph):
        self.graph = graph

    def initial(self):
        return self.graph.root

    def advance(self, state, token):
        score, state, _ = self.graph.forward_one_step(state, token, strict_mode=False)
        return score, state


def test_hotword_biasing_matches_icefall(ours, reference, encoded, ref_encoded):
    from zipformer.decode.context_graph import ContextGraph
    from zipformer.decode.search import modified_beam_search as icefall_beam

    enc, lens = encoded
    plain = modified_beam_search(ours, enc, lens, beam=4)
    # Phrases from symbols the model emits, and one it rarely does.
    seen = [t for row in plain.tokens for t in row]
    phrases = [[seen[0], seen[1]], [seen[-1]], [11, 12, 13]]
    graph = ContextGraph(context_score=1.5)
    graph.build(token_ids=phrases, scores=[0.0, 3.0, 0.0])
    got = modified_beam_search(ours, enc, lens, beam=4, context_graph=_IcefallGraph(graph))
    for i, (r, r_lens) in enumerate(ref_encoded):
        with torch.no_grad():
            want = icefall_beam(reference.model, r, r_lens, beam=4, context_graph=graph, return_timestamps=True)
        assert got.tokens[i] == want.hyps[0], i
        assert got.frames[i] == want.timestamps[0], i
    assert got.tokens != plain.tokens, "the boosts should change some hypothesis"


def test_predictor_state_contract(ours):
    p = ours.predictor
    assert p.label_window_state
    state = p.init_state(3, "cpu")
    moved = p.advance(state, torch.tensor([5, 6, 7]), torch.tensor([True, False, True]))
    assert moved.tolist() == [[0, 5], [-1, 0], [0, 7]]
    parts = p.unstack_states(moved)
    assert [x.tolist() for x in parts] == [[[0, 5]], [[-1, 0]], [[0, 7]]]
    assert torch.equal(p.stack_states(parts), moved)
