"""Whisper live: offline models streamed by local agreement (``oasr.engine.streaming.local_agreement``).

The agreement rule on crafted hypotheses; then real tiny.en weights (so the text means something):
finals are confirmed pieces that concatenate to the result and are never taken back, the text
agrees with the offline decode, the buffer is trimmed at confirmed segment ends, several streams
share one batched decode (model calls counted), and ``oasr stream`` and the WebSocket stream
Whisper."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from oasr.engine.outputs import Word
from oasr.engine.streaming.local_agreement import LiveOptions, LocalAgreement
from tests.conftest import AUDIO_DIR

TINY = "tiny.en"
CLIP = AUDIO_DIR / "jfk.wav"


def words(*spec: tuple[float, float, str]) -> list[Word]:
    return [Word(a, b, " " + t, 0.9) for a, b, t in spec]


def texts(ws: list[Word]) -> list[str]:
    return [w.word.strip() for w in ws]


# ---------------------------------------------------------------------------
# The rule


def test_the_longest_common_prefix_of_the_last_two_hypotheses_is_confirmed():
    la = LocalAgreement()
    assert la.update(words((0.0, 0.4, "and"), (0.4, 0.8, "so"))) == []  # nothing to agree with yet
    assert texts(la.tail) == ["and", "so"]
    got = la.update(words((0.0, 0.4, "and"), (0.4, 0.8, "so"), (0.8, 1.1, "my"), (1.1, 1.5, "fellow")))
    assert texts(got) == ["and", "so"] and la.last_end == 0.8
    assert texts(la.tail) == ["my", "fellow"]
    # A disagreement stops the prefix: "fellow" became "fellows", so only "my" is confirmed.
    got = la.update(words((0.0, 0.4, "and"), (0.4, 0.8, "so"), (0.8, 1.1, "my"), (1.1, 1.6, "fellows")))
    assert texts(got) == ["my"] and texts(la.tail) == ["fellows"]
    # What is confirmed is never offered again, and the tail is confirmed at the end.
    assert texts(la.confirm_rest()) == ["fellows"] and la.tail == [] and la.last_end == 1.6


def test_a_repeat_of_the_confirmed_tail_and_words_before_it_are_dropped():
    la = LocalAgreement()
    la.update(words((0.0, 0.5, "ask"), (0.5, 1.0, "not"), (1.0, 1.4, "what")))
    la.update(words((0.0, 0.5, "ask"), (0.5, 1.0, "not"), (1.0, 1.4, "what")))
    assert la.last_end == 1.4 and texts(la.confirmed_in_buffer) == ["ask", "not", "what"]
    # A hypothesis timed a little later repeats "not what" at its head: dropped, the rest is new.
    la.update(words((1.35, 1.6, "not"), (1.6, 1.9, "what"), (1.9, 2.3, "your"), (2.3, 2.8, "country")))
    assert texts(la.tail) == ["your", "country"]
    # A word that starts well before the confirmed end is out (past the 0.1-s tolerance).
    la.update(words((0.5, 1.0, "knot"), (1.9, 2.3, "your"), (2.3, 2.8, "country")))
    assert texts(la.confirmed_in_buffer)[-2:] == ["your", "country"]
    la.trim(1.0)  # the audio before 1.0 s left the buffer: the words that ended by then go
    assert texts(la.confirmed_in_buffer) == ["what", "your", "country"]


def test_a_word_timed_into_the_confirmed_end_is_kept_when_the_confirmed_words_lead_the_hypothesis():
    """Whisper's word times overlap: a new word may start before the last confirmed one ended by
    more than the time rule's tolerance. A hypothesis that re-transcribes the confirmed words
    first is cut after them by their count, so that word is not lost (tiny.en dropped "what" in
    "ask not what your country" by the time rule alone)."""
    la = LocalAgreement()
    la.update(words((0.0, 0.5, "ask"), (0.5, 1.2, "not")))
    la.update(words((0.0, 0.5, "ask"), (0.5, 1.2, "not")))
    assert la.last_end == 1.2
    la.update(words((0.0, 0.5, "ask"), (0.5, 1.2, "not"), (0.9, 1.5, "what"), (1.5, 1.9, "your")))
    got = la.update(words((0.0, 0.5, "ask"), (0.5, 1.2, "not"), (0.9, 1.5, "what"), (1.5, 1.9, "your")))
    assert texts(got) == ["what", "your"]


def test_live_options_are_checked():
    assert LiveOptions() == LiveOptions(min_chunk_s=1.0, buffer_trimming_s=15.0)  # whisper_streaming's
    for bad in (0, -1.0, float("nan"), True, "1"):
        with pytest.raises(ValueError, match="min_chunk_s"):
            LiveOptions(min_chunk_s=bad)
    with pytest.raises(ValueError, match="buffer_trimming_s"):
        LiveOptions(buffer_trimming_s=60.0)


# ---------------------------------------------------------------------------
# tiny.en


@pytest.fixture(scope="module")
def engine():
    from oasr.engine.engine import ASREngine
    from oasr.models.bundled import bundled_path

    if bundled_path(TINY) is None:
        pytest.skip("tiny.en is not installed (oasr's whisper-tiny-en extra)")
    if not CLIP.is_file():
        pytest.skip(f"{CLIP} not found")
    return ASREngine(TINY, max_batch_size=4, encoder_batch_size=4)


@pytest.fixture(scope="module")
def speech():
    from oasr.audio import load_audio

    return load_audio(CLIP, 16000)


@pytest.fixture(scope="module")
def offline(engine, speech) -> str:
    """The offline decode of the clip (greedy, as the streams below)."""
    return engine.transcribe(speech, beam_size=1).text


def feed_live(stream, samples: np.ndarray, piece: int = 4000):
    """Feed in pieces; every event, and the stream's (text of finals, partial) after each piece."""
    events, views = [], []
    for a in range(0, len(samples), piece):
        events += stream.feed(samples[a : a + piece])
        finals = " ".join(e.text for e in events if e.type == "final")
        partial = next((e.text for e in reversed(events) if e.type == "partial"), "")
        views.append((finals, partial))
    events += stream.finish()
    return events, views


