"""Nemotron 3 Diarization's live surfaces: ``oasr stream -m DIARIZER`` (turns as RTTM / JSON,
equal to the stream object's) and the WebSocket ``/v1/audio/stream`` session that names a served
diarizer (speaker-turn events equal to the stream object's)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from oasr.cli.main import main
from oasr.diarization import Diarization
from oasr.diarization.loader import load_diarizer


@pytest.fixture(scope="module")
def diarizer(tiny_dir):
    return load_diarizer(tiny_dir)


@pytest.fixture(scope="module")
def wav(clip, tmp_path_factory):
    path = tmp_path_factory.mktemp("audio") / "two speakers.wav"
    sf.write(path, clip[: 16000 * 3], 16000, subtype="FLOAT")
    return path


def _stream_events(diarizer, audio: np.ndarray, piece: int = 2560) -> list:
    stream = diarizer.stream()
    events = [e for a in range(0, len(audio), piece) for e in stream.feed(audio[a : a + piece])]
    return events + stream.close()


def test_cli_stream_writes_the_streamed_turns(diarizer, tiny_dir, wav, capsys, tmp_path):
    audio = sf.read(wav, dtype="float32")[0]
    turns = [e.turn for e in _stream_events(diarizer, audio) if e.type == "turn_closed"]
    want = Diarization(turns, 3.0)
    assert main(["stream", "-m", str(tiny_dir), str(wav), "-q"]) == 0
    assert capsys.readouterr().out == want.to_rttm("two_speakers")
    assert main(["stream", "-m", str(tiny_dir), str(wav), "-f", "json", "-o", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "two speakers.json").read_text()) == json.loads(json.dumps(want.to_dict()))
    assert main(["stream", "-m", str(tiny_dir), str(wav), "--streaming-mode", "no_lookahead", "-q"]) == 0
    assert capsys.readouterr().out.startswith("SPEAKER two_speakers 1 ")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--beam-size", "2"], "transcription options do not apply"),
        (["-f", "srt"], "RTTM"),
        (["--streaming-mode", "fast"], "unknown streaming mode"),
    ],
)
def test_cli_stream_refuses_what_a_diarizer_cannot_do(tiny_dir, wav, capsys, flags, message):
    with pytest.raises(SystemExit) as e:
        main(["stream", "-m", str(tiny_dir), str(wav), *flags])
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.fixture(scope="module")
def http(tiny_dir, tmp_path_factory):
    from starlette.testclient import TestClient

    from oasr.cli import serve
    from oasr.cli.main import build_parser
    from oasr.server.app import create_app
    from tests.models.paraformer.conftest import write_firing_paraformer_dir

    asr = write_firing_paraformer_dir(tmp_path_factory.mktemp("paraformer") / "model", seed=3)
    args = build_parser().parse_args(
        ["serve", "-m", str(asr), "--served-model-name", "pf", "--diarize-model", str(tiny_dir)]
    )
    with TestClient(create_app(serve.settings_from_args(args))) as client:
        yield client


def _session(http, first: dict, audio: bytes, url: str = "/v1/audio/stream") -> list[dict]:
    events = []
    with http.websocket_connect(url) as ws:
        ws.send_text(json.dumps(first))
        for a in range(0, len(audio), 8192):
            ws.send_bytes(audio[a : a + 8192])
        ws.send_text("done")
        while not events or events[-1]["type"] not in ("done", "error"):
            events.append(ws.receive_json())
    return events


def test_websocket_streams_speaker_turns(http, diarizer, tiny_dir, clip):
    audio = clip[: 16000 * 3]
    want = [e.to_dict() for e in _stream_events(diarizer, audio)]
    pcm = np.clip(np.round(audio * 32768), -32768, 32767).astype("<i2")
    want16 = [e.to_dict() for e in _stream_events(diarizer, pcm.astype(np.float32) / 32768)]
    got = _session(http, {"model": tiny_dir.name, "sample_rate": 16000, "sample_format": "float32"}, audio.tobytes())
    assert got == [*want, {"type": "done"}]
    got = _session(http, {"sample_rate": 16000}, pcm.tobytes(), f"/v1/audio/stream?model={tiny_dir.name}")
    assert got == [*want16, {"type": "done"}]
    # 8 kHz audio is resampled to the model's rate: turns still come, opened and closed in pairs
    got = _session(
        http, {"model": str(tiny_dir), "sample_rate": 8000, "sample_format": "float32"}, audio[::2].tobytes()
    )
    kinds = [e["type"] for e in got]
    assert kinds[-1] == "done" and kinds.count("turn_opened") == kinds.count("turn_closed") > 0


def test_websocket_refuses_options_a_diarizer_does_not_take(http, tiny_dir):
    for first, code in (({"language": "en"}, "invalid_options"), ({"streaming_mode": "fast"}, "invalid_options")):
        with http.websocket_connect("/v1/audio/stream") as ws:
            ws.send_text(json.dumps({"model": tiny_dir.name, "sample_rate": 16000, **first}))
            event = ws.receive_json()
        assert event["type"] == "error" and event["code"] == code
