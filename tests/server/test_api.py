"""The OpenAI-compatible API of a real ``oasr serve --model tiny.en`` subprocess, through
the official ``openai`` client (httpx where the client cannot express the request):
every response format against the in-process engine's result for the same input,
timestamps, streaming, the translations route and ``/v1/models``."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from oasr.formatting import format_output, verbose_json_dict

from .conftest import SERVER_DEFAULTS, TINY, metric

pytestmark = pytest.mark.real_weights

JFK = "jfk.wav"
MULTI = "mfa_acoustic_corpus.wav"  # 27 s, several segments


@pytest.fixture(scope="module")
def ref(reference, clip):
    """``ref(name, **options)``: the in-process result with the server's defaults (cached)."""
    cache = {}

    def get(name: str, **options):
        key = (name, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = reference.transcribe(str(clip(name)), **{**SERVER_DEFAULTS, **options})
        return cache[key]

    return get


def _close_floats(tree):
    """``tree`` with every float compared to 1e-4 relative: the server and this process decode the
    same tokens, but their log-probabilities may differ in the last digits (float summation order
    follows each process's threads)."""
    if isinstance(tree, float):
        return pytest.approx(tree, rel=1e-4)
    if isinstance(tree, dict):
        return {k: _close_floats(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_close_floats(v) for v in tree]
    return tree


def _transcribe(server, path, **kw):
    with open(path, "rb") as f:
        return server.client().audio.transcriptions.create(file=f, model=kw.pop("model", TINY), **kw)


def test_json_default_matches_engine(tiny_server, clip, ref):
    out = _transcribe(tiny_server, clip(JFK))
    expected = ref(JFK)
    assert out.text == expected.text.strip()
    assert "ask not what your country can do for you" in out.text
    extra = out.model_extra or {}
    assert extra.get("language") == "en"
    assert out.usage is not None and out.usage.type == "duration" and out.usage.seconds == pytest.approx(11.0)


@pytest.mark.parametrize("fmt", ["text", "srt", "vtt"])
def test_text_formats_match_engine(tiny_server, clip, ref, fmt):
    out = _transcribe(tiny_server, clip(JFK), response_format=fmt)
    assert isinstance(out, str)
    assert out == format_output(ref(JFK), fmt)


def test_text_formats_content_type(tiny_server, clip):
    for fmt, ctype in (
        ("text", "text/plain"),
        ("srt", "text/plain"),
        ("vtt", "text/vtt"),
        ("json", "application/json"),
    ):
        with open(clip(JFK), "rb") as f:
            r = tiny_server.post_audio(
                files={"file": ("jfk.wav", f, "audio/wav")}, data={"model": TINY, "response_format": fmt}
            )
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith(ctype)


def test_verbose_json_matches_engine(tiny_server, clip, ref):
    out = _transcribe(tiny_server, clip(JFK), response_format="verbose_json")
    expected = _close_floats(verbose_json_dict(ref(JFK)))
    body = out.model_dump(exclude_none=True)
    assert body.pop("usage") == {"type": "duration", "seconds": pytest.approx(11.0)}
    assert body == expected
    assert out.language == "english" and out.duration == pytest.approx(11.0)
    assert out.words is None  # segment granularity only, by default


def test_word_and_segment_timestamps(tiny_server, clip, ref):
    out = _transcribe(
        tiny_server, clip(MULTI), response_format="verbose_json", timestamp_granularities=["word", "segment"]
    )
    expected = _close_floats(verbose_json_dict(ref(MULTI, word_timestamps=True), words=True))
    body = out.model_dump(exclude_none=True)
    body.pop("usage")
    assert body == expected
    segments, words = out.segments, out.words
    assert len(segments) >= 2 and len(words) >= 20
    assert [s.id for s in segments] == list(range(len(segments)))
    for a, b in zip(segments, segments[1:]):
        assert a.start <= a.end <= b.start + 1e-6
    for a, b in zip(words, words[1:]):
        assert a.start <= a.end <= b.start + 1e-6
    assert 0 <= words[0].start and words[-1].end <= out.duration + 0.02
    assert " ".join(w.word for w in words).split() == out.text.split()
    # each word lies within a segment
    for w in words:
        assert any(s.start - 0.02 <= w.start and w.end <= s.end + 0.02 for s in segments), w


def test_word_granularity_only(tiny_server, clip):
    out = _transcribe(tiny_server, clip(JFK), response_format="verbose_json", timestamp_granularities=["word"])
    assert out.segments is None  # OpenAI: only the granularities asked for are populated
    assert [w.word for w in out.words][:3] == ["And", "so", "my"]


def test_granularities_need_verbose_json(tiny_server, clip):
    with pytest.raises(openai.BadRequestError) as e:
        _transcribe(tiny_server, clip(JFK), response_format="json", timestamp_granularities=["word"])
    assert e.value.body["param"] == "timestamp_granularities"


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_stream_equals_non_stream(tiny_server, clip, ref, fmt):
    expected = ref(MULTI).text.strip()
    with open(clip(MULTI), "rb") as f:
        stream = tiny_server.client().audio.transcriptions.create(file=f, model=TINY, stream=True, response_format=fmt)
        events = list(stream)
    deltas = [e for e in events if e.type == "transcript.text.delta"]
    done = [e for e in events if e.type == "transcript.text.done"]
    assert len(done) == 1 and events[-1] is done[0]
    assert len(deltas) >= 2  # one per decoded segment, sent as they are decoded
    assert "".join(d.delta for d in deltas) == done[0].text == expected
    assert done[0].text == _transcribe(tiny_server, clip(MULTI)).text


def test_stream_wire_format(tiny_server, clip):
    with open(clip(JFK), "rb") as f:
        r = tiny_server.post_audio(files={"file": ("jfk.wav", f)}, data={"model": TINY, "stream": "true"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in r.text.split("\n\n") if b]
    assert all(b.startswith("data: ") for b in blocks)
    assert blocks[-1] == "data: [DONE]"
    payloads = [json.loads(b[6:]) for b in blocks[:-1]]
    assert [p["type"] for p in payloads][-1] == "transcript.text.done"
    assert {p["type"] for p in payloads[:-1]} == {"transcript.text.delta"}


def test_stream_needs_json_or_text(tiny_server, clip):
    with pytest.raises(openai.BadRequestError) as e:
        with open(clip(JFK), "rb") as f:
            tiny_server.client().audio.transcriptions.create(
                file=f, model=TINY, stream=True, response_format="verbose_json"
            )
    assert e.value.body["param"] == "stream"


def test_prompt_and_temperature_map_to_engine_options(tiny_server, clip, ref):
    out = _transcribe(tiny_server, clip(JFK), prompt="President Kennedy's inaugural address.")
    assert out.text == ref(JFK, initial_prompt="President Kennedy's inaugural address.").text.strip()
    # temperature > 0: that one temperature (sampled with oasr's `seed` extension, so the engine's
    # result for the same seed is the reference)
    out = _transcribe(tiny_server, clip(JFK), temperature=0.7, response_format="verbose_json", extra_body={"seed": 3})
    assert [s.temperature for s in out.segments] == pytest.approx([0.7] * len(out.segments))
    assert out.text == ref(JFK, temperature=0.7, seed=3).text.strip()


def test_extension_fields_reach_the_whisper_decode(tiny_server, clip, ref):
    """``max_new_tokens`` (a window budget: the cut window says "length") and ``repetition_penalty``
    through ``extra_body``, equal to the engine's result for the same options."""
    out = _transcribe(tiny_server, clip(JFK), response_format="verbose_json", extra_body={"max_new_tokens": 5})
    want = ref(JFK, max_new_tokens=5)
    assert out.text == want.text.strip() and out.model_extra["finish_reason"] == want.finish_reason == "length"
    assert _transcribe(tiny_server, clip(JFK), response_format="verbose_json").model_extra["finish_reason"] == "stop"
    out = _transcribe(tiny_server, clip(JFK), extra_body={"repetition_penalty": 1.5})
    assert out.text == ref(JFK, repetition_penalty=1.5).text.strip()


def test_language_code(tiny_server, clip, ref):
    assert _transcribe(tiny_server, clip(JFK), language="en").text == ref(JFK).text.strip()
    with pytest.raises(openai.BadRequestError) as e:
        _transcribe(tiny_server, clip(JFK), language="fr")  # tiny.en is English-only
    assert e.value.body["param"] == "language"
    assert e.value.body["code"] == "invalid_language"
    assert "'fr' (French) is not a language of WhisperModel; it has: en (English)" in e.value.body["message"]


def test_served_model_names(tiny_server, clip):
    out = _transcribe(tiny_server, clip(JFK), model="whisper-1")
    assert "ask not what your country" in out.text


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the client marks translations deprecated
def test_translation_refused_by_english_only_model(tiny_server, clip):
    with pytest.raises(openai.BadRequestError) as e:
        with open(clip(JFK), "rb") as f:
            tiny_server.client().audio.translations.create(file=f, model=TINY)
    assert e.value.status_code == 400
    assert e.value.body == {
        "message": "task='translate' needs a multilingual model; this one is English-only",
        "type": "invalid_request_error",
        "param": "model",
        "code": "unsupported_task",
    }


def test_models(tiny_server):
    models = tiny_server.client().models.list()
    assert [m.id for m in models.data] == [TINY, "whisper-1"]
    assert all(m.object == "model" and m.owned_by == "oasr" and m.created > 0 for m in models.data)
    assert tiny_server.client().models.retrieve("whisper-1").id == "whisper-1"
    with pytest.raises(openai.NotFoundError):
        tiny_server.client().models.retrieve("nope")
    r = httpx.get(tiny_server.base_url + "/v1/models")
    assert r.json()["object"] == "list"


def test_health_and_metrics(tiny_server, clip):
    _transcribe(tiny_server, clip(JFK))
    r = httpx.get(tiny_server.base_url + "/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    r = httpx.get(tiny_server.base_url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    m = tiny_server.metrics()
    for name in (
        "oasr_requests_in_flight",
        "oasr_queue_depth",
        "oasr_running_batch_rows",
        "oasr_decode_joins_running_total",
        "oasr_audio_seconds_total",
        "oasr_requests_cancelled_total",
    ):
        assert name in m, name
    assert any(k.startswith("oasr_request_latency_seconds_bucket") for k in m)
    assert metric(m, "oasr_requests_total", endpoint="transcriptions", status="200") >= 1