def wer(ref: str, hyp: str) -> float:
    from oasr.metrics import error_rates

    return error_rates([(ref, hyp, "en")])["en"].rate


def test_finals_are_confirmed_pieces_that_make_the_result_and_agree_with_the_offline_decode(engine, speech, offline):
    stream = engine.open_stream(sample_rate=16000, beam_size=1, word_timestamps=True)
    events, views = feed_live(stream, speech)
    finals = [e for e in events if e.type == "final"]
    assert events[-1].type == "done" and len(finals) >= 3  # confirmed piece by piece, not at the end only
    # The result is the finals, in order; each final a segment of it, with its words.
    out = stream.output
    assert [s.text.strip() for s in out.segments] == [e.text for e in finals]
    assert out.text == "".join(s.text for s in out.segments).strip()
    assert [e.segment for e in finals] == list(range(len(finals)))
    for e in finals:
        assert e.words and e.text == "".join(w.word for w in e.words).strip()
    # Never taken back: the confirmed text only grows, and the pieces come in order.
    seen = [f for f, _ in views]
    assert all(b.startswith(a) for a, b in zip(seen, seen[1:]))
    for a, b in zip(finals, finals[1:]):
        assert b.start >= a.start and b.end >= a.end  # in order (Whisper's word times may overlap)
    # Confirmation runs ahead of the end: most words were final before finish() was called.
    assert len(seen[-1].split()) >= len(out.text.split()) // 2
    assert wer(offline, out.text) <= 0.1, (offline, out.text)


def test_the_buffer_is_trimmed_at_confirmed_segment_ends(engine, speech):
    pause = np.zeros(16000, np.float32)
    audio = np.concatenate([speech, pause, speech])  # two sentences' worth, 23 s
    stream = engine.open_stream(sample_rate=16000, beam_size=1, buffer_trimming_s=5.0, min_chunk_s=3.0)
    core = engine._streaming()
    longest, offsets = 0.0, []
    for a in range(0, len(audio), 16000):
        stream.feed(audio[a : a + 16000])
        live = core.streams[stream.id]
        longest = max(longest, live.buffer_s)
        offsets.append(live.offset)
    stream.finish()
    assert offsets[-1] > 5.0 and longest < 16.0, (offsets[-1], longest)  # cut, never the whole 23 s
    assert offsets == sorted(offsets)
    text = stream.output.text.lower()
    assert text.count("fellow americans") == 2 and text.count("your country") >= 3, text


def test_audio_pushed_during_a_decode_and_then_finish_is_still_decoded(engine, speech, monkeypatch):
    """The stream thread decodes unlocked while the caller pushes the rest and finishes (the
    WebSocket and /v1/realtime do): those samples are decoded before the stream ends."""
    core = engine._streaming()
    stream = engine.open_stream(sample_rate=16000, beam_size=1)
    head, rest = speech[: 3 * 16000], speech[3 * 16000 :]
    decode = core._decode

    def racing(jobs):
        out = decode(jobs)
        if rest.size and not stream.done and core.streams[stream.id].input_done is False:
            core.push(stream.id, rest)  # arrives while the decode runs ...
            core.finish(stream.id)  # ... and so does the end of the input
        return out

    monkeypatch.setattr(core, "_decode", racing)
    events = stream.feed(head)
    while not stream.done:
        assert engine.run_streams()
    text = " ".join(e.text for e in events + stream.events() if e.type == "final").lower()
    assert "for your country" in text, text


