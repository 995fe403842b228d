"""The streaming scheduler over a real streaming family (WeNet's tiny causal U2++ fixture):
batched streams equal each stream alone, piece sizes do not matter, admission, endpoints,
bad input, and the async engine."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from oasr.engine.decode.base import EngineOverloaded
from oasr.engine.streaming import StreamError
from tests.conftest import AUDIO_DIR, FIXTURES_DIR

CAUSAL = FIXTURES_DIR / "wenet-u2pp-tiny-causal"


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    from oasr.audio import load_audio

    if not (CAUSAL / "train.yaml").is_file():
        pytest.skip(f"fixture not found at {CAUSAL}")
    clips = sorted(AUDIO_DIR.glob("*.wav"))
    if not clips:
        pytest.skip("no data/audio")
    return np.concatenate([load_audio(c) for c in clips[:3]])


@pytest.fixture(scope="module")
def engine(speech):
    from oasr.engine.engine import ASREngine

    return ASREngine(str(CAUSAL), stream_chunk_ms=160, max_streams=16)


def _run_alone(engine, audio: np.ndarray, piece: int, **options):
    stream = engine.open_stream(**options)
    events = []
    for i in range(0, len(audio), piece):
        events += stream.feed(audio[i : i + piece])
    events += stream.finish()
    return stream, events


def _finals(events):
    return [(e.text, e.tokens, e.start, e.end) for e in events if e.type == "final"]


def test_piece_sizes_do_not_change_the_result(engine, speech):
    audio = speech[: 16000 * 6]
    results = []
    for piece in (1601, 592, 16000, len(audio)):  # ~100 ms, 37 ms, 1 s, all at once
        stream, events = _run_alone(engine, audio, piece)
        assert events[-1].type == "done"
        results.append(_finals(events))
    assert results[0] and all(r == results[0] for r in results)


@pytest.mark.parametrize(
    "decode_type, options",
    [("ctc", {}), ("ctc", {"beam_size": 4}), ("ctc_aed_rescoring", {"beam_size": 4})],
    ids=["greedy", "prefix_beam", "rescoring"],
)
def test_sixteen_streams_batched_equal_each_alone(decode_type, options, speech):
    from oasr.engine.engine import ASREngine

    engine = ASREngine(str(CAUSAL), stream_chunk_ms=160, max_streams=16, decode_type=decode_type)
    rng = np.random.default_rng(0)
    lengths = [int(16000 * s) for s in rng.uniform(0.5, 6.0, 16)]
    starts = [int(rng.integers(0, len(speech) - n)) for n in lengths]
    audios = [speech[a : a + n] for a, n in zip(starts, lengths, strict=True)]
    pieces = [int(p) for p in rng.integers(200, 9000, 16)]
    alone = [_finals(_run_alone(engine, a, p, **options)[1]) for a, p in zip(audios, pieces, strict=True)]

    core = engine._streaming()
    streams = []
    fed = [0] * 16
    joined = [3 * i for i in range(16)]  # stream i joins at round 3 i: admitted between steps
    rnd = 0
    while any(not s.done for s in streams) or len(streams) < 16:
        for i in range(16):
            if i == len(streams) and rnd >= joined[i]:
                streams.append(engine.open_stream(**options))
        for i, s in enumerate(streams):
            if fed[i] < len(audios[i]):
                core.push(s.id, audios[i][fed[i] : fed[i] + pieces[i]])
                fed[i] += pieces[i]
                if fed[i] >= len(audios[i]):
                    core.finish(s.id)
        # one batched step per round: every stream with a chunk ready advances together
        for event in core.step():
            engine._open[event.stream_id]._deliver(event)
        rnd += 1
        assert rnd < 10_000
    assert core.steps > 0 and core.chunks_encoded > core.steps  # batches of more than one stream ran
    batched = [_finals(s.events()) for s in streams]
    assert batched == alone
    assert core.runtime.in_use == 0


def test_admission_is_refused_when_every_slot_is_taken(speech):
    from oasr.engine.engine import ASREngine

    engine = ASREngine(str(CAUSAL), stream_chunk_ms=160, max_streams=2)
    a, b = engine.open_stream(), engine.open_stream()
    with pytest.raises(EngineOverloaded):
        engine.open_stream()
    a.close()
    c = engine.open_stream()  # the closed stream's slot is free again
    c.feed(speech[:8000])
    b.finish()
    c.finish()
    assert engine._streaming().runtime.in_use == 0


def test_endpoints_cut_segments_on_the_stream_timeline(engine, speech):
    audio = speech[: 16000 * 8]
    stream, events = _run_alone(engine, audio, 3200, endpoint=True, rule3_min_utterance_length=1.5)
    kinds = [e.type for e in events]
    assert kinds.count("endpoint") >= 3
    finals = [e for e in events if e.type == "final"]
    ends = [e.end for e in events if e.type == "endpoint"]
    assert all(b > a for a, b in zip(ends, ends[1:], strict=False))
    for f in finals:
        assert 0.0 <= f.start <= f.end <= len(audio) / 16000 + 1e-6
    assert [s.text.strip() for s in stream.output.segments] == [f.text for f in finals]
    assert all(b.start >= a.start for a, b in zip(finals, finals[1:], strict=False))


def test_non_finite_samples_are_refused(engine):
    stream = engine.open_stream()
    bad = np.zeros(1600, np.float32)
    bad[7] = np.nan
    with pytest.raises(StreamError, match="NaN"):
        stream.feed(bad)
    stream.close()
    assert engine._streaming().runtime.in_use == 0


def test_a_stream_past_the_longest_audio_fails_alone(speech):
    from oasr.engine.engine import ASREngine

    engine = ASREngine(str(CAUSAL), stream_chunk_ms=160, max_audio_s=1.0)
    long, short = engine.open_stream(), engine.open_stream()
    events = long.feed(speech[:24000])
    assert events[-1].type == "error" and events[-1].code == "audio_too_long"
    short.feed(speech[:8000])
    assert short.finish()[-1].type == "done"


def test_streaming_options_are_checked(engine):
    with pytest.raises(TypeError):
        engine.open_stream(no_such_option=1)
    with pytest.raises(ValueError, match="vad_filter"):
        engine.open_stream(vad_filter=True)
    with pytest.raises(ValueError, match="endpoint"):
        engine.open_stream(endpoint="yes")
    with pytest.raises(ValueError, match="sample_rate"):
        engine.open_stream(sample_rate=1000)


def test_an_offline_ctc_model_streams_by_local_agreement(tmp_path):
    import torch

    from oasr.engine.engine import ASREngine
    from oasr.models.conformer.model import ConformerModel
    from tests.models.conformer._wenet_format import save_wenet_experiment

    torch.manual_seed(0)
    enc = dict(input_dim=80, output_size=32, attention_heads=2, linear_units=64, num_blocks=1, use_dynamic_chunk=False)
    save_wenet_experiment(ConformerModel({"vocab_size": 16, "encoder": enc}), tmp_path, decoder_type=None)
    engine = ASREngine(str(tmp_path))
    assert engine.model.encoder.streaming_kind == "none"
    from oasr.engine.streaming.local_agreement import LocalAgreementCore

    stream = engine.open_stream(min_chunk_s=0.5)  # its CTC decode times words: the policy fits
    assert isinstance(engine._streaming(), LocalAgreementCore)
    stream.feed(np.zeros(16000, np.float32))
    assert engine._streaming().decodes == 1 and stream.finish()[-1].type == "done"
    with pytest.raises(ValueError, match="stream_chunk_ms"):
        ASREngine(engine.loaded, stream_chunk_ms=640).open_stream()


def test_resampled_input_decodes(engine, speech):
    import soxr

    audio = speech[: 16000 * 3]
    at8k = soxr.resample(audio, 16000, 8000)
    _, events = _run_alone(engine, at8k, 800, sample_rate=8000)
    assert events[-1].type == "done"


def test_async_engine_streams(speech):
    from oasr.engine.async_engine import AsyncEngine
    from oasr.engine.engine import ASREngine

    audio = speech[: 16000 * 4]
    sync = ASREngine(str(CAUSAL), stream_chunk_ms=160)
    expected = _finals(_run_alone(sync, audio, 4000)[1])

    async def main():
        engine = AsyncEngine(str(CAUSAL), stream_chunk_ms=160)
        try:
            streams = [await engine.open_stream() for _ in range(3)]
            for i in range(0, len(audio), 4000):
                for s in streams:
                    s.feed(audio[i : i + 4000])
            for s in streams:
                s.finish()
            out = []
            for s in streams:
                events = [e async for e in s]
                out.append(_finals(events))
                assert events[-1].type == "done"
            return out, engine.streaming.core.stats()
        finally:
            engine.shutdown()

    results, stats = asyncio.run(main())
    assert all(r == expected for r in results)
    assert stats["streams_active"] == 0


def test_silero_endpoints_fall_in_the_silence(engine, speech):
    pytest.importorskip("silero_vad")
    first, second = speech[: 16000 * 3], speech[16000 * 3 : 16000 * 6]
    audio = np.concatenate([first, np.zeros(16000 * 3, np.float32), second])
    _, events = _run_alone(engine, audio, 1600, endpoint=True, endpoint_vad=True)
    ends = [e.end for e in events if e.type == "endpoint"]
    assert ends, "no endpoint in 3 s of silence"
    assert any(3.0 < t < 6.0 for t in ends), ends
    assert events[-1].type == "done"
    with pytest.raises(ValueError, match="endpoint=true"):
        engine.open_stream(endpoint_vad=True)


def test_backlog_counts_audio_not_yet_encoded(engine, speech):
    core = engine._streaming()
    stream = engine.open_stream()
    core.push(stream.id, speech[:32000])
    assert core.backlog_s(stream.id) == pytest.approx(2.0)
    engine.run_streams()
    assert core.backlog_s(stream.id) < 0.2  # what is left is less than a window
    stream.close()
    assert core.backlog_s(stream.id) == 0.0


def test_an_engine_with_an_lm_refuses_streams(speech):
    from oasr.engine.engine import ASREngine

    engine = ASREngine(str(CAUSAL), stream_chunk_ms=160)
    engine.config = type(engine.config)(**{**engine.config.__dict__, "lm_path": "/nonexistent.arpa"})
    with pytest.raises(ValueError, match="lm_path"):
        engine.open_stream()


def _finals_with_floats(events):
    """Each final whole: text, tokens, times and every word's probability (exact floats)."""
    return [
        (e.text, e.tokens, e.start, e.end, [(w.word, w.start, w.end, w.probability) for w in e.words or ()])
        for e in events
        if e.type == "final"
    ]


