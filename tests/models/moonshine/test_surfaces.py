"""Moonshine through the surfaces: the server's SSE deltas concatenate to the transcript, int8
decodes close to float32, ``oasr models`` lists the family, and what Moonshine cannot do is
refused by name (another language, prompt text, translation, word times, a clip too short
for one encoder frame) while the engine keeps serving."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.models.moonshine.conftest import CLIPS

pytest.importorskip("fastapi")


def test_sse_deltas_concatenate_to_the_transcript(reference, engine, audio_dir):
    from fastapi.testclient import TestClient

    from oasr.cli.main import build_parser
    from oasr.cli.serve import settings_from_args
    from oasr.server.app import build_engine, create_app

    settings = settings_from_args(build_parser().parse_args(["serve", "--model", str(reference.path)]))
    server_engine = build_engine(settings)
    clip = audio_dir / CLIPS[0]
    try:
        with TestClient(create_app(settings, server_engine)) as client:
            files = {"file": (clip.name, clip.read_bytes(), "audio/wav")}
            form = {"model": settings.model_names[0], "stream": "true"}
            with client.stream("POST", "/v1/audio/transcriptions", data=form, files=files) as r:
                assert r.status_code == 200
                events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    finally:
        server_engine.shutdown()
    deltas = [e["delta"] for e in events if e["type"] == "transcript.text.delta"]
    done = [e for e in events if e["type"] == "transcript.text.done"]
    want = engine.transcribe(str(clip)).text
    assert len(deltas) > 1 and "".join(deltas) == want
    assert len(done) == 1 and done[0]["text"] == want and done[0]["finish_reason"] == "length"


def test_int8_decodes_close_to_float32(reference, engine, audio_dir):
    import oasr
    from oasr.layers.quant import Int8Linear

    q = oasr.ASREngine(str(reference.path), quantize="int8")
    assert any(isinstance(m, Int8Linear) for m in q.model.decoder.modules())
    clip = str(audio_dir / CLIPS[1])
    want = [t for s in engine.transcribe(clip).segments for t in s.tokens]
    got = [t for s in q.transcribe(clip).segments for t in s.tokens]
    assert len(got) == len(want)
    # Per-channel int8 of a random decoder: most greedy choices survive the rounding.
    assert np.mean([a == b for a, b in zip(got, want)]) >= 0.7, (got, want)


def test_oasr_models_lists_moonshine(capsys):
    from oasr.cli.main import main

    assert main(["models"]) == 0
    assert "moonshine  " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"language": "de"}, "is not a language of"),
        ({"context": "names: Dashwood"}, "takes no prompt text"),
        ({"task": "translate"}, "only transcribes"),
        ({"word_timestamps": True}, "cannot time words"),
    ],
)
def test_what_moonshine_cannot_do_is_refused_by_name(engine, audio_dir, options, message):
    with pytest.raises(ValueError, match=message):
        engine.transcribe(str(audio_dir / CLIPS[2]), **options)


def test_a_clip_too_short_for_one_frame_is_refused_and_the_engine_goes_on(engine, waveforms):
    short = np.zeros(800, np.float32)  # 50 ms: under the 895 samples of one encoder frame
    with pytest.raises(ValueError, match="too short for Moonshine"):
        engine.transcribe(short)
    assert engine.transcribe(waveforms[2]).finish_reason == "length"
