"""``oasr transcribe --vad``: VAD chunking from the command line, with the real whisper-base."""

from __future__ import annotations

import json
import sys
import wave

import numpy as np
import pytest

from oasr.cli import transcribe as transcribe_cmd
from oasr.cli.common import decode_kwargs
from oasr.cli.main import build_parser, main
from oasr.metrics import error_rates
from oasr.models.bundled import bundled_path
from tests.conftest import checkout_hint

GREEDY = ("--model", "whisper-base", "--beam-size", "1", "--language", "en", "--no-progress")


def _write_wav(path, samples: np.ndarray, rate: int = 16000) -> None:
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def test_vad_flag_sets_vad_filter():
    assert decode_kwargs(build_parser().parse_args(["transcribe", "x.wav", "--vad"])) == {"vad_filter": True}
    assert "vad_filter" not in decode_kwargs(build_parser().parse_args(["transcribe", "x.wav"]))


def test_vad_without_silero_exits_2_with_install_hint(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "silero_vad", None)
    code = main(["transcribe", "x.wav", "--vad", "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--vad" in err and checkout_hint("vad") in err and "Traceback" not in err


@pytest.mark.real_weights
@pytest.mark.slow
def test_transcribe_vad_verbose_json(vad_recording, monkeypatch, tmp_path, capsys):
    pytest.importorskip("silero_vad")
    if bundled_path("whisper-base") is None:
        pytest.skip("whisper-base is not installed")
    import oasr

    engine = oasr.ASREngine("whisper-base", device="cpu")
    monkeypatch.setattr(transcribe_cmd, "load_engine", lambda args: engine)
    rec = vad_recording
    end = rec.spans[1][1] + 1.0  # the first two clips: one chunk
    path = tmp_path / "two.wav"
    _write_wav(path, rec.audio[: round(end * 16000)])
    code = main(["transcribe", str(path), "--vad", "-f", "verbose_json", "--word-timestamps", *GREEDY])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads(captured.out)
    reference = " ".join(rec.texts[:2])
    assert error_rates([(reference, data["text"], "en")])["en"].rate < 0.15
    assert data["duration"] == pytest.approx(end, abs=0.01)
    for seg in data["segments"]:
        assert rec.clip_at(seg["start"]) is not None and rec.clip_at(seg["end"]) is not None
    second = [w for w in data["words"] if rec.clip_at(w["start"]) == 1]
    assert second and second[0]["start"] >= rec.spans[1][0] - 0.5  # after the 2-s silence, not before