def test_a_streams_floats_do_not_depend_on_the_streams_sharing_its_steps(speech):
    """Word probabilities (and every other float of a final) of a stream decoded alone are
    bit-equal to the same stream's when it shares every step with streams at other points of
    their own audio (other cache lengths, other batch sizes)."""
    from oasr.engine.engine import ASREngine

    engine = ASREngine(str(CAUSAL), max_streams=8)  # the model's own chunk (640 ms: 16 encoder frames)
    audio = speech[: 16000 * 6]
    alone = _finals_with_floats(_run_alone(engine, audio, 3200, word_timestamps=True)[1])
    core = engine._streaming()
    others = [engine.open_stream(word_timestamps=True) for _ in range(5)]
    for i, other in enumerate(others):  # each a different length of history when the stream joins
        other.feed(speech[16000 * (i + 1) : 16000 * (2 * i + 3)])
    stream = engine.open_stream(word_timestamps=True)
    for i in range(0, len(audio), 3200):
        for j, other in enumerate(others[: 1 + i // 16000]):  # batches of changing size
            core.push(other.id, speech[16000 * (2 * j + 3) + i : 16000 * (2 * j + 3) + i + 3200])
        core.push(stream.id, audio[i : i + 3200])
        engine.run_streams()
    core.finish(stream.id)
    while not stream.done:
        engine.run_streams()
    assert core.chunks_encoded > core.steps  # batches of more than one stream ran
    assert alone[0][4], "no word timed"
    assert _finals_with_floats(stream.events()) == alone


def test_churn_of_streams_opening_and_hanging_up_leaves_every_final_equal_to_its_solo_run(speech):
    """Twelve clients on one ``AsyncEngine``, eight streams each: every stream is opened, fed
    in 100-ms pieces and either finished or hung up at a random point, while the streaming
    thread steps the others. A slot freed by a hang-up during a step's encoder call is never
    handed out with that call's writes still to come: every finished stream's finals equal its
    solo run's."""
    import random

    from oasr.engine.async_engine import AsyncEngine
    from oasr.engine.engine import ASREngine

    clips = [speech[16000 * i : 16000 * (i + 3)] for i in range(0, 12, 3)]
    solo_engine = ASREngine(str(CAUSAL), stream_chunk_ms=160)
    solo = [_finals(_run_alone(solo_engine, clip, len(clip))[1]) for clip in clips]

    async def client(engine, rng: random.Random, finished: list) -> None:
        for _ in range(8):
            k = rng.randrange(len(clips))
            clip = clips[k]
            cut = rng.randrange(1, len(clip) // 1600) if rng.random() < 0.5 else None
            try:
                stream = await engine.open_stream()
            except EngineOverloaded:  # slots of streams closed mid-call are not free yet: retry
                await asyncio.sleep(0.01)
                continue
            for n, i in enumerate(range(0, len(clip), 1600)):
                if n == cut:
                    break
                stream.feed(clip[i : i + 1600])
                await asyncio.sleep(rng.random() * 0.003)
            if cut is not None:
                stream.close()
                continue
            stream.finish()
            finished.append((k, _finals([e async for e in stream])))

    async def churn():
        engine = AsyncEngine(str(CAUSAL), stream_chunk_ms=160, max_streams=16)
        try:
            rng, finished = random.Random(0), []
            await asyncio.gather(*(client(engine, random.Random(rng.random()), finished) for _ in range(12)))
            return finished, engine.streaming.core.runtime.in_use
        finally:
            engine.shutdown()

    finished, in_use = asyncio.run(churn())
    assert len(finished) >= 24
    wrong = [k for k, finals in finished if finals != solo[k]]
    assert not wrong, f"{len(wrong)} of {len(finished)} finished streams differ from their solo run"
    assert in_use == 0
