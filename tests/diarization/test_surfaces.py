"""Transcription with speakers through Python, the CLI and the server, over the tone diarizer
(``tone.py``) and the tiny firing Paraformer of the server tests (random text, timed words).

What the surfaces must give is the composition of the parts: the plain engine's transcript
with ``assign_speakers`` over the diarizer's own result for the same audio; concurrent requests
share one ``diarize`` call; options that need a diarizer are refused without one."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

import oasr
from oasr.cli.main import main
from oasr.diarization.assign import assign_speakers
from oasr.diarization.loader import load_diarizer
from oasr.formatting import diarized_json_dict, format_output
from tests.diarization import tone
from tests.diarization.conftest import A_HZ, B_HZ, serve_app
from tests.server.conftest import wav_bytes


@pytest.fixture(scope="module")
def engine(paraformer_dir, tone_dir):
    return oasr.ASREngine(str(paraformer_dir), diarize_model=str(tone_dir))


@pytest.fixture(scope="module")
def plain(paraformer_dir):
    return oasr.ASREngine(str(paraformer_dir))


@pytest.fixture(scope="module")
def wav(tmp_path_factory, two_speakers) -> Path:
    path = tmp_path_factory.mktemp("audio") / "two speakers.wav"
    path.write_bytes(wav_bytes(two_speakers))
    return path


def _expected(plain, tone_dir, audio, **options):
    out = plain.transcribe(audio, **options)
    diarization = load_diarizer(tone_dir).diarize([audio])[0]
    return assign_speakers(out, diarization), diarization


def test_the_engine_assigns_speakers_and_batches_requests(engine, plain, tone_dir, two_speakers):
    one = tone.tones([(0.2, 2.5, B_HZ)], 3.0)
    diarizer = engine.diarization.diarizer
    calls = diarizer.calls
    outs = engine.transcribe([two_speakers, one, two_speakers], word_timestamps=True)
    assert diarizer.calls == calls + 1  # three concurrent requests, one diarize call
    for audio, out in zip([two_speakers, one, two_speakers], outs):
        want, diarization = _expected(plain, tone_dir, audio, word_timestamps=True)
        assert out.diarization == diarization
        assert [(s.start, s.end, s.text, s.speaker) for s in out.segments] == [
            (s.start, s.end, s.text, s.speaker) for s in want.segments
        ]
        assert [(w.word, w.speaker) for s in out.segments for w in s.words] == [
            (w.word, w.speaker) for s in want.segments for w in s.words
        ]
    speakers = [w.speaker for w in outs[0].segments[0].words]
    assert {"SPEAKER_00", "SPEAKER_01"} <= set(speakers)
    assert {w.speaker for s in outs[1].segments for w in s.words} <= {"SPEAKER_00", None}
    # without words, segments take their span's speaker; the stream's segments carry them as decoded
    want, _ = _expected(plain, tone_dir, two_speakers)
    streamed = list(engine.transcribe_stream(two_speakers))
    assert [s.speaker for s in streamed] == [s.speaker for s in want.segments] and streamed[0].speaker


def test_speaker_options_and_refusals(engine, plain, tone_dir, two_speakers):
    diarizer = engine.diarization.diarizer
    calls = diarizer.calls
    out = engine.transcribe(two_speakers, diarize=False)
    assert out.diarization is None and all(s.speaker is None for s in out.segments) and diarizer.calls == calls
    one = engine.transcribe(two_speakers, num_speakers=1)
    assert one.diarization.speakers == ["SPEAKER_00"]
    named = engine.transcribe(two_speakers, known_speakers={"bob": tone.tones([(0.0, 3.0, B_HZ)], 3.0)})
    assert named.diarization.speakers == ["SPEAKER_00", "bob"]
    for bad, match in [
        ({"num_speakers": 5}, "finds at most 4 speakers"),
        ({"min_speakers": 3, "max_speakers": 2}, "more than max_speakers"),
        ({"diarize": False, "num_speakers": 2}, "with diarize=False"),
    ]:
        with pytest.raises(ValueError, match=match):
            engine.transcribe(two_speakers, **bad)
    with pytest.raises(ValueError, match="references must be 2 to 10 s"):
        engine.transcribe(two_speakers, known_speakers={"ann": tone.tones([(0.0, 1.0, A_HZ)], 1.0)})
    for bad in ({"diarize": True}, {"num_speakers": 2}, {"known_speakers": {"a": b""}}):
        with pytest.raises(ValueError, match="the engine has no diarization model"):
            plain.transcribe(two_speakers, **bad)


def test_a_failing_diarization_fails_its_request_alone(engine, two_speakers):
    diarizer = engine.diarization.diarizer
    diarizer.fail_on = 2.0
    try:
        results = dict(engine.transcribe_iter([two_speakers, tone.tones([], 2.0)], return_exceptions=True))
    finally:
        diarizer.fail_on = None
    assert isinstance(results[1], RuntimeError) and results[0].diarization is not None


def test_cli_diarize_and_transcribe_with_speakers(paraformer_dir, tone_dir, plain, wav, two_speakers, capsys, tmp_path):
    diarization = load_diarizer(tone_dir).diarize([two_speakers])[0]
    assert main(["diarize", "-m", str(tone_dir), str(wav)]) == 0
    assert capsys.readouterr().out == diarization.to_rttm("two_speakers")
    other = tmp_path / "b.wav"
    other.write_bytes(wav.read_bytes())
    assert main(["diarize", "-m", str(tone_dir), str(wav), str(other), "-f", "json", "--num-speakers", "1"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["file"] for r in rows] == [str(wav), str(other)] and rows[0]["speakers"] == ["SPEAKER_00"]
    assert main(["diarize", "-m", str(tone_dir), str(wav), "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "two speakers.rttm").read_text() == diarization.to_rttm("two_speakers")
    assert main(["diarize", "-m", str(tmp_path / "out"), str(wav)]) == 2
    assert "known layouts: nemotron3:" in capsys.readouterr().err

    want, _ = _expected(plain, tone_dir, two_speakers, word_timestamps=True)
    want.diarization = diarization
    argv = ["transcribe", "-m", str(paraformer_dir), "--diarize", str(tone_dir), str(wav), "--word-timestamps"]
    assert main([*argv, "-f", "diarized_json", "--no-progress", "-q"]) == 0
    assert json.loads(capsys.readouterr().out) == diarized_json_dict(want)
    assert main([*argv, "-f", "srt", "--no-progress", "-q"]) == 0
    srt = capsys.readouterr().out
    assert srt == format_output(want, "srt") and "[SPEAKER_01]: " in srt
    with pytest.raises(SystemExit) as e:
        main(["transcribe", "-m", str(paraformer_dir), str(wav), "--num-speakers", "2"])
    assert e.value.code == 2
    assert "--num-speakers needs --diarize MODEL" in capsys.readouterr().err


def _data_url(audio) -> str:
    return "data:audio/wav;base64," + base64.b64encode(wav_bytes(audio)).decode()


def test_server_diarized_json(paraformer_dir, tone_dir, plain, wav, two_speakers):
    openai = pytest.importorskip("openai")
    want, diarization = _expected(plain, tone_dir, two_speakers, word_timestamps=True)
    want.diarization = diarization
    with serve_app("-m", str(paraformer_dir), "--served-model-name", "pf", "--diarize-model", str(tone_dir)) as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=http, max_retries=0)
        with open(wav, "rb") as f:
            doc = client.audio.transcriptions.create(file=f, model="pf", response_format="diarized_json")
        assert doc.model_dump(exclude_none=True) == {
            **diarized_json_dict(want),
            "usage": {"seconds": 5.5, "type": "duration"},
        }
        assert [s.speaker for s in doc.segments][:2] == ["A", "B"]
        with open(wav, "rb") as f:
            doc = client.audio.transcriptions.create(
                file=f,
                model="pf",
                response_format="diarized_json",
                known_speaker_names=["bob"],  # the official client's own fields
                known_speaker_references=[_data_url(tone.tones([(0, 3, B_HZ)], 3))],
            )
        assert [s.speaker for s in doc.segments][:2] == ["A", "bob"]
        with open(wav, "rb") as f:  # accepted as OpenAI requires it; Silero hears no speech in tones
            doc = client.audio.transcriptions.create(
                file=f, model="pf", response_format="diarized_json", chunking_strategy="auto"
            )
        assert doc.segments == [] and doc.duration == 5.5
        with open(wav, "rb") as f:
            events = list(
                client.audio.transcriptions.create(file=f, model="pf", response_format="diarized_json", stream=True)
            )
        segments = [e for e in events if e.type == "transcript.text.segment"]
        assert [(s.text, s.speaker) for s in segments] == [
            (s["text"], s["speaker"]) for s in diarized_json_dict(want)["segments"]
        ]
        assert events[-1].type == "transcript.text.done"
        verbose = http.post(
            "/v1/audio/transcriptions",
            files={"file": ("a.wav", wav.read_bytes())},
            data={"model": "pf", "response_format": "verbose_json"},
        ).json()
        assert [s.get("speaker") for s in verbose["segments"]] == [
            s.speaker for s in assign_speakers(plain.transcribe(two_speakers), diarization).segments
        ]
        bad = http.post(
            "/v1/audio/transcriptions",
            files={"file": ("a.wav", wav.read_bytes())},
            data={
                "model": "pf",
                "response_format": "diarized_json",
                "known_speaker_names[]": "ann",
                "known_speaker_references[]": _data_url(tone.tones([(0, 1, A_HZ)], 1)),
            },
        )
        assert bad.status_code == 400 and "references must be 2 to 10 s" in bad.json()["error"]["message"]
        ok = http.post("/v1/audio/transcriptions", files={"file": ("a.wav", wav.read_bytes())}, data={"model": "pf"})
        assert ok.status_code == 200  # and the server keeps serving
    with serve_app("-m", str(paraformer_dir), "--served-model-name", "pf") as http:
        r = http.post(
            "/v1/audio/transcriptions",
            files={"file": ("a.wav", wav.read_bytes())},
            data={"model": "pf", "response_format": "diarized_json"},
        )
        error = r.json()["error"]
        assert r.status_code == 400 and error["param"] == "response_format" and "--diarize-model" in error["message"]


def test_speakers_go_to_the_aligners_words(paraformer_dir, tone_dir, two_speakers, tmp_path_factory):
    """``align_model`` and ``diarize_model`` together: the aligner rewrites the words first, the
    speakers are assigned to its words (what the engine with the aligner alone gives, plus the
    overlap rule over the diarization)."""
    pytest.importorskip("transformers")
    from tests.models.wav2vec2 import _reference as ref

    aligner = str(ref.build_random(tmp_path_factory.mktemp("aligner"), "wav2vec2_group", seed=3))
    aligned = oasr.ASREngine(str(paraformer_dir), align_model=aligner).transcribe(two_speakers, word_timestamps=True)
    both = oasr.ASREngine(str(paraformer_dir), align_model=aligner, diarize_model=str(tone_dir))
    out = both.transcribe(two_speakers, word_timestamps=True)
    want = assign_speakers(aligned, load_diarizer(tone_dir).diarize([two_speakers])[0])
    got = [(w.word, w.start, w.end, w.speaker) for s in out.segments for w in s.words]
    assert got == [(w.word, w.start, w.end, w.speaker) for s in want.segments for w in s.words]
    assert got and {"SPEAKER_00", "SPEAKER_01"} <= {w[3] for w in got}
