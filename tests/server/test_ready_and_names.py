"""What ``oasr serve`` tells its user: one ready line on stderr once ``/health`` is ok, and the
names it answers to (``--served-model-name`` aliases, OpenAI examples' ``whisper-1``)."""

from __future__ import annotations

import time

import openai
import pytest

from .conftest import TINY, needs_tiny

pytestmark = pytest.mark.real_weights


def ready_line(server, expected: str, wait_s: float = 10.0) -> list[str]:
    """The log's ``oasr serve: ready`` lines once ``expected`` is among them (the server answered
    /health before the fixture returned; the line may still be on its way through the pipe)."""
    deadline = time.monotonic() + wait_s
    while True:
        lines = [line for line in server.log().splitlines() if line.startswith("oasr serve: ready")]
        if expected in lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


def test_serve_prints_one_ready_line(tiny_server):
    expected = f"oasr serve: ready at {tiny_server.base_url} (models: {TINY}, whisper-1; API key: off; device: cpu)"
    assert ready_line(tiny_server, expected) == [expected], tiny_server.log()[-3000:]


def test_every_alias_is_listed_and_answers(tiny_server, clip):
    client = tiny_server.client()
    assert [m.id for m in client.models.list().data] == [TINY, "whisper-1"]
    for name in (TINY, "whisper-1"):
        with open(clip("jfk.wav"), "rb") as f:
            out = client.audio.transcriptions.create(file=f, model=name)
        assert "ask not what your country" in out.text.lower(), name


@needs_tiny
def test_an_unknown_model_names_the_served_ones_and_how_to_add_an_alias(clip):
    """A server started without aliases answers an OpenAI example's "whisper-1" with 404 whose
    message names what it serves and the flag that adds the name."""
    from starlette.testclient import TestClient

    from oasr.server.app import create_app
    from oasr.server.settings import ServerSettings

    with TestClient(create_app(ServerSettings(model=TINY))) as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http, max_retries=0)
        assert [m.id for m in client.models.list().data] == [TINY]
        hint = f"this server serves ['{TINY}'] (to answer to 'whisper-1' too, start it with "
        hint += f"--served-model-name {TINY} whisper-1)"
        with pytest.raises(openai.NotFoundError) as e:
            with open(clip("jfk.wav"), "rb") as f:
                client.audio.transcriptions.create(file=f, model="whisper-1")
        assert e.value.body["code"] == "model_not_found" and e.value.body["param"] == "model"
        assert e.value.body["message"] == f"the model 'whisper-1' does not exist; {hint}"
        with pytest.raises(openai.NotFoundError) as e:
            client.models.retrieve("whisper-1")
        assert e.value.body["message"] == f"the model 'whisper-1' does not exist; {hint}"


def test_ready_line_says_whether_a_key_is_needed_and_never_shows_it():
    from oasr.server.settings import ServerSettings
    from oasr.server.settings import ready_line as line

    key = "sk-test-oasr-0123456789"
    on = line(ServerSettings(model=TINY, api_key=key, host="0.0.0.0"), 8000, "cuda")
    assert on == f"oasr serve: ready at http://0.0.0.0:8000 (models: {TINY}; API key: on; device: cuda)"
    v6 = line(ServerSettings(served_model_names=("a", "b"), host="::1"), 9000, "cpu")
    assert v6 == "oasr serve: ready at http://[::1]:9000 (models: a, b; API key: off; device: cpu)"
