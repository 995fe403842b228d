"""Voxtral Realtime live, on every streaming surface (``LockstepCore`` over the model's live
session): ``ASREngine.open_stream`` equals transformers' streaming ``generate`` fed the chunks
its documentation cuts; ``oasr stream``, the WebSocket ``/v1/audio/stream`` and the Realtime
route ``/v1/realtime`` send the in-process stream's text."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import numpy as np
import pytest
import torch

import oasr
from oasr.models.loaders import load_pretrained
from tests.models.voxtral_realtime.test_parity import _reference_stream

RATE = 16000
PIECE = 1600


@pytest.fixture(scope="module")
def engine64(tiny_voxtral_realtime):
    return oasr.ASREngine(load_pretrained(str(tiny_voxtral_realtime.path), dtype=torch.float64))


@pytest.fixture(scope="module")
def engine32(tiny_voxtral_realtime):
    """The server's engine settings (float32), in process."""
    return oasr.ASREngine(str(tiny_voxtral_realtime.path))


def _stream(engine, wave: np.ndarray, **options) -> list:
    stream = engine.open_stream(**options)
    events = []
    for i in range(0, len(wave), PIECE):
        events += stream.feed(wave[i : i + PIECE])
    return events + stream.finish()


def test_open_stream_equals_transformers_streaming_generate(engine64, tiny_voxtral_realtime):
    fx = tiny_voxtral_realtime
    wave = fx.clips[0]
    events = _stream(engine64, wave)
    kinds = [e.type for e in events]
    assert kinds[-2:] == ["final", "done"] and kinds.count("final") == 1
    final = events[-2]
    assert final.tokens == _reference_stream(fx, wave)
    assert final.text == engine64.model.text(final.tokens).strip()
    partials = [e.text for e in events if e.type == "partial"]
    assert partials and all(final.text.startswith(p) or not p for p in partials)


def test_open_stream_refuses_what_does_not_apply(engine64):
    with pytest.raises(ValueError, match="endpoint"):
        engine64.open_stream(endpoint=True)
    with pytest.raises(ValueError, match="greedily"):
        engine64.open_stream(temperature=0.7)


def test_oasr_stream_prints_the_stream(engine32, tiny_voxtral_realtime, audio_dir, monkeypatch):
    from oasr.cli.main import main
    from tests.models.voxtral_realtime.conftest import CLIPS

    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    code = main(["stream", str(audio_dir / CLIPS[0]), "--model", str(tiny_voxtral_realtime.path), "-f", "json"])
    assert code == 0
    expected = [e for e in _stream(engine32, tiny_voxtral_realtime.clips[0]) if e.type == "final"][0]
    assert json.loads(out.getvalue())["text"] == expected.text


@pytest.fixture(scope="module")
def served(tiny_voxtral_realtime):
    pytest.importorskip("openai")
    pytest.importorskip("websockets")
    pytest.importorskip("silero_vad")
    from oasr.engine.async_engine import AsyncEngine
    from oasr.server.settings import ServerSettings
    from tests.server.test_realtime import InProcessServer

    path = str(tiny_voxtral_realtime.path)
    server = InProcessServer(ServerSettings(model=path, served_model_names=("voxtral-rt",)), AsyncEngine(path))
    server.headers = dict  # no API key
    yield server
    server.stop()


def test_http_transcription_equals_the_engine(served, engine32, tiny_voxtral_realtime, audio_dir):
    import httpx

    from tests.models.voxtral_realtime.conftest import CLIPS

    with open(audio_dir / CLIPS[0], "rb") as f:
        r = httpx.post(
            served.http + "/v1/audio/transcriptions",
            files={"file": (CLIPS[0], f.read(), "audio/wav")},
            data={"model": "voxtral-rt"},
            timeout=120,
        )
    assert r.status_code == 200, r.text
    assert r.json()["text"] == engine32.transcribe(tiny_voxtral_realtime.clips[0]).text


def test_websocket_sends_the_stream(served, engine32, tiny_voxtral_realtime):
    from tests.streaming.test_websocket import pcm16, run, session

    wave = tiny_voxtral_realtime.clips[0]
    q = np.round(wave * 32768.0).clip(-32768, 32767) / 32768.0  # what PCM16 carries
    events, code = run(session(served, {"sample_rate": RATE}, pcm16(wave)))
    assert code == 1000 and events[-1]["type"] == "done"
    finals = [e for e in events if e["type"] == "final"]
    expected = [e for e in _stream(engine32, q.astype(np.float32)) if e.type == "final"][0]
    assert len(finals) == 1 and finals[0]["text"] == expected.text and finals[0]["tokens"] == expected.tokens


def test_realtime_route_transcribes_the_stream(served, engine32, tiny_voxtral_realtime):
    from tests.server.test_realtime import DONE, until

    wave = tiny_voxtral_realtime.clips[0]
    pcm = np.round(wave * 32768.0).clip(-32768, 32767).astype("<i2")

    async def go():
        async with served.client().realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.recv()  # session.created
            await conn.session.update(
                session={
                    "type": "transcription",
                    "audio": {
                        "input": {
                            "format": {"type": "audio/pcm", "rate": 24000},
                            "transcription": {"model": "voxtral-rt"},
                            "turn_detection": None,
                        }
                    },
                }
            )
            await conn.recv()  # session.updated
            up = np.interp(np.arange(0, len(pcm) * 1.5) / 1.5, np.arange(len(pcm)), pcm).astype("<i2")
            for i in range(0, len(up), 2400):
                await conn.input_audio_buffer.append(audio=base64.b64encode(up[i : i + 2400].tobytes()).decode())
            await conn.input_audio_buffer.commit()
            return await until(conn, DONE), up

    events, up = asyncio.run(go())
    completed = events[-1]
    assert completed.type == "conversation.item.input_audio_transcription.completed"
    stream = engine32.open_stream(sample_rate=24000)
    expected = [e for e in stream.feed(up.astype(np.float32) / 32768.0) + stream.finish() if e.type == "final"][0]
    assert completed.transcript == expected.text
