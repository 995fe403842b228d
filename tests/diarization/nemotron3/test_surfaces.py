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
