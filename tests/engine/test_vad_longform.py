"""Batched long-form transcription over VAD chunks (``oasr.engine.chunking``).

The real whisper-base on four clips laid out with silences: two chunks decoded in one
batch, the stitched transcript and its times match the clips. The tiny in-test CTC and
speech-LLM models go through the same path. A scripted strategy pins down the
stitching: time order whatever order chunks finish in, separators, errors, aborts.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch

from oasr.audio.vad import SpeechChunk, merge_spans, speech_spans
from oasr.engine import ASREngine
from oasr.engine.chunking import VadChunks, VadSplitter
from oasr.engine.config import TranscribeOptions
from oasr.engine.decode.base import DecodeStrategy, Request, StepEvent
from oasr.engine.outputs import RequestOutput, Segment, Word
from oasr.metrics import error_rates
from oasr.models.base import DecodeType
from oasr.models.bundled import bundled_path
from oasr.tokenizers import Control
from tests.conftest import checkout_hint

SR = 16000
GREEDY = {"language": "en", "beam_size": 1}
real_weights = pytest.mark.real_weights


@pytest.fixture(scope="module")
def silero():
    pytest.importorskip("silero_vad")


@pytest.fixture(scope="module")
def engine(silero):
    if bundled_path("whisper-base") is None:
        pytest.skip("whisper-base is not installed (oasr's whisper-base extra)")
    # One encoder call per batch (the GPU default; on a CPU windows are encoded one by one),
    # so ``encoder_batches`` sees how the strategy batched the chunks.
    return ASREngine("whisper-base", max_batch_size=8, encoder_batch_size=8)


@pytest.fixture(scope="module")
def encoder_batches(engine):
    """The batch size of every encoder call the strategy makes (appended as they happen)."""
    sizes: list[int] = []
    encode = engine.model.encode_offline

    def counting(x, *args, **kwargs):
        sizes.append(int(x.shape[0]))
        return encode(x, *args, **kwargs)

    engine.model.encode_offline = counting
    yield sizes
    del engine.model.encode_offline


@pytest.fixture(scope="module")
def vad_out(engine, encoder_batches, vad_recording):
    encoder_batches.clear()
    out = engine.transcribe(vad_recording.audio, vad_filter=True, word_timestamps=True, **GREEDY)
    return out, list(encoder_batches)


@pytest.fixture(scope="module")
def per_clip(engine, vad_recording):
    """Each clip transcribed on its own."""
    return [o.text for o in engine.transcribe(vad_recording.clips, **GREEDY)]


def _wer(refs: list[str], hyps: list[str]) -> float:
    return error_rates((r, h, "en") for r, h in zip(refs, hyps))["en"].rate


@real_weights
@pytest.mark.slow
def test_chunks_are_decoded_as_one_batch(engine, vad_recording, vad_out):
    request = engine.splitter.prepare(Request("x", vad_recording.audio, engine.make_options(vad_filter=True, **GREEDY)))
    chunks = request.features.chunks
    request.features.close()
    assert len(chunks) == 2 and all(c.duration <= 30.0 for c in chunks)
    _, batches = vad_out
    assert batches[0] == len(chunks)  # every chunk's window in the first encoder call


@real_weights
@pytest.mark.slow
def test_transcript_matches_the_clips(vad_recording, vad_out, per_clip):
    out, _ = vad_out
    assert out.duration == pytest.approx(len(vad_recording.audio) / SR)
    assert out.language == "en"
    assert _wer([" ".join(per_clip)], [out.text]) < 0.05
    assert _wer([" ".join(vad_recording.texts)], [out.text]) < 0.1


@real_weights
@pytest.mark.slow
def test_times_land_in_the_right_clip(vad_recording, vad_out, per_clip):
    out, _ = vad_out
    rec = vad_recording
    assert [s.id for s in out.segments] == list(range(1, len(out.segments) + 1))
    starts = [s.start for s in out.segments]
    assert starts == sorted(starts)
    words_by_clip: list[list[str]] = [[] for _ in rec.spans]
    for seg in out.segments:
        assert seg.start <= seg.end
        assert rec.clip_at(seg.start) is not None and rec.clip_at(seg.end) is not None, (seg.start, seg.end)
        for w in seg.words:
            clip = rec.clip_at(w.start)
            assert clip is not None and rec.clip_at(w.end) == clip, (w.word, w.start, w.end)
            words_by_clip[clip].append(w.word)
    texts = ["".join(words) for words in words_by_clip]
    assert _wer(per_clip, texts) < 0.1  # every clip's words were timed inside that clip
    for clip_text, ref in zip(texts, per_clip):
        assert _wer([ref], [clip_text]) < 0.25, (ref, clip_text)


@real_weights
@pytest.mark.slow
def test_silence_gives_an_empty_transcript(engine):
    silence = np.zeros(4 * SR, dtype=np.float32)
    noise = np.random.default_rng(0).standard_normal(3 * SR).astype(np.float32) * 1e-3
    for out in engine.transcribe([silence, noise], vad_filter=True, **GREEDY):
        assert out.text == "" and out.segments == []
        assert out.duration in (4.0, 3.0) and out.language == "en"
    assert engine.splitter.num_unfinished() == 0 and engine.strategy.num_unfinished() == 0


@real_weights
@pytest.mark.slow
def test_a_long_stretch_of_speech_is_cut_under_30_s(engine, vad_recording):
    continuous = np.concatenate(vad_recording.clips)  # 37 s with only short pauses
    opts = engine.make_options(vad_filter=True, vad_parameters={"min_silence_duration_ms": 2000}, **GREEDY)
    request = engine.splitter.prepare(Request("long", continuous, opts))
    chunks = request.features.chunks
    request.features.close()
    assert len(chunks) >= 2 and all(c.duration <= 30.0 for c in chunks)


@real_weights
@pytest.mark.slow
def test_vad_options_are_checked(engine, monkeypatch):
    with pytest.raises(ValueError, match="vad_parameters needs vad_filter"):
        engine.make_options(vad_parameters={"threshold": 0.4})
    with pytest.raises(ValueError, match="unknown vad_parameters"):
        engine.make_options(vad_filter=True, vad_parameters={"treshold": 0.4})
    with pytest.raises(ValueError, match="clip_timestamps"):
        engine.make_options(vad_filter=True, clip_timestamps="5,10")
    import sys

    monkeypatch.setitem(sys.modules, "silero_vad", None)
    with pytest.raises(ImportError, match=re.escape(checkout_hint("vad"))):
        engine.make_options(vad_filter=True)
    with pytest.raises(ImportError, match=re.escape(checkout_hint("vad"))):
        engine.transcribe(np.zeros(SR, dtype=np.float32), vad_filter=True)


# -- the CTC and speech-LLM strategies (tiny in-test models) ----------------------------------------


def _chunks(audio: np.ndarray) -> list[SpeechChunk]:
    return merge_spans(speech_spans(audio, SR), SR)


def test_ctc_chunks_are_stitched_with_global_times(silero, vad_recording, tmp_path):
    from .ctc.conftest import make_loaded

    engine = ASREngine(make_loaded(tmp_path, noise=True, seed=1), max_batch_size=4)
    audio = vad_recording.audio
    out = engine.transcribe(audio, vad_filter=True, word_timestamps=True)
    chunks = _chunks(audio)
    assert len(chunks) == 2
    expected: list[tuple[str, float, float]] = []  # each chunk alone, its times mapped
    for chunk, alone in zip(chunks, engine.transcribe([c.audio(audio) for c in chunks], word_timestamps=True)):
        expected += [
            (s.text, round(chunk.to_global(s.start), 3), round(chunk.to_global(s.end, is_end=True), 3))
            for s in alone.segments
        ]
    assert expected and [(s.text, s.start, s.end) for s in out.segments] == expected
    assert [s.id for s in out.segments] == list(range(1, len(expected) + 1))
    for w in (w for s in out.segments for w in s.words):
        assert vad_recording.clip_at(w.start) is not None and vad_recording.clip_at(w.end) is not None
    assert out.duration == pytest.approx(len(audio) / SR)
    silent = engine.transcribe(np.zeros(2 * SR, dtype=np.float32), vad_filter=True)
    assert (silent.text, silent.segments) == ("", [])


def test_llm_chunks_stream_in_time_order(silero, vad_recording):
    from .llm.conftest import SR as LLM_SR
    from .llm.conftest import ScriptedLm, TinySpeechLlm, lm_config, make_loaded, train_tokenizer

    tokenizer = train_tokenizer()
    script = tokenizer.encode_prompt([Control("language English<asr_text>hello world<|im_end|>")])
    loaded = make_loaded(tokenizer, script=script)
    # A context that holds 30 s of audio states (25 a second) and the prompt.
    cfg = dataclasses.replace(lm_config(tokenizer.vocab_size), max_position_embeddings=2048)
    decoder = ScriptedLm(cfg, script)
    decoder.load_state_dict(loaded.model.decoder.state_dict())
    model = TinySpeechLlm(tokenizer, decoder).to(torch.float64).eval()
    engine = ASREngine(dataclasses.replace(loaded, model=model), max_batch_size=4)
    assert LLM_SR == SR
    deltas: list[str] = []
    out = engine.transcribe(vad_recording.audio, vad_filter=True, on_token=deltas.append)
    chunks = _chunks(vad_recording.audio)
    assert out.text == " ".join(["hello world"] * len(chunks)) and "".join(deltas) == out.text
    assert [(s.start, s.end) for s in out.segments] == [(round(c.start, 3), round(c.end, 3)) for c in chunks]
    assert out.language == "en"


# -- the stitching, with a scripted strategy ------------------------------------------------------


class _ScriptedStrategy(DecodeStrategy):
    """Plays back the events a test scripts, one list per step; remembers aborts."""

    decode_type = DecodeType.LLM
    streams_text = True

    def __init__(self, steps: list[list[StepEvent]]) -> None:
        self.steps = steps
        self.requests: dict[str, Request] = {}
        self.aborted: list[str] = []

    def add_request(self, request: Request) -> None:
        self.requests[request.request_id] = request

    def step(self) -> list[StepEvent]:
        events = self.steps.pop(0) if self.steps else []
        for e in events:
            if e.kind in ("finished", "error"):
                self.requests.pop(e.request_id, None)
        return events

    def abort(self, request_id: str) -> bool:
        self.aborted.append(request_id)
        return self.requests.pop(request_id, None) is not None

    def num_unfinished(self) -> int:
        return len(self.requests)


def _seg(start: float, end: float, text: str, words: list[Word] | None = None) -> Segment:
    return Segment(id=1, seek=0, start=start, end=end, text=text, words=words)


def _done(rid: str, text: str, segments: list[Segment], language: str = "en") -> StepEvent:
    out = RequestOutput(rid, text, segments, language=language, language_probability=0.9, duration=2.0)
    return StepEvent(rid, "finished", output=out)


def _parent(splitter: VadSplitter, chunks: list[SpeechChunk]) -> Request:
    opts = TranscribeOptions(vad_filter=True)
    parts = [Request(f"p/vad{i}", None, opts.replace(vad_filter=False)) for i in range(len(chunks))]
    request = Request("p", None, opts, features=VadChunks(chunks, parts), duration=9.0)
    splitter.add_request(request)
    return request


# chunk 0: 1-3 s of the recording; chunk 1: 5-6 s and 7-8 s (the silence between left out)
CHUNKS = [SpeechChunk(((SR, 3 * SR),), SR), SpeechChunk(((5 * SR, 6 * SR), (7 * SR, 8 * SR)), SR)]


def test_stitching_keeps_time_order_and_maps_times():
    later = _seg(0.5, 1.0, " world", [Word(0.5, 1.0, " world", 0.8)])
    earlier = _seg(0.0, 2.0, " Hello")
    strategy = _ScriptedStrategy(
        [
            [StepEvent("p/vad1", "segment", segment=later), StepEvent("p/vad1", "delta", delta="world")],
            [StepEvent("p/vad0", "delta", delta="Hel")],
            [StepEvent("p/vad0", "delta", delta="lo"), StepEvent("p/vad0", "segment", segment=earlier)],
            [_done("p/vad0", "Hello", [earlier])],
            [_done("p/vad1", "world", [later, _seg(1.0, 2.0, " again")], language="fr")],
        ]
    )
    splitter = VadSplitter(strategy, SR)
    _parent(splitter, CHUNKS)
    assert splitter.num_unfinished() == 1 and strategy.num_unfinished() == 2
    steps = [splitter.step() for _ in range(5)]
    assert steps[0] == []  # chunk 1 waits for chunk 0
    assert [(e.kind, e.delta) for e in steps[1]] == [("delta", "Hel")]
    assert [e.kind for e in steps[2]] == ["delta", "segment"]
    assert [(e.kind, e.delta) for e in steps[3]] == [("segment", ""), ("delta", " world")]  # chunk 1's backlog
    kinds = [e.kind for e in steps[4]]
    assert kinds == ["segment", "finished"]
    out = steps[4][-1].output
    assert out.request_id == "p" and out.text == "Hello world"
    deltas = "".join(e.delta for step in steps for e in step if e.kind == "delta")
    assert deltas == out.text
    assert [(s.id, s.start, s.end, s.text) for s in out.segments] == [
        (1, 1.0, 3.0, " Hello"),
        (2, 5.5, 6.0, " world"),  # an end on the seam of two spans: the end of the first
        (3, 7.0, 8.0, " again"),  # a start on the seam: the start of the second
    ]
    assert [(w.start, w.end) for w in out.segments[1].words] == [(5.5, 6.0)]
    assert out.segments[1].seek == 500  # the chunk's window starts at 5 s
    assert (out.language, out.duration) == ("en", 9.0)  # 2 s of chunk 0 in English vs 2 s of French: the first
    assert splitter.num_unfinished() == 0


def test_token_times_are_mapped_into_the_recording_as_the_words_are():
    """A chunk's ``Segment.token_times`` move to the recording's timeline with its segment: chunk
    1 holds 5-6 s and 7-8 s, so its 0.5 s is 5.5 s, its 1.0 s ends at 6.0 s (the seam) or
    starts at 7.0 s."""
    from oasr.engine.chunking import _map_segment

    seg = Segment(
        id=1, seek=0, start=0.0, end=1.5, text=" a b c", tokens=[4, 5, 6],
        token_times=[(0.0, 0.5), (0.5, 1.0), (1.0, 1.5)], words=[Word(0.5, 1.0, " b", 0.9)],
    )  # fmt: skip
    mapped = _map_segment(seg, CHUNKS[1], 3)
    assert mapped.token_times == [(5.0, 5.5), (5.5, 6.0), (7.0, 7.5)]
    assert (mapped.start, mapped.end, [(w.start, w.end) for w in mapped.words]) == (5.0, 7.5, [(5.5, 6.0)])


def test_a_failing_chunk_fails_the_request_and_aborts_the_others():
    boom = RuntimeError("boom")
    strategy = _ScriptedStrategy(
        [[StepEvent("p/vad0", "error", error=boom), StepEvent("p/vad1", "delta", delta="late")], []]
    )
    splitter = VadSplitter(strategy, SR)
    _parent(splitter, CHUNKS)
    events = splitter.step()
    assert [(e.request_id, e.kind, e.error) for e in events] == [("p", "error", boom)]
    assert strategy.aborted == ["p/vad1"]
    assert splitter.num_unfinished() == 0 and splitter.step() == []


def test_abort_empty_and_plain_requests():
    strategy = _ScriptedStrategy([[], [StepEvent("plain", "delta", delta="x")]])
    splitter = VadSplitter(strategy, SR)
    _parent(splitter, CHUNKS)
    assert splitter.abort("p") and sorted(strategy.aborted) == ["p/vad0", "p/vad1"]
    assert splitter.num_unfinished() == 0 and not splitter.abort("p")
    _parent(splitter, [])  # no speech: finished at the next step, empty
    assert splitter.num_unfinished() == 1
    (event,) = splitter.step()
    assert (event.kind, event.output.text, event.output.segments, event.output.language) == ("finished", "", [], None)
    splitter.add_request(Request("plain", None, TranscribeOptions()))  # no VAD: straight through
    assert [(e.request_id, e.delta) for e in splitter.step()] == [("plain", "x")]


class _EarlyStoppingStrategy(_ScriptedStrategy):
    stops_early = True


# chunk 0: 1-5 s of the recording; chunk 1: 7-8 s
LONG_FIRST = [SpeechChunk(((SR, 5 * SR),), SR), SpeechChunk(((7 * SR, 8 * SR),), SR)]


def _parent_with_audio(splitter: VadSplitter, chunks: list[SpeechChunk], **options) -> Request:
    opts = TranscribeOptions(vad_filter=True, **options)
    parts = [Request(f"p/vad{i}", None, opts.replace(vad_filter=False)) for i in range(len(chunks))]
    audios = [np.arange(c.num_samples, dtype=np.float32) for c in chunks]  # sample i holds i
    decodes_tails = splitter.strategy.stops_early and not opts.without_timestamps
    request = Request("p", None, opts, features=VadChunks(chunks, parts, audios if decodes_tails else None))
    splitter.add_request(request)
    return request


def test_an_untranscribed_tail_is_decoded_again_after_its_chunk():
    """Chunk 0's segments end 3 s before it does: its audio from 1 s on is decoded as a
    request of its own, whose segments and text come between chunk 0's and chunk 1's."""
    strategy = _EarlyStoppingStrategy(
        [
            [_done("p/vad1", "later", [_seg(0.0, 1.0, " later")])],
            [_done("p/vad0", "Hello", [_seg(0.0, 1.0, " Hello")])],
            [_done("p/vad0/tail", "again", [_seg(0.5, 2.9, " again")])],  # ends 0.1 s early: no second tail
        ]
    )
    splitter = VadSplitter(strategy, SR)
    _parent_with_audio(splitter, LONG_FIRST)
    assert splitter.step() == []
    assert [e.kind for e in splitter.step()] == ["segment"]  # chunk 0 out; its tail holds chunk 1 back
    tail = strategy.requests["p/vad0/tail"]
    assert np.array_equal(tail.source, np.arange(SR, 4 * SR, dtype=np.float32))
    assert not tail.options.prefix and not tail.options.vad_filter
    assert splitter.num_unfinished() == 1 and splitter.stats()["vad_tails_decoded"] == 1
    events = splitter.step()
    assert [e.kind for e in events] == ["segment", "segment", "finished"]
    out = events[-1].output
    assert out.text == "Hello again later"
    assert [(s.id, s.start, s.end, s.text) for s in out.segments] == [
        (1, 1.0, 2.0, " Hello"),
        (2, 2.5, 4.9, " again"),  # tail time 0.5 s = 1 s + 1.5 s into the recording
        (3, 7.0, 8.0, " later"),
    ]
    assert out.segments[1].seek == 200  # the tail's window starts at 2 s
    assert splitter.stats()["vad_tails_decoded"] == 1 and splitter.num_unfinished() == 0


@pytest.mark.parametrize("case", ["without_timestamps", "no_early_stops", "covered", "no_segments"])
def test_tails_are_decoded_only_where_a_decoder_stopped_early(case):
    segments = {"covered": [_seg(0.0, 2.5, " Hello")], "no_segments": []}.get(case, [_seg(0.0, 1.0, " Hello")])
    script = [[_done("p/vad0", "Hello", segments), _done("p/vad1", "later", [_seg(0.0, 1.0, " later")])]]
    strategy = (_ScriptedStrategy if case == "no_early_stops" else _EarlyStoppingStrategy)(script)
    splitter = VadSplitter(strategy, SR)
    _parent_with_audio(splitter, LONG_FIRST, without_timestamps=case == "without_timestamps")
    events = splitter.step()
    assert events[-1].kind == "finished" and splitter.stats()["vad_tails_decoded"] == 0
    assert not strategy.requests


def test_chunk_tail_keeps_times():
    chunk = SpeechChunk(((SR, 2 * SR), (4 * SR, 6 * SR)), SR)
    tail = chunk.tail(1.5)
    assert tail.spans == ((int(4.5 * SR), 6 * SR),) and tail.duration == 1.5
    assert tail.to_global(0.0) == chunk.to_global(1.5) == 4.5
    assert chunk.tail(0.25).spans == ((int(1.25 * SR), 2 * SR), (4 * SR, 6 * SR))
    with pytest.raises(ValueError, match="empty"):
        chunk.tail(3.0)
