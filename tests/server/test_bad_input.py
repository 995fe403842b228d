"""Bad input to a real ``oasr serve``: each is answered with the right 4xx in OpenAI's
error shape, and the server answers the next good request correctly."""

from __future__ import annotations

import json
import os
import re

import httpx
import numpy as np
import openai
import pytest

from .conftest import TINY, float_wav, metric, wav_bytes

pytestmark = pytest.mark.real_weights

JFK_TEXT = "And so my fellow Americans ask not what your country can do for you ask what you can do for your country"


@pytest.fixture(scope="module")
def still_serving(tiny_server, clip):
    """``still_serving()``: assert a good request is answered correctly."""
    data = clip("jfk.wav").read_bytes()

    def check():
        assert tiny_server.alive()
        r = tiny_server.post_audio(files={"file": ("jfk.wav", data)}, data={"model": TINY})
        assert r.status_code == 200, r.text
        assert r.json()["text"] == JFK_TEXT

    check()
    return check


def _error(r: httpx.Response, status: int, param: str | None = None, code: str | None = None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


def _bad_audio(clip) -> dict[str, bytes]:
    flac = clip("1272-141231-0002.flac").read_bytes()
    rng = np.random.default_rng(0)
    return {
        "empty": b"",
        "truncated_flac": flac[: int(len(flac) * 0.6)],
        "random_bytes": rng.integers(0, 256, 200_000, dtype=np.uint8).tobytes(),
        "text_file": ("This is a text file, not audio.\n" * 200).encode(),
        "0.05s": wav_bytes(rng.standard_normal(800) * 0.1),
    }


@pytest.mark.parametrize("case", ["empty", "truncated_flac", "random_bytes", "text_file", "0.05s"])
def test_bad_audio_is_400(tiny_server, clip, still_serving, case):
    data = _bad_audio(clip)[case]
    r = tiny_server.post_audio(files={"file": (f"{case}.wav", data)}, data={"model": TINY})
    err = _error(r, 400, param="file", code="invalid_audio")
    expected = {
        "empty": "empty",
        "truncated_flac": "truncated",
        "random_bytes": "not an audio file",
        "text_file": "not an audio file",
        "0.05s": "the minimum is 0.1 s",
    }[case]
    assert expected in err["message"]
    assert "SpooledTemporaryFile" not in err["message"]
    still_serving()


@pytest.mark.parametrize("case", ["1e19", "1e30", "float32_max", "speech_with_one_1e19_sample", "int16_as_floats"])
def test_samples_far_outside_full_scale_are_400(tiny_server, clip, still_serving, case):
    """A float WAV of 1e19-3.4e38 samples gave NaN features, a failed batch, a quarantine rerun and
    500 after ~40 s; it is 400 ``invalid_audio`` now, refused before any decode work."""
    from oasr.audio import load_audio

    speech = load_audio(clip("jfk.wav"))[:32000]
    x = {
        "1e19": np.full(32000, 1e19),
        "1e30": np.full(32000, 1e30),
        "float32_max": np.full(32000, np.finfo(np.float32).max),
        "speech_with_one_1e19_sample": np.where(np.arange(32000) == 16000, 1e19, speech),
        "int16_as_floats": np.round(speech * 32767.0),
    }[case]
    r = tiny_server.post_audio(files={"file": (f"{case}.wav", float_wav(x))}, data={"model": TINY}, timeout=20)
    err = _error(r, 400, param="file", code="invalid_audio")
    assert "far outside the [-1, 1] of float audio" in err["message"] and f"'{case}.wav'" in err["message"]
    still_serving()


def test_exactly_minimum_duration_succeeds(tiny_server):
    rng = np.random.default_rng(1)
    for n in (1600, 1601):  # exactly 0.1 s at 16 kHz, and a sample more
        r = tiny_server.post_audio(
            files={"file": ("short.wav", wav_bytes(rng.standard_normal(n) * 0.01))}, data={"model": TINY}
        )
        assert r.status_code == 200, (n, r.text)
        assert isinstance(r.json()["text"], str)
    # the same 0.1 s at 44.1 kHz stereo (resampled to 1600 samples)
    r = tiny_server.post_audio(
        files={"file": ("short.wav", wav_bytes(rng.standard_normal((4410, 2)) * 0.01, 44100, 2))}, data={"model": TINY}
    )
    assert r.status_code == 200, r.text
    r = tiny_server.post_audio(files={"file": ("short.wav", wav_bytes(np.zeros(1599)))}, data={"model": TINY})
    _error(r, 400, param="file")


@pytest.mark.parametrize(
    "fields, param, code",
    [
        ({"response_format": "xml"}, "response_format", "invalid_value"),
        ({"temperature": "-0.5"}, "temperature", "invalid_value"),
        ({"temperature": "1.5"}, "temperature", "invalid_value"),
        ({"temperature": "abc"}, "temperature", "invalid_value"),
        ({"temperature": "nan"}, "temperature", "invalid_value"),
        ({"stream": "maybe"}, "stream", "invalid_value"),
        ({"timestamp_granularities[]": "sentence", "response_format": "verbose_json"}, "timestamp_granularities", None),
        ({"language": "xx"}, "language", "invalid_language"),
        ({"language": "klingon"}, "language", "invalid_language"),
        ({"language": "de"}, "language", "invalid_language"),  # tiny.en is English-only
        ({"foo": "1"}, "foo", "unknown_parameter"),
        ({"include[]": "logprobs"}, "include", "unsupported_parameter"),
        ({"chunking_strategy": "manual"}, "chunking_strategy", "invalid_value"),
        ({"model": ""}, "model", "model_not_found"),
    ],
)
def test_bad_fields_are_400(tiny_server, clip, still_serving, fields, param, code):
    data = {"model": TINY, **fields}
    with open(clip("jfk.wav"), "rb") as f:
        r = tiny_server.post_audio(files={"file": ("jfk.wav", f)}, data=data)
    status = 404 if code == "model_not_found" else 400
    _error(r, status, param=param, code=code)
    still_serving()


def test_bad_fields_through_openai_client(tiny_server, clip, still_serving):
    client = tiny_server.client()
    with open(clip("jfk.wav"), "rb") as f:
        with pytest.raises(openai.BadRequestError) as e:
            client.audio.transcriptions.create(file=f, model=TINY, response_format="xml")  # type: ignore[arg-type]
    assert e.value.body["param"] == "response_format"
    with open(clip("jfk.wav"), "rb") as f:
        with pytest.raises(openai.BadRequestError) as e:
            client.audio.transcriptions.create(file=f, model=TINY, temperature=-1)
    assert e.value.body["param"] == "temperature"
    with open(clip("jfk.wav"), "rb") as f:
        with pytest.raises(openai.BadRequestError) as e:
            client.audio.transcriptions.create(file=f, model=TINY, language="xx")
    assert e.value.body["param"] == "language" and e.value.body["code"] == "invalid_language"
    assert "language 'xx' is not a language of WhisperModel; it has: en (English)" in e.value.body["message"]
    with open(clip("jfk.wav"), "rb") as f:
        with pytest.raises(openai.NotFoundError) as e:
            client.audio.transcriptions.create(file=f, model="whisper-large-v9")
    assert e.value.status_code == 404 and e.value.body["code"] == "model_not_found"
    still_serving()


def test_missing_and_misplaced_file(tiny_server, clip, still_serving):
    r = tiny_server.post_audio(files={"model": (None, TINY)})
    _error(r, 400, param="file", code="missing")
    r = tiny_server.post_audio(files={"file": (None, "not a file part"), "model": (None, TINY)})
    _error(r, 400, param="file")
    data = clip("jfk.wav").read_bytes()
    r = tiny_server.post_audio(files=[("file", ("a.wav", data)), ("file", ("b.wav", data))], data={"model": TINY})
    _error(r, 400, param="file")
    r = tiny_server.post_audio(files={"file": ("a.wav", data)}, data={})
    _error(r, 400, param="model", code="missing")
    r = tiny_server.post_audio(files={"file": ("a.wav", data), "language": ("x.txt", b"en")}, data={"model": TINY})
    _error(r, 400, param="language")
    r = tiny_server.post_audio(files={"file": ("a.wav", data)}, data={"model": [TINY, TINY]})
    _error(r, 400, param="model")
    still_serving()


def test_translations_fields(tiny_server, clip, still_serving):
    data = clip("jfk.wav").read_bytes()
    for field in ("language", "stream", "timestamp_granularities[]"):
        r = tiny_server.post_audio(
            files={"file": ("a.wav", data)}, data={"model": TINY, field: "en"}, route="translations"
        )
        _error(r, 400, param=field.rstrip("[]"), code="unsupported_parameter")
    still_serving()


def test_not_multipart(tiny_server, still_serving):
    r = httpx.post(tiny_server.base_url + "/v1/audio/transcriptions", json={"model": TINY, "file": "x"})
    _error(r, 400, code="invalid_content_type")
    r = httpx.post(
        tiny_server.base_url + "/v1/audio/transcriptions",
        content=b"--xyz\r\nnot really multipart",
        headers={"content-type": "multipart/form-data; boundary=xyz"},
    )
    assert r.status_code == 400
    still_serving()


def test_routes_answer_openai_errors(tiny_server):
    r = httpx.get(tiny_server.base_url + "/v1/audio/transcriptions")
    _error(r, 405)
    r = httpx.get(tiny_server.base_url + "/v1/nothing-here")
    _error(r, 404)


def test_error_statuses_are_counted(tiny_server, still_serving):
    before = tiny_server.metrics()
    r = httpx.post(
        tiny_server.base_url + "/v1/audio/transcriptions", files={"file": ("e.wav", b"")}, data={"model": TINY}
    )
    assert r.status_code == 400
    after = tiny_server.metrics()
    key = dict(endpoint="transcriptions", status="400")
    assert metric(after, "oasr_requests_total", **key) == metric(before, "oasr_requests_total", **key) + 1
    assert json.loads(r.text)["error"]["param"] == "file"
    assert os.path.exists(f"/proc/{tiny_server.pid}")


def test_too_short_message_states_a_duration_below_the_minimum(tiny_server):
    r = tiny_server.post_audio(files={"file": ("short.wav", wav_bytes(np.zeros(1599)))}, data={"model": TINY})
    err = _error(r, 400, param="file")
    m = re.search(r"audio is ([0-9.]+) s long; the minimum is ([0-9.]+) s", err["message"])
    assert m, err["message"]
    assert float(m.group(1)) < float(m.group(2)), err["message"]
