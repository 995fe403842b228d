"""The sampling chain of the ``llm`` strategy: its order against a hand computation and
against transformers' logits processors, and its properties through the engine
(same seed -> same tokens, top_k=1 == greedy, temperature <= 0 == greedy, repetition
penalty 1.0 is a no-op)."""

from __future__ import annotations

import math

import pytest
import torch

from oasr.engine import ASREngine
from oasr.engine.decode.logits import (
    SamplingParams,
    apply_repetition_penalty,
    choose_token,
    draw,
    sampling_probs,
)
from tests.engine.llm.conftest import make_loaded

N_NEW = 16


def test_chain_order_matches_a_hand_computation():
    logits = torch.tensor([2.0, 1.0, -1.0, 0.5, -3.0])
    seen = torch.tensor([0, 2])
    params = SamplingParams(temperature=0.5, top_k=3, top_p=0.9, repetition_penalty=2.0)
    # 1. repetition penalty on ids 0 and 2: 2.0 / 2 = 1.0, -1.0 * 2 = -2.0
    penalised = [1.0, 1.0, -2.0, 0.5, -3.0]
    # 2. temperature 0.5
    tempered = [x / 0.5 for x in penalised]  # [2, 2, -4, 1, -6]
    # 3. top-k 3 keeps the scores >= the third highest (1.0): ids 0, 1, 3
    kept = [0, 1, 3]
    # 4. top-p 0.9 over what top-k kept: ascending cumulative probabilities; a token is
    #    removed when its cumulative probability is <= 1 - 0.9
    z = sum(math.exp(tempered[i]) for i in kept)
    p = {i: math.exp(tempered[i]) / z for i in kept}
    assert p[3] > 1 - 0.9  # id 3 (the least likely kept) survives top-p
    expected = [p.get(i, 0.0) for i in range(5)]
    got = sampling_probs(logits, seen, params)
    assert torch.allclose(got.double(), torch.tensor(expected, dtype=torch.float64), atol=1e-6)
    # With top_p 0.8 the cumulative probability of id 3 (0.155) is <= 0.2: only ids 0 and 1 stay.
    tight = sampling_probs(logits, seen, SamplingParams(0.5, 3, 0.8, 2.0))
    assert torch.allclose(tight, torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0]), atol=1e-6)
    # Temperature before top-p matters: at temperature 2 the same top-p keeps id 3 as well.
    hot = sampling_probs(logits, seen, SamplingParams(2.0, 3, 0.8, 2.0))
    assert hot[3] > 0 and hot[2] == 0 and hot[4] == 0


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p", "penalty"),
    [(1.0, 0, 1.0, 1.0), (0.7, 5, 1.0, 1.3), (1.3, 0, 0.6, 1.0), (0.5, 12, 0.9, 0.8), (1.0, 1, 0.5, 2.0)],
)
def test_chain_matches_transformers_processors(temperature, top_k, top_p, penalty):
    transformers = pytest.importorskip("transformers")
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(1, 64, generator=g) * 3
    seen = torch.randint(0, 64, (1, 10), generator=g)
    procs = transformers.LogitsProcessorList()
    if penalty != 1.0:
        procs.append(transformers.RepetitionPenaltyLogitsProcessor(penalty))
    procs.append(transformers.TemperatureLogitsWarper(temperature))
    if top_k:
        procs.append(transformers.TopKLogitsWarper(top_k))
    if top_p < 1.0:
        procs.append(transformers.TopPLogitsWarper(top_p))
    expected = procs(seen, logits.clone()).softmax(-1)[0]
    got = sampling_probs(logits[0], seen[0], SamplingParams(temperature, top_k, top_p, penalty))
    assert torch.allclose(got, expected, atol=1e-6)


def test_repetition_penalty_and_draw_units():
    scores = torch.tensor([3.0, -2.0, 1.0])
    assert torch.equal(apply_repetition_penalty(scores, torch.tensor([0, 1]), 1.0), scores)
    assert apply_repetition_penalty(scores, torch.tensor([0, 1]), 2.0).tolist() == [1.5, -4.0, 1.0]
    # Zero-probability ids are never drawn; the draw follows the generator.
    probs = torch.tensor([0.0, 0.3, 0.0, 0.7, 0.0])
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = [draw(probs, g1) for _ in range(200)]
    b = [draw(probs, g2) for _ in range(200)]
    assert a == b and set(a) == {1, 3}
    assert 0.55 < a.count(3) / len(a) < 0.85
    # Greedy is the argmax after the penalty.
    assert (
        choose_token(torch.tensor([3.0, 2.0]), torch.tensor([0]), SamplingParams(0.0, repetition_penalty=2.0), None)
        == 1
    )


@pytest.fixture(scope="module")
def engine(loaded):
    return ASREngine(loaded, max_batch_size=4)


def _tokens(out) -> list[int]:
    return out.segments[0].tokens if out.segments else []


def test_same_seed_same_tokens_and_batch_independent(engine, clips):
    opts = dict(max_new_tokens=N_NEW, temperature=1.0, language="en")
    a = _tokens(engine.transcribe(clips[0], seed=7, **opts))
    b = _tokens(engine.transcribe(clips[0], seed=7, **opts))
    c = _tokens(engine.transcribe(clips[0], seed=8, **opts))
    greedy = _tokens(engine.transcribe(clips[0], max_new_tokens=N_NEW, temperature=0.0, language="en"))
    assert a == b and len(a) == N_NEW
    assert a != c and a != greedy  # the seed and the sampling matter
    # The same request in a batch with others (same seed for all: each has its own generator).
    batched = engine.transcribe([clips[1], clips[0], clips[2]], seed=7, **opts)
    assert _tokens(batched[1]) == a


def test_greedy_equivalences(engine, clips):
    base = dict(max_new_tokens=N_NEW, language="en")
    greedy = _tokens(engine.transcribe(clips[3], temperature=0.0, **base))
    assert len(greedy) == N_NEW
    # The TranscribeOptions default (the fallback tuple) and any sequence take the first value.
    assert _tokens(engine.transcribe(clips[3], **base)) == greedy
    assert _tokens(engine.transcribe(clips[3], temperature=(0.0, 0.6), **base)) == greedy
    # top_k=1 at any temperature, and whatever the seed.
    for seed in (0, 1, 2):
        assert _tokens(engine.transcribe(clips[3], temperature=1.5, top_k=1, seed=seed, **base)) == greedy
    # Repetition penalty 1.0 is a no-op; a strong one changes a repetitive decode.
    assert _tokens(engine.transcribe(clips[3], repetition_penalty=1.0, temperature=0.0, **base)) == greedy
    penalised = _tokens(engine.transcribe(clips[3], repetition_penalty=5.0, temperature=0.0, **base))
    assert penalised != greedy


def test_checkpoint_decoding_defaults_apply(tokenizer, clips):
    """DecodingSpec defaults (a generation_config) fill the options left at their defaults."""
    sampled = ASREngine(make_loaded(tokenizer, decoding={"temperature": 1.0, "max_new_tokens": 5}), max_batch_size=2)
    a = _tokens(sampled.transcribe(clips[0], language="en", seed=3))
    b = _tokens(sampled.transcribe(clips[0], language="en", seed=3))
    greedy = _tokens(sampled.transcribe(clips[0], language="en", temperature=0.0))
    assert len(a) == 5 and a == b
    assert a != greedy or _tokens(sampled.transcribe(clips[0], language="en", seed=4)) != greedy
    assert len(_tokens(sampled.transcribe(clips[0], language="en", max_new_tokens=3))) == 3
