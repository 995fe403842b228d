"""Punctuation restoration through the engine and the CLI: a tiny Paraformer (oasr's own
random weights in FunASR's layout) with a tiny CT-Transformer over its characters. The engine's
text is the post-processor's punctuation of the plain engine's text; segments, words and the
live segments of ``oasr transcribe -v`` carry their share of it; transcripts that already have
punctuation pass through untouched unless ``punc_always``; a failing post-processor fails its
requests alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import oasr
from oasr.cli.main import main
from oasr.engine.decode.base import StepEvent
from oasr.engine.outputs import RequestOutput, Segment, Word
from oasr.engine.punctuating import Punctuating, punctuate_output
from oasr.postprocess.punctuation import load_punctuator
from tests.conftest import AUDIO_DIR
from tests.models.paraformer._funasr_format import CHARS
from tests.postprocess.conftest import write_oasr_punc_dir

CLIP = AUDIO_DIR / "funasr_asr_example.wav"


@pytest.fixture(scope="module")
def paraformer_dir(tmp_path_factory) -> Path:
    """The Paraformer of the server tests: weights scaled so that its CIF fires on speech."""
    from tests.models.paraformer.conftest import write_firing_paraformer_dir

    return write_firing_paraformer_dir(tmp_path_factory.mktemp("paraformer") / "model", seed=3)


@pytest.fixture(scope="module")
def punc_dir(tmp_path_factory) -> Path:
    return write_oasr_punc_dir(tmp_path_factory.mktemp("punc") / "ct-punc", CHARS, seed=1)


@pytest.fixture(scope="module")
def plain(paraformer_dir) -> RequestOutput:
    if not CLIP.is_file():
        pytest.skip(f"data/audio not found at {CLIP}")
    return oasr.ASREngine(str(paraformer_dir)).transcribe(str(CLIP), word_timestamps=True)


def test_the_engine_punctuates_text_segments_and_words(paraformer_dir, punc_dir, plain):
    engine = oasr.ASREngine(str(paraformer_dir), punc_model=str(punc_dir))
    out = engine.transcribe(str(CLIP), word_timestamps=True)
    want = load_punctuator(punc_dir).punctuate([plain.text])[0]
    assert plain.text and not engine.punctuator.has_punctuation(plain.text)
    assert out.text == want.text and out.text != plain.text
    assert "".join(s.text for s in out.segments) == out.text
    words = [w.word for s in out.segments for w in s.words]
    assert words == want.pieces and len(words) == len(plain.segments[0].words)
    assert [(w.start, w.end) for w in out.segments[0].words] == [(w.start, w.end) for w in plain.segments[0].words]
    assert out.segments[0].tokens == plain.segments[0].tokens


def test_cli_transcribe_punctuate(paraformer_dir, punc_dir, plain, capsys):
    capsys.readouterr()
    argv = ["transcribe", "-m", paraformer_dir, "--punctuate", punc_dir, CLIP, "-f", "json", "-v", "--no-progress"]
    assert main([str(a) for a in argv]) == 0
    captured = capsys.readouterr()
    want = load_punctuator(punc_dir).punctuate([plain.text])[0].text
    assert json.loads(captured.out)["text"] == want
    assert want in captured.err  # the live segment line, written when the transcript finished
    assert main(["transcribe", "-m", str(paraformer_dir), "--punctuate-always", str(CLIP)]) == 2
    assert "--punctuate-always needs --punctuate" in capsys.readouterr().err


class _Inner:
    """A splitter whose one step finishes the given outputs, their segments and deltas first."""

    streams_text = True
    prompt_option = None

    def __init__(self, outputs: list[RequestOutput]) -> None:
        self.outputs = outputs

    def step(self) -> list[StepEvent]:
        events = []
        for out in self.outputs:
            events += [StepEvent(out.request_id, "segment", segment=s) for s in out.segments]
            events += [StepEvent(out.request_id, "delta", delta=s.text) for s in out.segments]
        return events + [StepEvent(o.request_id, "finished", output=o) for o in self.outputs]

    def stats(self) -> dict[str, float]:
        return {}


def _output(rid: str, *texts: str) -> RequestOutput:
    segments = [
        Segment(i, 0, i, i + 1, t, words=[Word(i, i + 1, w, 1.0) for w in re.findall(r"\s*\S+", t)])
        for i, t in enumerate(texts)
    ]
    return RequestOutput(rid, "".join(texts), segments)


def test_held_events_and_the_skip_rule(punc_dir):
    punctuator = load_punctuator(punc_dir)
    chars = "".join(CHARS)
    bare, marked = _output("a", chars[:15], chars[15:33]), _output("b", "你好，", "世界")
    driver = Punctuating(_Inner([bare, marked]), punctuator)
    events = driver.step()
    want = punctuator.punctuate([chars[:33]])[0]
    assert bare.text == want.text
    assert [s.text for s in bare.segments] == ["".join(want.pieces[:15]), "".join(want.pieces[15:])]
    assert [e.kind for e in events if e.request_id == "a"] == ["segment", "segment", "delta", "finished"]
    assert [e.delta for e in events if e.kind == "delta" and e.request_id == "a"] == [bare.text]
    assert marked.text == "你好，世界"  # already punctuated: its deltas pass as they were
    assert [e.delta for e in events if e.request_id == "b" and e.kind == "delta"] == ["你好，", "世界"]
    forced = _output("c", "你好，", "世界")
    Punctuating(_Inner([forced]), punctuator, always=True).step()
    assert forced.text == punctuator.punctuate(["你好，世界"])[0].text
    assert driver.stats()["transcripts_punctuated"] == 1


def test_english_segments_keep_their_spaces(punc_dir):
    punctuator = load_punctuator(punc_dir)
    out = _output("e", " hello world", " how are you")
    result = punctuator.punctuate([out.text])[0]
    punctuate_output(out, result)
    assert out.text == " " + result.text.lstrip() and out.text == "".join(s.text for s in out.segments)
    assert all(s.text.startswith(" ") for s in out.segments)
    assert all(w.word.startswith(" ") for s in out.segments for w in s.words)
    assert [w.word.strip().rstrip(",.?、，。？").lower() for s in out.segments for w in s.words] == [
        "hello",
        "world",
        "how",
        "are",
        "you",
    ]


def test_a_failing_punctuator_fails_its_requests_alone(punc_dir):
    punctuator = load_punctuator(punc_dir)

    def broken(texts):
        raise RuntimeError("punctuation failed")

    punctuator.punctuate = broken
    events = Punctuating(_Inner([_output("a", "我们"), _output("b", "好，")]), punctuator).step()
    kinds = [(e.request_id, e.kind) for e in events]
    assert kinds == [("a", "error"), ("b", "segment"), ("b", "delta"), ("b", "finished")]


def test_split_like_gives_each_part_its_characters_and_their_marks():
    from oasr.engine.punctuating import split_like

    assert split_like(" Hello world, how.", [" hello world", " how"]) == ["Hello world,", "how."]
    # a word-level model's word may straddle two segments: each keeps its characters
    assert split_like("我们都，是木头人。", ["我们", "都是木", "头人"]) == ["我们", "都，是木", "头人。"]
    assert split_like("你好，，世界。", ["你好，", "", "世界"]) == ["你好，，", "", "世界。"]
    assert split_like("我们。", ["他们"]) is None  # not the same characters: the segments stay


def test_serve_punctuate_applies_to_every_transcript(paraformer_dir, punc_dir, plain):
    """``oasr serve --punctuate DIR``: the HTTP transcript (text and verbose_json segments) is the
    engine's punctuated one, for every response format that carries text."""
    pytest.importorskip("fastapi", reason="the server extra is not installed")
    from starlette.testclient import TestClient

    from oasr.cli import serve
    from oasr.cli.main import build_parser
    from oasr.server.app import create_app

    args = build_parser().parse_args(["serve", "-m", str(paraformer_dir), "--punctuate", str(punc_dir)])
    settings = serve.settings_from_args(args)
    want = load_punctuator(punc_dir).punctuate([plain.text])[0].text
    with TestClient(create_app(settings)) as http:
        for fmt in ("json", "verbose_json", "text"):
            with open(CLIP, "rb") as f:
                r = http.post(
                    "/v1/audio/transcriptions",
                    files={"file": f},
                    data={"model": settings.model, "response_format": fmt},
                )
            assert r.status_code == 200, r.text
            if fmt == "text":
                assert r.text.strip() == want
                continue
            body = r.json()
            assert body["text"] == want
            if fmt == "verbose_json":
                assert "".join(s["text"] for s in body["segments"]) == want


