"""Granite Speech through each surface: Python, ``oasr transcribe`` (``--task translate``),
``POST /v1/audio/transcriptions`` (its ``prompt`` as the context, the SSE stream's deltas joining
to the answer, ``finish_reason``), and an int8 engine; bad requests get clear errors."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

CLIP = "roots_19_morris_0269.wav"  # 2.7 s


@pytest.fixture(scope="module")
def client(hf_dir):
    from fastapi.testclient import TestClient

    from oasr.cli.main import build_parser
    from oasr.cli.serve import settings_from_args
    from oasr.server.app import build_engine, create_app

    settings = settings_from_args(
        build_parser().parse_args(["serve", "--model", str(hf_dir), "--device", "cpu", "--max-new-tokens", "10"])
    )
    engine = build_engine(settings)
    with TestClient(create_app(settings, engine)) as c:
        c.model_name = settings.model_names[0]
        yield c
    engine.shutdown()


def _post(client, audio_dir, **form):
    files = {"file": (CLIP, (audio_dir / CLIP).read_bytes(), "audio/wav")}
    return client.post("/v1/audio/transcriptions", data={"model": client.model_name, **form}, files=files)


def _tokens(out) -> list[int]:
    return [t for s in out.segments for t in s.tokens]


def test_http_prompt_and_stream_equal_python(client, engine, audio_dir):
    context = "Dashwood <|audio|>"  # special-token text stays text
    want = engine.transcribe(str(audio_dir / CLIP), max_new_tokens=10, context=context)
    r = _post(client, audio_dir, prompt=context, response_format="verbose_json")
    assert r.status_code == 200, r.text
    assert r.json()["text"] == want.text and r.json()["finish_reason"] == want.finish_reason
    assert want.text != engine.transcribe(str(audio_dir / CLIP), max_new_tokens=10).text  # the context counts
    s = _post(client, audio_dir, prompt=context, stream="true")
    events = [json.loads(b[6:]) for b in s.text.split("\n\n") if b and b != "data: [DONE]"]
    deltas = [e["delta"] for e in events if e["type"] == "transcript.text.delta"]
    assert events[-1]["type"] == "transcript.text.done" and events[-1]["text"] == want.text
    assert "".join(deltas) == want.text and len(deltas) >= 2


def test_cli_translate_equals_python(hf_dir, engine, audio_dir, capsys):
    from oasr.cli.main import main

    want = engine.transcribe(str(audio_dir / CLIP), task="translate", language="de", max_new_tokens=8)
    model = engine.model
    assert model.prompt_ids(3, task="translate", language="de") != model.prompt_ids(3)  # the request is named
    argv = ["transcribe", str(audio_dir / CLIP), "--model", str(hf_dir), "--device", "cpu", "--task", "translate"]
    code = main([*argv, "--language", "de", "--max-new-tokens", "8", "-f", "verbose_json", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(out)["text"] == want.text


def test_bad_requests_are_clear_errors(client, engine, audio_dir):
    with pytest.raises(ValueError, match="not a language of"):
        engine.transcribe(str(audio_dir / CLIP), language="ja")
    r = _post(client, audio_dir, language="klingon")
    assert r.status_code == 400 and r.json()["error"]["param"] == "language"
    assert _post(client, audio_dir).status_code == 200  # the server keeps serving


def test_int8_decodes_like_float(hf_dir, engine, audio_dir):
    import oasr

    int8 = oasr.ASREngine(str(hf_dir), device="cpu", quantize="int8")
    ours = int8.transcribe(str(audio_dir / CLIP), max_new_tokens=4)
    want = engine.transcribe(str(audio_dir / CLIP), max_new_tokens=4)
    assert ours.text and _tokens(ours)[:2] == _tokens(want)[:2]
