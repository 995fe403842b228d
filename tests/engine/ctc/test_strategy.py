"""The ctc / ctc_aed_rescoring strategies end to end through ASREngine and AsyncEngine,
with the tiny in-test CTC models of conftest.py."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from oasr.audio.frontends import build_frontend
from oasr.engine import ASREngine
from oasr.engine.async_engine import AsyncEngine
from oasr.engine.config import TranscribeOptions
from oasr.engine.decode.base import EngineOverloaded, Request
from oasr.engine.decode.ctc import (
    CtcDecodeStrategy,
    CtcRescoringStrategy,
    attention_rescoring,
    ctc_greedy_search,
    ctc_prefix_beam_search,
)
from oasr.engine.decode.ctc.strategy import plan_windows
from oasr.engine.decode.words import token_times

from .conftest import EOS, HIGH_HZ, LOW_HZ, SR, UNK, WORLD, babble, make_loaded, tone_audio

BURSTS = [(1.0, 1.3, LOW_HZ), (3.0, 3.3, HIGH_HZ), (3.6, 3.8, LOW_HZ)]
FRAME_S = 2 * 0.01  # subsampling 2 x 10 ms fbank shift


def _spikes(loaded, audio: np.ndarray) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Greedy tokens and spike times straight from the model (no engine)."""
    feats = build_frontend(loaded.feature_spec)(audio)
    with torch.no_grad():
        lp, lens = loaded.model.forward_offline(feats[None], torch.tensor([feats.shape[0]]))
    hyp = ctc_greedy_search(lp[0, : int(lens[0])], 0)
    return hyp.tokens, tuple(f * FRAME_S for f in hyp.frames)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_tones_decode_to_timed_words(tone_loaded, beam_size):
    engine = ASREngine(tone_loaded)
    assert isinstance(engine.strategy, CtcDecodeStrategy)
    audio = tone_audio(BURSTS, 4.5)
    out = engine.transcribe(audio, beam_size=beam_size, word_timestamps=True)
    assert out.text == "hello world hello"
    assert out.duration == pytest.approx(4.5) and out.language is None and out.task == "transcribe"
    # a pause of 1.7 s splits the transcript into two segments
    assert [s.text for s in out.segments] == [" hello", " world hello"]
    assert [s.id for s in out.segments] == [1, 2]
    words = [w for s in out.segments for w in s.words]
    assert [w.word for w in words] == [" hello", " world", " hello"]
    tokens, peaks = _spikes(tone_loaded, audio)
    assert [t for s in out.segments for t in s.tokens] == list(tokens)
    for peak, (start, end, _) in zip(peaks, BURSTS):  # each spike lies in its burst
        assert start - FRAME_S <= peak <= end + FRAME_S
    spans = token_times([round(p / FRAME_S) for p in peaks], FRAME_S, 0.0, 4.5)
    assert [(w.start, w.end) for w in words] == [(round(a, 3), round(b, 3)) for a, b in spans]
    assert all(0.9 < w.probability <= 1.0 for w in words)
    assert (out.segments[0].start, out.segments[0].end) == (words[0].start, words[0].end)
    assert (out.segments[1].start, out.segments[1].end) == (words[1].start, words[2].end)
    # without word timestamps: the same segments, no words
    plain = engine.transcribe(audio, beam_size=beam_size)
    assert [(s.text, s.start, s.end) for s in plain.segments] == [(s.text, s.start, s.end) for s in out.segments]
    assert all(s.words is None for s in plain.segments)


def test_silence_and_too_short_inputs_give_empty_transcripts(tone_loaded):
    engine = ASREngine(tone_loaded)
    silent, tiny = engine.transcribe([tone_audio([], 1.0), np.zeros(160, np.float32)], beam_size=1)
    assert (silent.text, silent.segments) == ("", [])
    assert (tiny.text, tiny.segments, tiny.duration) == ("", [], pytest.approx(0.01))


