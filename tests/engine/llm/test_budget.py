"""The ``llm`` strategy's token budget and seeds.

* Without ``max_new_tokens``, the budget follows the audio: a 30-s recording whose transcript
  runs past the 512 tokens every request used to be cut at is written to its end; a short clip
  stops at its (smaller) budget and says so (``finish_reason="length"``). A checkpoint's declared
  ``max_new_tokens`` is the default instead, as transformers' ``generate`` uses it.
* The K/V pool holds what the rows use, not their whole budgets.
* Without a seed, sampled requests are independent draws; with one, they replay.

The scripted LM (``ScriptedLm``) writes a known token script, so the expected transcript is
known exactly.
"""

from __future__ import annotations

import pytest
import torch

from oasr.engine import ASREngine
from oasr.engine.decode.base import Request
from tests.engine.llm.conftest import SPECIALS, clip, make_loaded

LONG_S = 30.0
N_TEXT = 600  # more than the 512 tokens main capped every request at


def _tokens(out) -> list[int]:
    return out.segments[0].tokens if out.segments else []


@pytest.fixture(scope="module")
def script(tokenizer) -> list[int]:
    """``N_TEXT`` ordinary text tokens, then <|im_end|> (a stop id)."""
    words = tokenizer.encode_text(" hello world, this is a test of the tiny model.")
    specials = {tokenizer.token_to_id(t) for t in SPECIALS}
    assert words and not specials & set(words)
    text = (words * (N_TEXT // len(words) + 1))[:N_TEXT]
    return text + [tokenizer.token_to_id("<|im_end|>")]


@pytest.fixture(scope="module")
def scripted(tokenizer, script):
    return make_loaded(tokenizer, script=script, context=2048)


def test_a_long_recording_is_written_to_its_end(scripted, script):
    engine = ASREngine(scripted)
    out = engine.transcribe(clip(LONG_S, 1), language="en")
    assert _tokens(out) == script[:-1]
    assert out.finish_reason == "stop"
    assert engine.strategy.counters.pool_grows >= 2  # the pool grew with the transcript


def test_a_pool_that_grows_mid_decode_gives_the_eager_tokens_to_recorded_steps(tokenizer):
    """The fixed-shape steps CUDA graphs record (run uncaptured on a CPU) belong to one pool: a
    pool that grows under a running decode gets new ones, and the tokens stay the eager ones."""
    loaded = make_loaded(tokenizer, context=2048, dtype=torch.float32)
    opts = dict(language="en", max_new_tokens=300, repetition_penalty=1.3)  # the penalty keeps it talking
    runs = []
    for graphs in (False, True):
        engine = ASREngine(loaded, step_graphs=graphs, max_batch_size=2)
        runs.append((_tokens(engine.transcribe(clip(20.0, 4), **opts)), engine.strategy.counters.pool_grows))
    (eager, grows), (recorded, _) = runs
    assert recorded == eager and grows >= 1 and len(eager) > 256


def test_a_budget_that_cuts_says_length(scripted, script):
    engine = ASREngine(scripted)
    short = engine.transcribe(clip(1.0, 2), language="en")  # one second does not take 600 tokens
    assert 0 < len(_tokens(short)) < N_TEXT and _tokens(short) == script[: len(_tokens(short))]
    assert short.finish_reason == "length"
    given = engine.transcribe(clip(1.0, 2), language="en", max_new_tokens=N_TEXT + 5)
    assert _tokens(given) == script[:-1] and given.finish_reason == "stop"
    exact = engine.transcribe(clip(1.0, 2), language="en", max_new_tokens=N_TEXT)
    assert _tokens(exact) == script[:-1] and exact.finish_reason == "length"  # the stop id did not fit


def test_the_checkpoint_s_declared_budget_is_the_default(tokenizer, script):
    loaded = make_loaded(tokenizer, script=script, context=2048, decoding={"max_new_tokens": 40})
    engine = ASREngine(loaded)
    out = engine.transcribe(clip(LONG_S, 1), language="en")
    assert _tokens(out) == script[:40] and out.finish_reason == "length"
    assert engine.transcribe(clip(LONG_S, 1), language="en", max_new_tokens=N_TEXT + 1).finish_reason == "stop"


def test_the_pool_holds_what_the_rows_use(tokenizer):
    """A request that stops after a few tokens never reserves its whole (30-s) budget."""
    few = tokenizer.encode_text(" hello world") + [tokenizer.token_to_id("<|im_end|>")]
    engine = ASREngine(make_loaded(tokenizer, script=few, context=2048), max_batch_size=2)
    strategy = engine.strategy
    request = strategy.prepare(Request("r", clip(LONG_S, 1), engine.make_options(language="en")))
    strategy.add_request(request)
    lengths = []
    while strategy.num_unfinished():
        strategy.step()
        if strategy.batch.pool is not None:
            lengths.append(strategy.batch.pool.max_len)
    n_audio = int(request.features[1]) // 4
    prompt = len(engine.model.prompt_ids(n_audio, language="en", context=None, task="transcribe"))
    budget = strategy.token_budget(request.options, LONG_S)
    assert budget > 512  # the 30-s budget
    assert max(lengths) < prompt + budget


def test_requests_without_a_seed_are_independent_draws(loaded, clips):
    """At temperature 2 the tiny LM's next-token distribution is flat enough that three independent
    draws of up to 40 tokens all agree with negligible probability (a draw may sample the end token
    early, so lengths are not asserted); the same seed replays."""
    engine = ASREngine(loaded)
    opts = dict(language="en", temperature=2.0, max_new_tokens=40)
    draws = {tuple(_tokens(engine.transcribe(clips[3], **opts))) for _ in range(3)}
    assert len(draws) > 1, "unseeded requests replayed the same sample"
    c, d = (_tokens(engine.transcribe(clips[3], seed=11, **opts)) for _ in range(2))
    assert c == d and len(c) == 40


def test_a_seed_is_a_64_bit_integer(loaded, clips):
    import numpy as np

    engine = ASREngine(loaded)
    for bad in (True, 1.5, "7", 2**63):
        with pytest.raises(ValueError, match="seed must be an integer in"):
            engine.transcribe(clips[0], seed=bad, temperature=1.0, max_new_tokens=4)
    opts = dict(language="en", temperature=2.0, max_new_tokens=12)
    assert _tokens(engine.transcribe(clips[3], seed=np.int64(-5), **opts)) == _tokens(
        engine.transcribe(clips[3], seed=-5, **opts)
    )


def test_a_vad_chunked_request_is_length_when_a_chunk_is(tokenizer, audio_dir):
    pytest.importorskip("silero_vad")
    few = tokenizer.encode_text(" hello world") + [tokenizer.token_to_id("<|im_end|>")]
    engine = ASREngine(make_loaded(tokenizer, script=few, context=2048))
    jfk = str(audio_dir / "jfk.wav")
    whole = engine.transcribe(jfk, vad_filter=True, language="en")
    assert whole.finish_reason == "stop" and whole.text
    cut = engine.transcribe(jfk, vad_filter=True, language="en", max_new_tokens=len(few) - 2)
    assert cut.finish_reason == "length" and len(cut.text) < len(whole.text)
