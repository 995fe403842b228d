"""The recorded-step path (``oasr.models.decoders.graphs``) against the eager step.

On a CPU ``StepGraphs`` runs the fixed-shape steps it would record on a GPU (rows
padded to a bucket, keys attended to a rounded extent): they must give the eager
step's logits and K/V, through joins, beams, row removal and irregular groups, and the
engine's transcripts must not change. With CUDA, recorded and replayed steps are
compared with eager ones too (skipped without a GPU).
"""

from __future__ import annotations

import math

import pytest
import torch

from oasr.models.decoders.graphs import StepGraphs, bucket_rows, step_graphs_for


def test_row_buckets():
    assert [bucket_rows(n) for n in (1, 2, 3, 4, 5, 8, 9, 16, 17, 63, 64)] == [1, 2, 4, 4, 8, 8, 16, 16, 24, 64, 64]


def _prefill(decoder, pool, prompts, memory, row_group=None):
    lens = [len(p) for p in prompts]
    tokens = torch.zeros(len(prompts), max(lens), dtype=torch.long)
    for i, p in enumerate(prompts):
        tokens[i, : len(p)] = torch.tensor(p)
    return decoder.prefill(pool, tokens, torch.tensor(lens), memory=memory, row_group=row_group)


def _twin_runs(decoder, memory, prompts, *, max_rows, row_group=None, extent_step=4):
    """Two identical pools/states prefilled alike: one stepped eagerly, one through StepGraphs."""
    groups = memory.shape[0]
    pools = [decoder.new_pool(max_rows, groups) for _ in range(2)]
    states = [_prefill(decoder, p, prompts, memory, row_group)[1] for p in pools]
    graphs = StepGraphs(decoder, capture=False, extent_step=extent_step)
    return pools, states, graphs


def _rounding_tol(ref: torch.Tensor, depth: int, margin: float = 8.0) -> float:
    """How far two float computations of ``ref`` may differ when only the order of their sums
    differs (padded rows and rounded key extents change how the GEMMs block their reductions):
    about sqrt(depth) rounding steps of the dtype's epsilon at the magnitude of the values
    compared, with ``margin`` for the layers stacked before it. A bare 1e-5 was a few ulps too
    tight on MKL builds for logits of this size."""
    return margin * torch.finfo(ref.dtype).eps * math.sqrt(depth) * max(1.0, ref.abs().max().item())


def _assert_same_step(decoder, graphs, states, tokens, atol=None):
    eager = decoder.step(states[0], tokens)
    fixed = graphs.step(states[1], tokens)
    assert fixed.shape == eager.shape
    tol = atol if atol is not None else _rounding_tol(eager, decoder.embed_tokens.weight.shape[1])
    torch.testing.assert_close(fixed, eager, atol=tol, rtol=0)
    assert states[0].lengths == states[1].lengths
    assert torch.equal(states[0].lengths_t, states[1].lengths_t)
    return eager


def _assert_same_cache(states):
    a, b = states
    n, r0, t = a.n_rows, a.row0, a.max_length
    for la, lb in zip(a.lengths, b.lengths):
        assert la == lb
    for fixed, eager in ((b.pool.k, a.pool.k), (b.pool.v, a.pool.v)):
        eager = eager[:, r0 : r0 + n, :, :t]
        tol = _rounding_tol(eager, eager.shape[-1] * eager.shape[-3])  # heads x head_dim: the model width
        torch.testing.assert_close(fixed[:, r0 : r0 + n, :, :t], eager, atol=tol, rtol=0)


@pytest.fixture(scope="module")
def decoder_and_memory(oasr_hf):
    model = oasr_hf.model
    gen = torch.Generator().manual_seed(0)
    memory = torch.randn(5, model.config.n_audio_ctx, model.config.n_audio_state, generator=gen)
    return model.decoder, memory


def test_fixed_shape_steps_equal_eager_steps(decoder_and_memory):
    """Greedy rows of unequal prompts (3 rows pad to a bucket of 4, then 5 to 8), rows
    leaving, the key extent crossing several rounding steps."""
    decoder, memory = decoder_and_memory
    prompts = [[50258, 50259, 50359], [50258, 50259, 50359, 50363, 440], [50258, 50259, 50359, 50363]]
    pools, states, graphs = _twin_runs(decoder, memory[:3], prompts, max_rows=8)
    gen = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        for step in range(10):
            tokens = torch.randint(0, 50257, (states[0].n_rows,), generator=gen)
            _assert_same_step(decoder, graphs, states, tokens)
            if step == 4:  # the middle row finishes: rows 0 and 2 go on
                states = [decoder.select(s, [0, 2]) for s in states]
        _assert_same_cache(states)
    assert graphs.counters["eager"] == 10  # every step took the fixed-shape path