@pytest.mark.parametrize("beam_size", [1, 3])
def test_batch_of_unequal_inputs_equals_one_at_a_time(tmp_path, beam_size):
    loaded = make_loaded(tmp_path, noise=True, seed=1)
    inputs = [babble(s, seed) for seed, s in enumerate((0.7, 1.3, 2.1, 0.4, 1.0, 1.7))]
    batched = ASREngine(loaded, max_batch_size=4).transcribe(inputs, beam_size=beam_size)
    single = ASREngine(loaded, max_batch_size=1)
    strategy = single.strategy
    for audio, out in zip(inputs, batched):
        alone = single.transcribe(audio, beam_size=beam_size)
        assert sum(len(s.tokens) for s in out.segments) >= 4  # busy hypotheses: the comparison means something
        assert out.text == alone.text
        assert [s.tokens for s in out.segments] == [s.tokens for s in alone.segments]
        assert [s.avg_logprob for s in out.segments] == pytest.approx([s.avg_logprob for s in alone.segments])
        assert all(t not in (UNK, EOS, 0) for s in out.segments for t in s.tokens)
    assert strategy.counters.batches == len(inputs)


def test_long_audio_is_cut_in_pauses(tone_loaded):
    audio = tone_audio(BURSTS, 4.5)
    windows = plan_windows(audio, SR, 1.0)
    assert windows[0][0] == 0 and windows[-1][1] == len(audio)
    assert all(a[1] == b[0] for a, b in zip(windows, windows[1:]))
    assert all(0 < b - a <= SR for a, b in windows)
    for _, cut in windows[:-1]:  # every cut falls in silence
        assert not any(s * SR <= cut <= e * SR for s, e, _ in BURSTS)
    assert plan_windows(audio, SR, 30.0) == [(0, len(audio))]

    whole = ASREngine(tone_loaded).transcribe(audio, beam_size=1, word_timestamps=True)
    cut = ASREngine(tone_loaded, ctc_window_s=1.0)
    out = cut.transcribe(audio, beam_size=1, word_timestamps=True)
    assert out.text == whole.text == "hello world hello"
    assert len({s.seek for s in out.segments}) == 3  # each word came from its own window
    words_whole = [w for s in whole.segments for w in s.words]
    words_cut = [w for s in out.segments for w in s.words]
    assert [w.word for w in words_cut] == [w.word for w in words_whole]
    for a, b, (start, end, _) in zip(words_whole, words_cut, BURSTS):  # both placed at their burst
        assert a.start < end and a.end > start
        assert b.start < end and b.end > start
    for seg in out.segments:  # words are timed within the window they were decoded from
        assert all(w.start >= seg.seek * 0.01 - 0.01 for w in seg.words)


