"""A live stream refuses samples far outside [-1, 1] (or NaN / inf) as the offline path does:
``StreamError("invalid_audio")`` from Python's ``open_stream``, an ``error`` event and close
1007 on ``/v1/audio/stream`` (the WebSocket's float32 format is where such samples come
from); the server goes on streaming. WeNet's tiny causal U2++ fixture."""

from __future__ import annotations

import json

import numpy as np
import pytest

from oasr.engine.streaming import StreamError
from tests.conftest import AUDIO_DIR, FIXTURES_DIR

CAUSAL = FIXTURES_DIR / "wenet-u2pp-tiny-causal"
F32_MAX = float(np.finfo(np.float32).max)


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    from oasr.audio import load_audio

    if not (CAUSAL / "train.yaml").is_file():
        pytest.skip(f"fixture not found at {CAUSAL}")
    return load_audio(AUDIO_DIR / "jfk.wav")[:32000]


def _huge(speech: np.ndarray) -> dict[str, np.ndarray]:
    spiked = speech.copy()
    spiked[16000] = 1e19
    return {
        "1e19": np.full(3200, 1e19, np.float32),
        "1e30": np.full(3200, 1e30, np.float32),
        "float32_max": np.full(3200, F32_MAX, np.float32),
        "speech_with_one_1e19_sample": spiked,
        "int16_speech_as_floats": np.round(speech * 32767).astype(np.float32),
        "nan": np.array([0.0, np.nan], np.float32),
    }


def test_python_stream_refuses_huge_samples(speech):
    from oasr.engine.engine import ASREngine

    engine = ASREngine(str(CAUSAL), max_streams=2)
    for name, x in _huge(speech).items():
        stream = engine.open_stream(sample_rate=16000)
        stream.feed(speech[:8000])
        with pytest.raises(StreamError) as e:
            stream.feed(x)
        assert e.value.code == "invalid_audio", name
        assert ("NaN or infinite" if name == "nan" else "far outside the [-1, 1] of float audio") in str(e.value)
        stream.close()
    # a DAW-hot float stream (peaks at 1.6) is audio: it streams to its final
    stream = engine.open_stream(sample_rate=16000)
    events = stream.feed(speech * np.float32(1.6 / np.abs(speech).max())) + stream.finish()
    assert events[-1].type == "done"


def test_websocket_closes_1007_and_goes_on(speech):
    from fastapi.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from oasr.cli.main import build_parser
    from oasr.cli.serve import settings_from_args
    from oasr.server.app import build_engine, create_app

    settings = settings_from_args(build_parser().parse_args(["serve", "--model", str(CAUSAL), "--device", "cpu"]))
    engine = build_engine(settings)

    def session(client, samples: np.ndarray) -> tuple[list[dict], int]:
        events = []
        with client.websocket_connect("/v1/audio/stream") as ws:
            ws.send_text(json.dumps({"sample_rate": 16000, "sample_format": "float32"}))
            ws.send_bytes(speech[:3200].astype("<f4").tobytes())
            ws.send_bytes(samples.astype("<f4").tobytes())
            ws.send_text("done")
            try:
                while True:
                    events.append(ws.receive_json())
            except WebSocketDisconnect as closed:
                return events, closed.code

    try:
        with TestClient(create_app(settings, engine)) as client:
            for name, x in _huge(speech).items():
                events, code = session(client, x)
                errors = [e for e in events if e["type"] == "error"]
                assert code == 1007 and len(errors) == 1, (name, code, events)
                assert errors[0]["code"] == "invalid_audio", errors
            events, code = session(client, speech[3200:])
            assert code == 1000 and events[-1]["type"] == "done", events
    finally:
        engine.shutdown()
