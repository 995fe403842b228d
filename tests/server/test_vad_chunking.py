"""``chunking_strategy`` on ``/v1/audio/transcriptions``: the form (``auto``, a
``server_vad`` object as JSON text or as the official client's bracketed fields), its
mapping onto VAD options, and a real ``oasr serve --model tiny.en`` transcribing clips
laid out with silences."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from starlette.datastructures import FormData, Headers, UploadFile

from oasr.server.errors import APIError
from oasr.server.protocol import FormError, ServerVad, TranscriptionRequest, TranslationRequest, parse_form
from oasr.server.serving import OpenAIServingTranscription
from oasr.server.settings import ServerSettings

from .conftest import SERVER_DEFAULTS, TINY, wav_bytes

SR = 16000


def _form(*items) -> FormData:
    upload = UploadFile(io.BytesIO(b"RIFF"), filename="a.wav", headers=Headers({"content-type": "audio/wav"}))
    return FormData([("file", upload), ("model", "m"), *items])


# -- the form and the options (no model) ------------------------------------------------------------


def test_chunking_strategy_forms():
    parse = lambda *items: parse_form(_form(*items), TranscriptionRequest)[0].chunking_strategy  # noqa: E731
    assert parse() is None and parse(("chunking_strategy", "")) is None
    assert parse(("chunking_strategy", "auto")) == "auto"
    assert parse(("chunking_strategy", '{"type": "server_vad", "threshold": 0.3}')) == ServerVad(
        type="server_vad", threshold=0.3
    )
    assert parse(
        ("chunking_strategy[type]", "server_vad"),
        ("chunking_strategy[prefix_padding_ms]", "300"),
        ("chunking_strategy[silence_duration_ms]", "500"),
    ) == ServerVad(type="server_vad", prefix_padding_ms=300, silence_duration_ms=500)


@pytest.mark.parametrize(
    "items, code",
    [
        ((("chunking_strategy", "manual"),), "invalid_value"),
        ((("chunking_strategy", '{"type": "client_vad"}'),), "invalid_value"),
        ((("chunking_strategy", '{"type": "server_vad", "threshold": 2}'),), "invalid_value"),
        ((("chunking_strategy", '{"type": "server_vad", "speed": 2}'),), "invalid_value"),
        ((("chunking_strategy", "{not json"),), "invalid_value"),
        ((("chunking_strategy[type]", "server_vad"), ("chunking_strategy[type]", "server_vad")), "invalid_value"),
        ((("chunking_strategy", "auto"), ("chunking_strategy[type]", "server_vad")), "invalid_value"),
    ],
)
def test_bad_chunking_strategy_is_refused(items, code):
    with pytest.raises(FormError) as e:
        parse_form(_form(*items), TranscriptionRequest)
    assert (e.value.param, e.value.code) == ("chunking_strategy", code)
    assert "chunking_strategy" in e.value.message


def test_chunking_strategy_is_for_transcriptions_only():
    with pytest.raises(FormError) as e:
        parse_form(_form(("chunking_strategy", "auto")), TranslationRequest)
    assert (e.value.param, e.value.code) == ("chunking_strategy", "unsupported_parameter")


class _RecordingEngine:
    """Stands in for the engine: records the options asked for; refuses VAD when told to."""

    def __init__(self, vad_installed: bool = True) -> None:
        self.vad_installed = vad_installed
        self.calls: list[dict] = []

    def make_options(self, **kwargs):
        from oasr.engine.config import TranscribeOptions

        self.calls.append(kwargs)
        if kwargs.get("vad_filter") and not self.vad_installed:
            raise ImportError("vad_filter needs the silero-vad package: pip install silero-vad")
        return TranscribeOptions.from_kwargs(**kwargs)


def test_chunking_strategy_maps_onto_vad_options():
    engine = _RecordingEngine()
    serving = OpenAIServingTranscription(engine, ServerSettings(), None)
    opts = serving.build_options(TranscriptionRequest(model="m", chunking_strategy="auto"))
    assert opts.vad_filter and opts.vad_parameters is None
    vad = ServerVad(type="server_vad", threshold=0.4, prefix_padding_ms=200, silence_duration_ms=700)
    opts = serving.build_options(TranscriptionRequest(model="m", chunking_strategy=vad))
    assert opts.vad_parameters == {"threshold": 0.4, "speech_pad_ms": 200, "min_silence_duration_ms": 700}
    opts = serving.build_options(TranscriptionRequest(model="m"))
    assert not opts.vad_filter


def test_chunking_strategy_without_silero_is_400():
    serving = OpenAIServingTranscription(_RecordingEngine(vad_installed=False), ServerSettings(), None)
    with pytest.raises(APIError) as e:
        serving.build_options(TranscriptionRequest(model="m", chunking_strategy="auto"))
    assert (e.value.status, e.value.param) == (400, "chunking_strategy")
    assert "needs the silero-vad package: pip install silero-vad" in e.value.message


# -- a real server ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recording(vad_recording):
    """The first three clips with their silences (31 s of speech), as samples and WAV bytes."""
    pytest.importorskip("silero_vad")
    end = vad_recording.spans[2][1] + 1.0
    samples = vad_recording.audio[: round(end * SR)]
    return samples, wav_bytes(samples)


@pytest.mark.real_weights
def test_auto_chunking_matches_the_engine(tiny_server, reference, recording, vad_recording):
    samples, data = recording
    r = tiny_server.post_audio(
        files={"file": ("three.wav", data)},
        data={"model": TINY, "chunking_strategy": "auto", "response_format": "verbose_json"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    expected = reference.transcribe(samples, vad_filter=True, **SERVER_DEFAULTS)
    assert body["text"] == expected.text
    assert [(s["start"], s["end"]) for s in body["segments"]] == [(s.start, s.end) for s in expected.segments]
    for seg in body["segments"]:
        assert vad_recording.clip_at(seg["start"]) is not None and vad_recording.clip_at(seg["end"]) is not None
    assert any(vad_recording.clip_at(s["start"]) == 2 for s in body["segments"])  # the third clip, past 30 s


@pytest.mark.real_weights
def test_server_vad_object_through_openai_client_and_streaming(tiny_server, recording):
    _, data = recording
    client = tiny_server.client()
    vad = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500}
    out = client.audio.transcriptions.create(file=("three.wav", data), model=TINY, chunking_strategy=vad)
    assert "ask not what your country can do for you" in out.text.lower()
    r = tiny_server.post_audio(
        files={"file": ("three.wav", data)}, data={"model": TINY, "chunking_strategy": "auto", "stream": "true"}
    )
    assert r.status_code == 200, r.text
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    deltas = "".join(e["delta"] for e in events if e["type"] == "transcript.text.delta")
    done = [e for e in events if e["type"] == "transcript.text.done"]
    assert done and deltas == done[0]["text"]


@pytest.mark.real_weights
def test_silence_and_bad_values(tiny_server):
    silence = wav_bytes(np.zeros(3 * SR))
    r = tiny_server.post_audio(files={"file": ("s.wav", silence)}, data={"model": TINY, "chunking_strategy": "auto"})
    assert r.status_code == 200, r.text
    assert r.json()["text"] == ""
    for value in ("manual", '{"type": "server_vad", "threshold": 5}'):
        r = tiny_server.post_audio(files={"file": ("s.wav", silence)}, data={"model": TINY, "chunking_strategy": value})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert (err["param"], err["code"]) == ("chunking_strategy", "invalid_value")
