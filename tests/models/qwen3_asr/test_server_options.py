"""oasr's per-request extensions of ``/v1/audio/transcriptions`` on a speech-LLM, through a real
``oasr serve`` of the tiny Qwen3-ASR and the official ``openai`` client (``extra_body``):
``max_new_tokens`` (over the server's ``--max-new-tokens``), ``repetition_penalty`` (over
``--repetition-penalty``) and ``seed``; a result the budget cut has ``finish_reason="length"`` in
``verbose_json`` and in the stream's last event. Every answer equals the in-process engine's for
the same options."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")

from tests.server.conftest import ServerProcess  # noqa: E402

CLIP = "jfk.wav"
NAME = "qwen3-tiny"
SERVER = dict(max_new_tokens=24, repetition_penalty=2.0)  # `oasr serve` flags: every request's defaults


@pytest.fixture(scope="module")
def server(reference, tmp_path_factory):
    flags = [
        "--max-new-tokens",
        str(SERVER["max_new_tokens"]),
        "--repetition-penalty",
        str(SERVER["repetition_penalty"]),
    ]
    proc = ServerProcess(
        ["--model", str(reference.path), "--served-model-name", NAME, *flags],
        tmp_path_factory.mktemp("qwen3_server") / "server.log",
    )
    yield proc
    proc.stop()


def _verbose(server, audio_dir, **extra_body):
    with open(audio_dir / CLIP, "rb") as f:
        answer = server.client().audio.transcriptions.create(
            model=NAME, file=f, response_format="verbose_json", extra_body=extra_body or None
        )
    return answer, [t for s in answer.segments for t in s.tokens]


def _engine_tokens(engine, audio_dir, **options):
    out = engine.transcribe(str(audio_dir / CLIP), **{**SERVER, **options})
    return out, [t for s in out.segments for t in s.tokens]


def test_server_flags_are_every_request_s_defaults(server, engine, audio_dir):
    answer, tokens = _verbose(server, audio_dir)
    want, want_tokens = _engine_tokens(engine, audio_dir)
    assert tokens == want_tokens and len(tokens) == SERVER["max_new_tokens"]
    assert answer.text == want.text
    assert answer.model_extra["finish_reason"] == want.finish_reason == "length"
    plain = engine.transcribe(str(audio_dir / CLIP), max_new_tokens=SERVER["max_new_tokens"])
    assert [t for s in plain.segments for t in s.tokens] != tokens, "the server's penalty should change the decode"


def test_request_fields_override_the_server_s(server, engine, audio_dir):
    answer, tokens = _verbose(server, audio_dir, max_new_tokens=30, repetition_penalty=1.5)
    _, want = _engine_tokens(engine, audio_dir, max_new_tokens=30, repetition_penalty=1.5)
    _, server_s = _engine_tokens(engine, audio_dir, max_new_tokens=30)
    assert tokens == want and len(tokens) == 30 and want != server_s
    assert answer.model_extra["finish_reason"] == "length"


def test_seed_replays_and_no_seed_draws_afresh(server, engine, audio_dir):
    """At temperature 1 the tiny random LM samples up to 24 tokens; three unseeded draws agree with
    negligible probability. (A draw may sample the end token early, so lengths are not asserted.)"""
    sampled = dict(temperature=1.0)
    with_seed = [_verbose(server, audio_dir, seed=9, **sampled)[1] for _ in range(2)]
    _, want = _engine_tokens(engine, audio_dir, seed=9, temperature=1.0)
    assert with_seed[0] == with_seed[1] == want
    draws = {tuple(_verbose(server, audio_dir, **sampled)[1]) for _ in range(3)}
    assert len(draws) > 1, "unseeded requests replayed the same sample"


def test_the_stream_s_last_event_says_length(server, engine, audio_dir):
    with open(audio_dir / CLIP, "rb") as f:
        events = list(server.client().audio.transcriptions.create(model=NAME, file=f, stream=True))
    done = [e for e in events if e.type == "transcript.text.done"]
    want, _ = _engine_tokens(engine, audio_dir)
    assert len(done) == 1 and done[0].text == want.text
    assert done[0].model_extra["finish_reason"] == "length"


@pytest.mark.parametrize(
    ("field", "value"), [("max_new_tokens", 0), ("max_new_tokens", "many"), ("seed", 1.5), ("repetition_penalty", 0)]
)
def test_bad_extension_values_are_400_naming_the_field(server, audio_dir, field, value):
    with open(audio_dir / CLIP, "rb") as f, pytest.raises(openai.BadRequestError) as err:
        server.client().audio.transcriptions.create(model=NAME, file=f, extra_body={field: value})
    assert err.value.body["param"] == field and err.value.body["code"] == "invalid_value"
    assert server.alive()


def test_a_model_that_cannot_stream_refuses_the_websocket_upgrade_with_400(server, engine):
    """A speech-LLM times no words, so neither its encoder nor local agreement can stream it."""
    pytest.importorskip("websockets")
    from websockets.exceptions import InvalidStatus

    from tests.streaming.test_websocket import run, session

    with pytest.raises(ValueError, match="cannot time words"):
        engine.open_stream()
    with pytest.raises(InvalidStatus) as e:
        run(session(server, {"sample_rate": 16000}))
    assert e.value.response.status_code == 400
    error = __import__("json").loads(e.value.response.body)["error"]
    assert error["code"] == "streaming_unsupported" and "cannot time words" in error["message"]
    assert server.healthy()