def test_live_stream_finals_are_punctuated_each_alone(tmp_path):
    """A streaming encoder's live stream (WeNet's tiny causal U2++): each final is the
    post-processor's punctuation of the plain engine's final; partials stay as decoded."""
    from oasr.audio import load_audio
    from tests.conftest import FIXTURES_DIR

    causal = FIXTURES_DIR / "wenet-u2pp-tiny-causal"
    if not (causal / "train.yaml").is_file() or not CLIP.is_file():
        pytest.skip("the WeNet fixture or the clip is missing")
    units = [line.split()[0] for line in (causal / "units.txt").read_text().splitlines()][2:-1]
    punc = write_oasr_punc_dir(tmp_path / "punc", units, seed=2)
    audio = load_audio(str(CLIP))[: 16000 * 3]

    def finals(engine) -> list:
        stream = engine.open_stream(endpoint=True, rule2_min_trailing_silence=0.3)
        events = stream.feed(audio) + stream.finish()
        return [e for e in events if e.type == "final"], [e.text for e in events if e.type == "partial"]

    plain, plain_partials = finals(oasr.ASREngine(str(causal), stream_chunk_ms=160))
    got, partials = finals(oasr.ASREngine(str(causal), stream_chunk_ms=160, punc_model=str(punc)))
    want = load_punctuator(punc).punctuate([e.text for e in plain])
    assert [e.text for e in got] == [r.text.strip() for r in want] and any(e.text for e in got)
    assert [e.text for e in got] != [e.text for e in plain]
    assert partials == plain_partials
    assert [e.tokens for e in got] == [e.tokens for e in plain]


def test_a_failing_punctuator_fails_its_streams_alone(punc_dir):
    from oasr.engine.punctuating import punctuate_finals
    from oasr.engine.streaming.core import StreamEvent

    punctuator = load_punctuator(punc_dir)

    def broken(texts):
        raise RuntimeError("punctuation failed")

    punctuator.punctuate = broken
    events = [
        StreamEvent("partial", "a", text="我们"),
        StreamEvent("final", "a", text="我们"),
        StreamEvent("done", "a"),
        StreamEvent("final", "b", text="好，"),  # already punctuated: not sent to the model
    ]
    assert punctuate_finals(punctuator, False, events) == {"a"}
    assert [(e.stream_id, e.type, e.code) for e in events] == [
        ("a", "partial", None),
        ("a", "error", "engine_error"),
        ("b", "final", None),
    ]
