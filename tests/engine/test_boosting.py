"""The phrase-boosting tree (``oasr.engine.decode.boosting``): its weights worked out by hand from
NeMo's rules, and its scores against NeMo's own ``GPUBoostingTreeModel`` over random phrase sets
and every knob (skipped where ``nemo-toolkit`` is not installed)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from oasr.engine.decode.boosting import ROOT, BoostingConfig, BoostingTree


def _walk(tree: BoostingTree, tokens: list[int]) -> tuple[list[float], int]:
    """The score of each token along ``tokens`` from the root, and the state reached."""
    state, scores = tree.initial(1), []
    for token in tokens:
        s, nxt = tree.advance(state)
        scores.append(float(s[0, token]))
        state = nxt[:, token]
    return scores, int(state[0])


def test_a_phrase_is_paid_token_by_token_and_a_broken_match_gives_its_bonus_back():
    tree = BoostingTree([[1, 2, 3]], vocab_size=8, config=BoostingConfig(context_score=1.0, depth_scaling=2.0))
    first, second, third = 1.0, 2.0 + math.log(2), 2.0 + math.log(3)
    scores, end = _walk(tree, [1, 2, 3])
    assert scores == pytest.approx([first, second, third])
    broken, state = _walk(tree, [1, 2, 5])
    assert broken[-1] == pytest.approx(-(first + second)) and state == ROOT  # the partial bonus given back
    after, _ = _walk(tree, [1, 2, 3, 5])
    assert after[-1] == 0.0  # a complete phrase keeps its bonus
    assert float(tree.final(torch.tensor([end]))[0]) == 1.0 and float(tree.final(torch.tensor([ROOT]))[0]) == 0.0
    restart, _ = _walk(tree, [1, 1, 2])  # a failed 1 -> 1 falls back to the prefix "1"
    assert restart == pytest.approx([first, 0.0, second])


def test_unk_score_weighs_tokens_that_start_no_phrase_and_bad_phrases_are_refused():
    tree = BoostingTree([[4]], vocab_size=6, config=BoostingConfig(unk_score=-0.5))
    scores, _ = tree.advance(tree.initial(1))
    assert scores[0].tolist() == [-0.5, -0.5, -0.5, -0.5, 1.0, -0.5]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        BoostingTree([[6]], vocab_size=6)
    with pytest.raises(ValueError, match="no tokens"):
        BoostingTree([[]], vocab_size=6)
    with pytest.raises(ValueError, match="no phrase"):
        BoostingTree.from_phrases([], lambda text: [1], 6)
    with pytest.raises(ValueError, match="depth_scaling must be a finite number"):
        BoostingConfig(depth_scaling=float("nan"))


def test_scores_and_next_states_equal_nemos_boosting_tree():
    pytest.importorskip("nemo.collections.asr", reason="nemo-toolkit is not installed (the reference tree)")
    from nemo.collections.asr.parts.context_biasing.boosting_graph_batched import GPUBoostingTreeModel
    from nemo.collections.asr.parts.context_biasing.context_graph_universal import ContextGraph

    vocab, compared = 12, 0
    for seed in range(8):
        rng = random.Random(seed)
        texts = list(dict.fromkeys("x" * rng.randint(1, 9) + str(i) for i in range(rng.randint(1, 6))))
        phrases = [[rng.randrange(vocab) for _ in range(rng.randint(1, 5))] for _ in texts]
        config = BoostingConfig(
            context_score=rng.choice([1.0, 0.5, 2.0]),
            depth_scaling=rng.choice([2.0, 1.0, 1.5]),
            unk_score=rng.choice([0.0, -0.5]),
            score_per_phrase=0.0 if seed % 3 else 3.0,
            uniform_weights=seed % 2 == 1,
        )
        # NeMo's from_config steps on token ids: the context graph, then the GPU tree
        graph = ContextGraph(context_score=config.context_score, depth_scaling=config.depth_scaling)
        own = [round(config.score_per_phrase / len(t), 2) for t in texts]
        graph.build(token_ids=phrases, scores=own, phrases=texts, uniform_weights=config.uniform_weights)
        ref = GPUBoostingTreeModel.from_context_graph(
            graph,
            vocab_size=vocab,
            unk_score=config.unk_score,
            final_eos_score=config.final_eos_score,
            use_triton=False,
            uniform_weights=config.uniform_weights,
        )
        tree = BoostingTree(phrases, vocab, config, texts)
        for _ in range(8):  # random walks, mostly along the phrases
            want_state, state = torch.tensor([ref.bos_state]), tree.initial(1)
            for step in range(10):
                want, want_next = ref.advance(want_state)
                got, got_next = tree.advance(state)
                assert torch.equal(got, want), (seed, step)
                assert torch.equal(tree.final(state), ref.get_final(want_state))
                token = rng.choice([rng.randrange(vocab)] + [p[step % len(p)] for p in phrases])
                want_state, state = want_next[:, token], got_next[:, token]
                compared += 1
    assert compared == 8 * 8 * 10