def test_fixed_shape_steps_with_beams_and_irregular_groups(decoder_and_memory):
    """Two windows x 2 hypotheses (grouped cross-attention), then a reorder that breaks the
    regular layout (the eager step is used and still agrees)."""
    decoder, memory = decoder_and_memory
    prompts = [[50258, 50259, 50359, 50363]] * 2
    pools, states, graphs = _twin_runs(decoder, memory[:2], prompts, max_rows=8)
    states = [decoder.select(s, [0, 0, 1, 1]) for s in states]  # k = 2 hypotheses per window
    gen = torch.Generator().manual_seed(2)
    with torch.inference_mode():
        for _ in range(6):
            _assert_same_step(decoder, graphs, states, torch.randint(0, 50257, (4,), generator=gen))
        fixed_steps = graphs.counters["eager"]
        states = [decoder.select(s, [0, 2, 3]) for s in states]  # groups [0, 1, 1]: irregular
        assert states[0].group_size is None
        _assert_same_step(decoder, graphs, states, torch.randint(0, 50257, (3,), generator=gen))
        _assert_same_cache(states)
    assert fixed_steps == 6 and graphs.counters["eager"] == 7


def test_padding_that_does_not_fit_the_pool_uses_the_exact_size(decoder_and_memory):
    decoder, memory = decoder_and_memory
    prompts = [[50258, 50259, 50359, 50363]] * 3
    pools, states, graphs = _twin_runs(decoder, memory[:3], prompts, max_rows=3)  # a bucket of 4 would overflow
    with torch.inference_mode():
        for _ in range(3):
            _assert_same_step(decoder, graphs, states, torch.tensor([440, 1002, 50257]))
        _assert_same_cache(states)


def test_engine_transcripts_unchanged(oasr_hf, clips):
    """Batched greedy with timestamps and a beam of 2, fixed-shape steps on and off."""
    import oasr

    opts = dict(language="en", max_new_tokens=40, temperature=0.0)
    results = {}
    for on in (False, True):
        engine = oasr.ASREngine(oasr_hf, max_batch_size=4, step_graphs=on)
        greedy = engine.transcribe(clips, beam_size=1, **opts)
        beam = engine.transcribe(clips[:2], beam_size=2, without_timestamps=True, **opts)
        results[on] = [(o.text, [(s.start, s.end) for s in o.segments]) for o in greedy + beam]
        stats = engine.strategy.stats()
        assert ("step_graph_eager" in stats) == on
    assert results[True] == results[False]
    assert all(text for text, _ in results[True])


def test_step_graphs_setting(oasr_hf):
    assert step_graphs_for(oasr_hf.model.decoder, None) is None  # on a CPU: eager unless asked
    assert isinstance(step_graphs_for(oasr_hf.model.decoder, True), StepGraphs)
    from oasr.models.decoders.transformer_decoder import TransformerDecoder, TransformerDecoderConfig

    decoder = TransformerDecoder(TransformerDecoderConfig(vocab_size=10, d_model=8, num_blocks=1, linear_units=8))
    decoder.supports_step_graphs = False
    assert step_graphs_for(decoder, None) is None and step_graphs_for(decoder, False) is None
    with pytest.raises(ValueError, match="cannot be recorded"):
        step_graphs_for(decoder, True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-graph capture needs a GPU")
def test_recorded_steps_replay_the_eager_step(oasr_hf):
    import copy

    decoder = copy.deepcopy(oasr_hf.model.decoder).to("cuda")
    gen = torch.Generator().manual_seed(3)
    memory = torch.randn(4, oasr_hf.model.config.n_audio_ctx, oasr_hf.model.config.n_audio_state, generator=gen)
    prompts = [[50258, 50259, 50359, 50363]] * 3
    pools, states, _ = _twin_runs(decoder, memory[:3].cuda(), prompts, max_rows=8)
    graphs = StepGraphs(decoder, capture=True, extent_step=8)
    with torch.inference_mode():
        for _ in range(12):
            tokens = torch.randint(0, 50257, (3,), generator=gen).cuda()
            _assert_same_step(decoder, graphs, states, tokens, atol=1e-4)
        _assert_same_cache(states)
    assert graphs.counters["recorded"] == 2 and graphs.counters["replays"] == 12


def test_cli_step_graphs_flag_reaches_the_engine_config():
    from oasr.cli.common import engine_extras
    from oasr.cli.main import build_parser

    parser = build_parser()
    assert "step_graphs" not in engine_extras(parser.parse_args(["transcribe", "x.wav"]))
    assert engine_extras(parser.parse_args(["transcribe", "x.wav", "--step-graphs", "on"]))["step_graphs"] is True
    assert engine_extras(parser.parse_args(["serve", "--model", "m", "--step-graphs", "off"]))["step_graphs"] is False
    assert engine_extras(parser.parse_args(["eval", "m.jsonl", "--step-graphs", "auto"]))["step_graphs"] is None