def test_options_ctc_cannot_honour_are_refused(tmp_path):
    engine = ASREngine(make_loaded(tmp_path))
    refused = {
        "task": dict(task="translate"),
        "initial_prompt": dict(initial_prompt="hello"),
        "prefix": dict(prefix="hello"),
        "temperature": dict(temperature=0.4),
        "multilingual": dict(multilingual=True),
        "clip_timestamps": dict(clip_timestamps="1,2"),
        "language": dict(language="fr"),
        "hotwords": dict(hotwords="hello", beam_size=1),
        "ctc_weight": dict(ctc_weight=0.3),
        "reverse_weight": dict(reverse_weight=0.3),
    }
    for name, kwargs in refused.items():
        with pytest.raises(ValueError, match=name):
            engine.make_options(**kwargs)
    with pytest.raises(ValueError, match="temperature"):
        engine.make_options(temperature=(0.0, 0.5))
    known = set(TranscribeOptions.__dataclass_fields__)
    for name, value in (("top_k", 5), ("top_p", 0.5), ("context", "names")):
        if name in known:  # the speech-LLM sampling options, where present
            with pytest.raises(ValueError, match=name):
                engine.make_options(**{name: value})
    # no options: CTC's own default (greedy, as WeNet's ctc_greedy_search and transformers' pipelines)
    assert engine.make_options().beam_size == 1
    assert engine.make_options(word_timestamps=True).word_timestamps
    # an option CTC does not read is refused, naming the decodings that take it
    with pytest.raises(TypeError, match="best_of: the 'ctc' decoding does not take it \\(only 'aed' decoding does\\)"):
        engine.make_options(beam_size=1, best_of=5)
    with pytest.raises(ValueError, match="temperature: .*only 'aed' and 'llm' decoding does"):
        engine.make_options(temperature=0.0)
    assert engine.make_options(language="EN").language == "en"
    assert engine.make_options(hotwords="hello, world", beam_size=4).hotwords == "hello, world"
    # a checkpoint that declares no language accepts only None
    bare = ASREngine(make_loaded(tmp_path, params={}))
    assert bare.make_options().language is None
    with pytest.raises(ValueError, match=r"language 'en' \(English\): ToneCtcModel has no language control"):
        bare.make_options(language="en")
    # rescoring weights are options of the rescoring strategy (and are range-checked)
    rescoring = ASREngine(make_loaded(tmp_path), decode_type="ctc_aed_rescoring")
    assert rescoring.make_options(ctc_weight=0.3, reverse_weight=0.5).reverse_weight == 0.5
    with pytest.raises(ValueError, match="reverse_weight"):
        rescoring.make_options(reverse_weight=1.5)


def test_sequence_packing_needs_a_model_and_strategy_that_pack(tmp_path):
    """The tone model has no packed encoder; rescoring reads a padded encoder batch."""
    assert not ASREngine(make_loaded(tmp_path)).strategy.packing  # auto: off, unsupported
    assert not ASREngine(make_loaded(tmp_path), sequence_packing=False).strategy.packing
    with pytest.raises(ValueError, match="sequence_packing=True: ToneCtcModel .* cannot encode packed rows"):
        ASREngine(make_loaded(tmp_path), sequence_packing=True)
    with pytest.raises(ValueError, match="sequence_packing=True: the 'ctc_aed_rescoring' strategy pads"):
        ASREngine(make_loaded(tmp_path), decode_type="ctc_aed_rescoring", sequence_packing=True)


def test_language_is_reported(tmp_path):
    audio = tone_audio(BURSTS[:1], 2.0)
    out = ASREngine(make_loaded(tmp_path)).transcribe(audio, language="zh", beam_size=1)
    assert (out.language, out.language_probability) == ("zh", 1.0)
    single = ASREngine(make_loaded(tmp_path, params={"language": "en"})).transcribe(audio, beam_size=1)
    assert single.language == "en"


def test_hotwords_reach_the_search(tone_loaded):
    engine = ASREngine(tone_loaded)
    audio = tone_audio(BURSTS, 4.5)
    assert engine.transcribe(audio, beam_size=3, hotwords="hello").text == "hello world hello"
    strategy = engine.strategy
    request = strategy.prepare(
        Request("h", audio, engine.make_options(beam_size=3, hotwords="world", hotword_weight=2))
    )
    strategy.add_request(request)
    graph = strategy.requests["h"].hotwords
    assert graph.phrases == [(WORLD,)] and graph.weight == 2.0
    events = []
    while strategy.num_unfinished():
        events += strategy.step()
    (out,) = [e.output for e in events if e.kind == "finished"]
    assert out.text == "hello world hello"