def test_several_streams_share_one_batched_decode(engine, speech, monkeypatch):
    core = engine._streaming()
    model = core.strategy.model
    calls = {"encoder": 0}
    encode = model.encode_offline

    def counted(*args, **kwargs):
        calls["encoder"] += 1
        return encode(*args, **kwargs)

    monkeypatch.setattr(model, "encode_offline", counted)
    piece = speech[: int(1.2 * 16000)]
    alone = engine.open_stream(sample_rate=16000, beam_size=1)
    alone_events = alone.feed(piece)
    assert calls["encoder"] == 1 and core.steps >= 1
    streams = [engine.open_stream(sample_rate=16000, beam_size=1) for _ in range(3)]
    for s in streams:  # queue without stepping: the three decodes are due together
        core.push(s.id, piece)
    steps, decodes, calls["encoder"] = core.steps, core.decodes, 0
    assert engine.run_streams()
    assert core.steps == steps + 1 and core.decodes == decodes + 3  # one step, three buffers ...
    assert calls["encoder"] == 1  # ... in one encoder call (encoder_batch_size=4)
    partials = [[e.text for e in s.events() if e.type == "partial"] for s in streams]
    assert partials == [[e.text for e in alone_events if e.type == "partial"]] * 3
    for s in [alone, *streams]:
        s.close()
    assert core.num_streams == 0


def test_options_a_local_agreement_stream_refuses(engine):
    with pytest.raises(ValueError, match="min_chunk_s"):
        engine.open_stream(min_chunk_s=0)
    with pytest.raises(ValueError, match="endpoint_vad"):
        engine.open_stream(endpoint=True, endpoint_vad=True)
    with pytest.raises(ValueError, match="translate"):
        engine.open_stream(task="translate")


def test_endpoints_cut_the_stream_at_confirmed_silence(engine, speech):
    audio = np.concatenate([speech, np.zeros(2 * 16000, np.float32), speech[: 3 * 16000]])
    stream = engine.open_stream(sample_rate=16000, beam_size=1, endpoint=True, min_chunk_s=2.0)
    events, _ = feed_live(stream, audio, piece=8000)
    kinds = [e.type for e in events]
    assert "endpoint" in kinds and kinds[-1] == "done"
    cut = next(e for e in events if e.type == "endpoint")
    before = " ".join(e.text for e in events[: kinds.index("endpoint")] if e.type == "final").lower()
    assert "your country" in before and 10.0 <= cut.end <= 12.5, (cut.end, before)
    after = " ".join(e.text for e in events[kinds.index("endpoint") :] if e.type == "final").lower()
    assert "fellow" in after


# ---------------------------------------------------------------------------
# Surfaces


def test_oasr_stream_streams_whisper(offline, monkeypatch, capsys):
    from oasr.cli.main import main

    monkeypatch.setattr("sys.stdout", io.StringIO())
    code = main(["stream", str(CLIP), "--model", TINY, "--beam-size", "1", "--min-chunk-s", "2", "-f", "json"])
    out = json.loads(__import__("sys").stdout.getvalue())
    assert code == 0
    err = capsys.readouterr().err
    assert err.count("-->") >= 2  # the finals as they came, on stderr
    assert wer(offline, out["text"]) <= 0.1
    # An encoder chunk does not apply to an offline model: a usage error naming the option to use.
    with pytest.raises(SystemExit) as e:
        main(["stream", str(CLIP), "--model", TINY, "--chunk-ms", "640"])
    assert e.value.code == 2 and "min_chunk_s" in capsys.readouterr().err


def test_the_websocket_streams_whisper(speech, offline, tmp_path):
    pytest.importorskip("websockets")
    from tests.server.conftest import ServerProcess
    from tests.streaming.test_websocket import pcm16, run, session

    proc = ServerProcess(["--model", TINY, "--beam-size", "1"], tmp_path / "log")
    try:
        config = {"sample_rate": 16000, "min_chunk_s": 1.5, "word_timestamps": True}
        events, code = run(session(proc, config, pcm16(speech), pause_s=0.05))  # 4x real time
        assert code == 1000 and events[-1]["type"] == "done"
        finals = [e for e in events if e["type"] == "final"]
        assert len(finals) >= 2 and all(e["words"] for e in finals)
        assert [e["segment"] for e in finals] == list(range(len(finals)))
        text = " ".join(e["text"] for e in finals)
        assert wer(offline, text) <= 0.1, text
        bad, code = run(session(proc, {"sample_rate": 16000, "min_chunk_s": -1}))
        assert code == 1007 and bad[0]["code"] == "invalid_options" and "min_chunk_s" in bad[0]["message"]
        assert proc.healthy()
    finally:
        proc.stop()
