"""The ``llm`` strategy over the tiny speech-LLM: option validation, greedy decoding
against a cache-free reference, continuous batching (requests joining a running
decode, finished rows leaving), abort, cancellation from ``on_token``, pool growth,
and the async engine."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from oasr.engine import ASREngine
from oasr.engine.async_engine import AsyncEngine
from oasr.engine.decode.base import Request, RequestCancelled
from oasr.engine.decode.llm import LlmDecodeStrategy
from tests.engine.llm.conftest import make_loaded


@pytest.fixture(scope="module")
def engine(loaded):
    return ASREngine(loaded, max_batch_size=3)


def _tokens(out) -> list[int]:
    return out.segments[0].tokens if out.segments else []


def reference_greedy(loaded, strategy, audio, max_new: int, language: str | None) -> list[int]:
    """Greedy tokens recomputing the whole sequence every step (no K/V pool)."""
    model = loaded.model
    feats, n_frames = strategy.prepare(Request("ref", audio, None)).features
    with torch.no_grad():
        states, n_audio = model.encode_offline(feats[None].to(model.compute_dtype), torch.tensor([n_frames]))
        ids = torch.tensor([model.prompt_ids(int(n_audio[0]), language=language, context=None, task="transcribe")])
        valid = torch.ones_like(ids, dtype=torch.bool)
        x = model.embed_prompt(ids, valid, states, n_audio)
        out: list[int] = []
        for _ in range(max_new):
            hidden = model.decoder.forward_hidden(x, torch.ones(x.shape[:2], dtype=torch.bool))
            tok = int(model.decoder.logits(hidden[0, -1]).argmax())
            if tok in model.stop_ids:
                break
            out.append(tok)
            x = torch.cat([x, model.decoder.embed(torch.tensor([[tok]]))], dim=1)
    return out


def test_validate_resolves_and_refuses(engine):
    assert engine.make_options(language="EN").language == "en"
    assert engine.make_options(language="french").language == "fr"
    assert engine.make_options(language="auto").language is None
    assert engine.make_options(language="").language is None
    with pytest.raises(ValueError, match="language 'xx' is not a language of TinySpeechLlm; it has: en \\(English\\)"):
        engine.make_options(language="xx")
    with pytest.raises(ValueError, match="task='translate'"):
        engine.make_options(task="translate")
    for opt in ("initial_prompt", "prefix", "hotwords"):
        with pytest.raises(ValueError, match="context="):
            engine.make_options(**{opt: "some words"})
    with pytest.raises(ValueError, match="word_timestamps"):
        engine.make_options(word_timestamps=True)
    with pytest.raises(ValueError, match="top_p"):
        engine.make_options(top_p=0.0)
    with pytest.raises(ValueError, match="top_k"):
        engine.make_options(top_k=-1)
    assert engine.make_options(context="names: Ada").context == "names: Ada"


def test_greedy_equals_a_cache_free_reference(loaded, engine, clips):
    for i, language in ((0, "en"), (3, None)):
        out = engine.transcribe(clips[i], max_new_tokens=20, language=language)
        expected = reference_greedy(loaded, engine.strategy, clips[i], 20, language)
        assert _tokens(out) == expected and len(expected) > 3
    # The context goes into the prompt: it changes what the model reads.
    plain = _tokens(engine.transcribe(clips[0], max_new_tokens=20, language="en"))
    biased = _tokens(engine.transcribe(clips[0], max_new_tokens=20, language="en", context="hello world test"))
    assert plain != biased


def _drain(strategy, events=None):
    outputs = {}
    while strategy.num_unfinished():
        for ev in strategy.step():
            if events is not None:
                events.append(ev)
            if ev.kind == "finished":
                outputs[ev.request_id] = ev.output
            assert ev.kind != "error", ev.error
    return outputs


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "fixed-shape-steps"])
def test_continuous_batching_matches_solo_decodes(loaded, clips, graphs):
    """Also with the fixed-shape steps CUDA graphs record (run uncaptured on a CPU): rows
    padded to a bucket, keys to a rounded extent, the same tokens as eager solo decodes."""
    solo_engine = ASREngine(loaded, max_batch_size=1)
    budgets = [6, 14, 9, 20, 11]
    languages = ["en", None, "French", None, "English"]
    solo = [
        _tokens(solo_engine.transcribe(c, max_new_tokens=n, language=lang))
        for c, n, lang in zip(clips, budgets, languages)
    ]
    engine = ASREngine(loaded, max_batch_size=3, step_graphs=graphs)
    strategy = engine.strategy
    requests = []
    for i, (c, n, lang) in enumerate(zip(clips, budgets, languages)):
        opts = engine.make_options(max_new_tokens=n, language=lang)
        requests.append(strategy.prepare(Request(f"r{i}", c, opts)))
    # Two start; after a few steps three more arrive: one joins the running batch, the
    # others wait for rows that finished requests free.
    strategy.add_request(requests[0])
    strategy.add_request(requests[1])
    outputs = {}
    for _ in range(3):
        for ev in strategy.step():
            assert ev.kind != "finished"
    assert strategy.stats()["running_rows"] == 2
    for r in requests[2:]:
        strategy.add_request(r)
    strategy.step()
    assert strategy.stats()["running_rows"] == 3 and strategy.stats()["waiting_tasks"] == 2
    outputs.update(_drain(strategy))
    assert [_tokens(outputs[f"r{i}"]) for i in range(5)] == solo
    assert strategy.stats()["joins_running"] >= 3
    assert strategy.batch.pool is None  # released when idle
    assert strategy.stats().get("step_graph_eager", 0) > 0 if graphs else "step_graph_eager" not in strategy.stats()


def test_abort_frees_rows_at_once(loaded, clips):
    engine = ASREngine(loaded, max_batch_size=2)
    strategy = engine.strategy
    solo = _tokens(ASREngine(loaded, max_batch_size=1).transcribe(clips[1], max_new_tokens=12, language="en"))
    opts_long = engine.make_options(max_new_tokens=40, language="en")
    opts = engine.make_options(max_new_tokens=12, language="en")
    strategy.add_request(strategy.prepare(Request("long", clips[0], opts_long)))
    strategy.add_request(strategy.prepare(Request("keep", clips[1], opts)))
    strategy.add_request(strategy.prepare(Request("queued", clips[2], opts)))
    strategy.step()
    strategy.step()
    assert strategy.stats()["running_rows"] == 2 and strategy.stats()["waiting_tasks"] == 1
    assert strategy.abort("long")
    assert strategy.stats()["running_rows"] == 1
    assert strategy.abort("queued") and strategy.stats()["waiting_tasks"] == 0
    assert not strategy.abort("long")
    outputs = _drain(strategy)
    assert list(outputs) == ["keep"] and _tokens(outputs["keep"]) == solo


def test_on_token_cancels(engine, clips):
    seen: list[str] = []

    def on_token(delta: str):
        seen.append(delta)
        return len(seen) < 3

    with pytest.raises(RequestCancelled) as info:
        engine.transcribe(clips[0], language="en", max_new_tokens=50, on_token=on_token)
    assert len(seen) == 3 and info.value.partial_text == "".join(seen)
    assert engine.strategy.num_unfinished() == 0 and engine.strategy.stats()["running_rows"] == 0
    # transcribe_iter: the callback gets the input index; a cancelled input ends with the
    # exception, the others finish.
    calls: list[int] = []

    def stop_first(index: int, delta: str):
        calls.append(index)
        return index != 0

    results = dict(
        engine.transcribe_iter(clips[:3], on_token=stop_first, return_exceptions=True, language="en", max_new_tokens=10)
    )
    assert isinstance(results[0], RequestCancelled)
    assert results[1].text and results[2].text and {1, 2} <= set(calls)
    with pytest.raises(ValueError, match="transcribe_iter"):
        engine.transcribe(clips[:2], on_token=print)


def test_pool_grows_with_running_rows(loaded, clips):
    engine = ASREngine(loaded, max_batch_size=2)
    strategy = engine.strategy
    solo = ASREngine(loaded, max_batch_size=1)
    short = engine.make_options(max_new_tokens=30, language="en")
    long = engine.make_options(max_new_tokens=300, language="en")
    strategy.add_request(strategy.prepare(Request("a", clips[4], short)))
    strategy.step()
    first_len = strategy.batch.pool.max_len
    strategy.add_request(strategy.prepare(Request("b", clips[3], long)))
    outputs = _drain(strategy)
    assert strategy.counters.pool_grows == 1 and first_len < 300
    assert _tokens(outputs["a"]) == _tokens(solo.transcribe(clips[4], max_new_tokens=30, language="en"))
    assert _tokens(outputs["b"]) == _tokens(solo.transcribe(clips[3], max_new_tokens=300, language="en"))


def test_context_limit_caps_and_refuses(tokenizer, clips):
    engine = ASREngine(make_loaded(tokenizer), max_batch_size=2)
    # max_position_embeddings is 512: a 2-s clip is ~50 audio states plus ~25 prompt
    # tokens, so max_new_tokens is capped to what the context has left.
    out = engine.transcribe(clips[3], max_new_tokens=5000, language="en")
    n_audio = len(clips[3]) // 160 // 4
    prompt_len = len(engine.model.prompt_ids(n_audio, language="en", context=None, task="transcribe"))
    assert len(_tokens(out)) == 512 - prompt_len
    long_audio = np.tile(clips[3], 12)  # 24 s: 600 audio states do not fit
    with pytest.raises(ValueError, match="context"):
        engine.transcribe(long_audio, language="en")


def test_strategy_is_registered(loaded):
    engine = ASREngine(loaded)
    assert isinstance(engine.strategy, LlmDecodeStrategy)


def test_async_engine_batches_concurrent_requests(loaded, clips):
    solo = ASREngine(loaded, max_batch_size=1)
    settings = [dict(max_new_tokens=n, language=lang) for n, lang in ((8, "en"), (15, None), (5, "fr"), (12, "en"))]
    expected = [_tokens(solo.transcribe(c, **s)) for c, s in zip(clips, settings)]
    engine = AsyncEngine(loaded, max_batch_size=4)

    async def run():
        return await asyncio.gather(*(engine.transcribe(c, engine.make_options(**s)) for c, s in zip(clips, settings)))

    try:
        outs = asyncio.run(run())
    finally:
        engine.shutdown()
    assert [_tokens(o) for o in outs] == expected


def test_prefill_groups_by_length_under_the_mask_budget(loaded, clips, monkeypatch):
    import oasr.engine.decode.llm as llm

    settings = dict(max_new_tokens=10, language="en")
    expected = [_tokens(o) for o in ASREngine(loaded, max_batch_size=5).transcribe(clips, **settings)]
    monkeypatch.setattr(llm, "PREFILL_MASK_BUDGET", 2 * 60 * 60)  # at most two ~60-token prompts per group
    engine = ASREngine(loaded, max_batch_size=5)
    outs = engine.transcribe(clips, **settings)
    assert [_tokens(o) for o in outs] == expected
    assert engine.strategy.counters.prefills >= 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-graph capture needs a GPU")
def test_recorded_steps_on_cuda_give_the_eager_tokens(tokenizer, clips):
    loaded = make_loaded(tokenizer, dtype=torch.float32)
    loaded.model.to("cuda")
    budgets = [6, 14, 9, 20, 11]
    results = {}
    for graphs in (False, None):  # None: recorded automatically on CUDA
        engine = ASREngine(loaded, device="cuda", max_batch_size=3, step_graphs=graphs)
        outs = [engine.transcribe(c, max_new_tokens=n, language="en") for c, n in zip(clips, budgets)]
        results[graphs] = [_tokens(o) for o in outs]
        if graphs is None:
            assert engine.strategy.stats()["step_graph_replays"] > 0
    assert results[None] == results[False]