def test_segments_stream_in_order_and_abort_frees_the_slot(tmp_path):
    engine = ASREngine(make_loaded(tmp_path), max_queue_size=2, max_batch_size=1, ctc_window_s=1.0)
    strategy = engine.strategy
    opts = engine.make_options(beam_size=1)
    audio = tone_audio(BURSTS, 4.5)
    engine.add_request(strategy.prepare(Request("a", audio, opts)))
    engine.add_request(strategy.prepare(Request("b", audio, opts)))
    with pytest.raises(EngineOverloaded):
        engine.add_request(strategy.prepare(Request("c", audio, opts)))
    events = strategy.step()
    assert strategy.abort("b") and not strategy.abort("b")
    assert strategy.num_unfinished() == 1
    assert all(r.rid != "b" for r, _ in strategy.pending)
    engine.add_request(strategy.prepare(Request("c", audio, opts)))  # the aborted request's slot is free
    while strategy.num_unfinished():
        events += strategy.step()
    assert not [e for e in events if e.request_id == "b" and e.kind != "segment"]
    done = {e.request_id: e.output for e in events if e.kind == "finished"}
    assert sorted(done) == ["a", "c"]
    for rid in ("a", "c"):
        streamed = [e.segment for e in events if e.request_id == rid and e.kind == "segment"]
        assert streamed == done[rid].segments
        assert [s.id for s in streamed] == list(range(1, len(streamed) + 1))
        assert [s.start for s in streamed] == sorted(s.start for s in streamed)
        assert done[rid].text == "hello world hello"
    assert strategy.stats()["waiting_tasks"] == 0 and strategy.stats()["running_rows"] == 0
    assert strategy.counters.requests_finished == 2


def test_async_engine(tone_loaded):
    audio = tone_audio(BURSTS, 4.5)
    expected = ASREngine(tone_loaded).transcribe(audio, beam_size=2)
    engine = AsyncEngine(tone_loaded)

    async def main():
        opts = engine.make_options(beam_size=2)
        outs = await asyncio.gather(*(engine.transcribe(audio, opts) for _ in range(3)))
        events = [e async for e in engine.stream(audio, opts)]
        return outs, events

    try:
        outs, events = asyncio.run(main())
    finally:
        engine.shutdown()
    assert [o.text for o in outs] == [expected.text] * 3
    assert [e.kind for e in events] == ["segment", "segment", "finished"]
    assert [e.segment.text for e in events[:2]] == [s.text for s in expected.segments]
    stats = engine.stats()
    assert stats.finished == 4 and stats.failed == 0 and stats.running_requests == 0


def test_rescoring_strategy_picks_by_attention_and_ctc(tmp_path):
    loaded = make_loaded(tmp_path, noise=True, seed=1, params={"ctc_weight": 0.3, "reverse_weight": 0.2})
    loaded.model.decoder.bonus = 3.0  # the fake decoder likes "world"
    engine = ASREngine(loaded, decode_type="ctc_aed_rescoring")
    assert isinstance(engine.strategy, CtcRescoringStrategy)
    audio = babble(1.5, 5)
    feats = build_frontend(loaded.feature_spec)(audio)
    with torch.no_grad():
        enc, lens = loaded.model.encode_offline(feats[None], torch.tensor([feats.shape[0]]))
        lp = loaded.model.ctc_log_probs(enc)[0, : int(lens[0])]
    nbest = ctc_prefix_beam_search(lp, 4, 0, skip_ids=(UNK, EOS))
    for options, (cw, rw) in (({}, (0.3, 0.2)), ({"ctc_weight": 0.0, "reverse_weight": 0.0}, (0.0, 0.0))):
        loaded.model.decoder.calls.clear()
        out = engine.transcribe(audio, beam_size=4, **options)
        want = attention_rescoring(loaded.model.decoder, enc[:, : int(lens[0])], int(lens[0]), nbest, cw, rw)
        assert [t for s in out.segments for t in s.tokens] == list(want.tokens)
        assert loaded.model.decoder.calls[0] == (int(lens[0]), [list(h.tokens) for h in nbest], rw)
    # with the CTC weight off, the decoder's preference decides
    assert want.tokens.count(WORLD) == max(h.tokens.count(WORLD) for h in nbest)
