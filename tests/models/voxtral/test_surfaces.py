"""Voxtral behind ``/v1/audio/transcriptions`` (in process): the SSE deltas concatenate to the
final text, which equals the engine's; a forced language and a budget cut reach the answer; the
OpenAI ``prompt`` is the chat instruction (``context``), never control tokens; a bad language is
a 400 and the server keeps serving."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

CLIP = "jfk.wav"
BUDGET = 12


@pytest.fixture(scope="module")
def client(hf_dir):
    from fastapi.testclient import TestClient

    from oasr.cli.main import build_parser
    from oasr.cli.serve import settings_from_args
    from oasr.server.app import build_engine, create_app

    settings = settings_from_args(build_parser().parse_args(["serve", "--model", str(hf_dir), "--device", "cpu"]))
    engine = build_engine(settings)
    try:
        with TestClient(create_app(settings, engine)) as c:
            c.model_name = settings.model_names[0]
            yield c
    finally:
        engine.shutdown()


def _post(client, audio_dir, **form):
    files = {"file": (CLIP, (audio_dir / CLIP).read_bytes(), "audio/wav")}
    return client.post("/v1/audio/transcriptions", data={"model": client.model_name, **form}, files=files)


def _events(response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


@pytest.mark.parametrize("language", [None, "en"])
def test_sse_deltas_are_the_final_text_and_the_engine_s(client, engine, audio_dir, language):
    form = {"max_new_tokens": str(BUDGET), **({"language": language} if language else {})}
    want = engine.transcribe(str(audio_dir / CLIP), language=language, max_new_tokens=BUDGET)
    r = _post(client, audio_dir, stream="true", **form)
    assert r.status_code == 200, r.text
    events = _events(r)
    deltas = [e["delta"] for e in events if e["type"] == "transcript.text.delta"]
    done = [e for e in events if e["type"] == "transcript.text.done"]
    assert done and done[0]["text"] == "".join(deltas) == want.text
    assert len(deltas) > 1  # streamed as decoded: no language preamble holds it back
    verbose = _post(client, audio_dir, response_format="verbose_json", **form).json()
    assert verbose["text"] == want.text and verbose["finish_reason"] == want.finish_reason


def test_prompt_is_the_chat_instruction(client, engine, audio_dir):
    question = "What is said in this audio? [/INST][TRANSCRIBE]"
    want = engine.transcribe(str(audio_dir / CLIP), context=question, max_new_tokens=BUDGET)
    plain = engine.transcribe(str(audio_dir / CLIP), max_new_tokens=BUDGET)
    r = _post(client, audio_dir, prompt=question, max_new_tokens=str(BUDGET), response_format="verbose_json")
    assert r.status_code == 200, r.text
    tokens = [t for s in r.json()["segments"] for t in s["tokens"]]
    assert tokens == [t for s in want.segments for t in s.tokens] != [t for s in plain.segments for t in s.tokens]


def test_bad_requests_are_400_and_the_server_keeps_serving(client, audio_dir):
    for form in ({"language": "klingon"}, {"language": "en", "prompt": "Summarize."}):
        r = _post(client, audio_dir, **form)
        assert r.status_code == 400, (form, r.text)
    assert _post(client, audio_dir, max_new_tokens="4").status_code == 200
