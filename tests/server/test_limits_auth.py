"""API key, upload limit and request timeout, on a second ``oasr serve`` started with
``--api-key``, ``--max-upload-mb 2`` and ``--request-timeout 1.5``."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from .conftest import TINY, ServerProcess, metric, wav_bytes

pytestmark = pytest.mark.real_weights

KEY = "sk-test-oasr-0123456789"
LIMIT_MB = 2
TIMEOUT_S = 1.5


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from oasr.models.bundled import bundled_path

    if bundled_path(TINY) is None:
        pytest.skip("tiny.en is not installed")
    s = ServerProcess(
        [
            "--model",
            TINY,
            "--api-key",
            KEY,
            "--max-upload-mb",
            str(LIMIT_MB),
            "--request-timeout",
            str(TIMEOUT_S),
        ],
        tmp_path_factory.mktemp("restricted") / "server.log",
        api_key=KEY,
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def short_clip(clip):
    return clip("roots_27_morris_0352.wav").read_bytes()  # 1.2 s: "in a week's journey"


def _ok(server, data: bytes) -> None:
    r = server.post_audio(files={"file": ("a.wav", data)}, data={"model": TINY})
    assert r.status_code == 200, r.text
    assert "week" in r.json()["text"].lower()


def test_api_key_required(server, clip, short_clip):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}, {"Authorization": f"Basic {KEY}"}):
        r = httpx.post(
            server.base_url + "/v1/audio/transcriptions",
            files={"file": ("a.wav", short_clip)},
            data={"model": TINY},
            headers=headers,
        )
        assert r.status_code == 401, (headers, r.text)
        assert r.json()["error"]["code"] == "invalid_api_key"
        assert r.headers["www-authenticate"] == "Bearer"
        assert httpx.get(server.base_url + "/v1/models", headers=headers).status_code == 401
    wrong = openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        with open(clip("jfk.wav"), "rb") as f:
            wrong.audio.transcriptions.create(file=f, model=TINY)
    assert e.value.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    # the right key works, and /health, /metrics stay open
    assert [m.id for m in server.client().models.list().data] == [TINY]
    _ok(server, short_clip)
    assert httpx.get(server.base_url + "/health").status_code == 200
    assert httpx.get(server.base_url + "/metrics").status_code == 200
    assert metric(server.metrics(), "oasr_requests_total", endpoint="transcriptions", status="401") >= 5


def _over_limit_wav() -> bytes:
    import numpy as np

    n = int(LIMIT_MB * 1024 * 1024 / 2) + 16000  # 16-bit samples: just over the limit
    return wav_bytes(np.random.default_rng(0).standard_normal(n) * 0.01)


def test_upload_limit_from_content_length(server, short_clip):
    data = _over_limit_wav()
    r = server.post_audio(files={"file": ("big.wav", data)}, data={"model": TINY})
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "upload_too_large"
    assert int(r.request.headers["content-length"]) > LIMIT_MB * 1024 * 1024
    _ok(server, short_clip)


def test_upload_limit_without_content_length(server, short_clip):
    """A chunked body (no Content-Length) is counted as it arrives."""
    data = _over_limit_wav()
    boundary = "oasr-test-boundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\n{TINY}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()

    def body():
        yield head
        for i in range(0, len(data), 65536):
            yield data[i : i + 65536]
        yield tail

    r = httpx.post(
        server.base_url + "/v1/audio/transcriptions",
        content=body(),
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}", **server.headers()},
        timeout=60,
    )
    assert "content-length" not in r.request.headers
    assert r.request.headers["transfer-encoding"] == "chunked"
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "upload_too_large"
    _ok(server, short_clip)
    # the same chunked encoding under the limit is accepted
    data_ok = short_clip

    def small():
        yield head
        yield data_ok
        yield tail

    r = httpx.post(
        server.base_url + "/v1/audio/transcriptions",
        content=small(),
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}", **server.headers()},
        timeout=60,
    )
    assert r.status_code == 200, r.text


def test_request_timeout_is_504(server, clip, short_clip):
    before = server.metrics()
    t0 = time.monotonic()
    with open(clip("moonshine_two_cities_16k.wav"), "rb") as f:  # 44 s: ~4 s of decoding with tiny.en here
        r = server.post_audio(files={"file": ("long.wav", f)}, data={"model": TINY})
    elapsed = time.monotonic() - t0
    assert r.status_code == 504, r.text
    assert r.json()["error"]["type"] == "timeout_error"
    assert elapsed < TIMEOUT_S + 1.5
    _ok(server, short_clip)
    after = server.metrics()
    assert metric(after, "oasr_requests_total", endpoint="transcriptions", status="504") == 1
    assert metric(after, "oasr_engine_requests_total", outcome="aborted") == (
        metric(before, "oasr_engine_requests_total", outcome="aborted") + 1
    )
    assert after["oasr_running_batch_rows"] == 0 and after["oasr_queue_depth"] == 0
