"""End to end with a real diarizer: the tiny Nemotron 3 Diarization checkpoint saved by
transformers (``tests/diarization/nemotron3/fixture.py``) read by ``load_diarizer`` through
``oasr diarize``, ``ASREngine(diarize_model=...)``, ``oasr transcribe --diarize`` and
``oasr serve --diarize-model`` (diarized_json through the official openai client). Each surface
gives the diarizer's own result, and the plain transcript with ``assign_speakers`` over it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import oasr
from oasr.cli.main import main
from oasr.diarization.assign import assign_speakers
from oasr.diarization.loader import load_diarizer
from oasr.formatting import diarized_json_dict
from tests.diarization.conftest import serve_app
from tests.server.conftest import wav_bytes


@pytest.fixture(scope="module")
def nemotron3_dir(tmp_path_factory) -> Path:
    pytest.importorskip("transformers.models.nemotron3_diarization")
    from tests.diarization.nemotron3.fixture import save_tiny

    return save_tiny(tmp_path_factory.mktemp("nemotron3_diarization"))


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    """4 s of real speech, as a WAV file and as the samples it holds."""
    from oasr.audio.io import load_audio
    from tests.conftest import AUDIO_DIR

    path = tmp_path_factory.mktemp("speech") / "speech.wav"
    path.write_bytes(wav_bytes(load_audio(AUDIO_DIR / "1272-141231-0002.flac")[: 16000 * 4]))
    return path, load_audio(path)


@pytest.fixture(scope="module")
def expected(paraformer_dir, nemotron3_dir, speech):
    """The diarizer's own result, and the plain transcript (word times) with its speakers."""
    diarization = load_diarizer(nemotron3_dir).diarize([speech[1]])[0]
    out = oasr.ASREngine(str(paraformer_dir)).transcribe(speech[1], word_timestamps=True)
    out = assign_speakers(out, diarization)
    out.diarization = diarization
    return diarization, out


def test_python_and_cli(paraformer_dir, nemotron3_dir, speech, expected, capsys):
    from oasr.diarization.nemotron3 import Nemotron3Diarizer

    diarization, want = expected
    assert isinstance(oasr.load_diarizer(nemotron3_dir), Nemotron3Diarizer) and len(diarization.speakers) > 1
    out = oasr.ASREngine(str(paraformer_dir), diarize_model=str(nemotron3_dir)).transcribe(
        str(speech[0]), word_timestamps=True
    )
    assert out.diarization == diarization
    assert [(w.word, w.speaker) for s in out.segments for w in s.words] == [
        (w.word, w.speaker) for s in want.segments for w in s.words
    ]
    assert [s.speaker for s in out.segments] == [s.speaker for s in want.segments]
    capsys.readouterr()
    assert main(["diarize", "-m", str(nemotron3_dir), str(speech[0])]) == 0
    assert capsys.readouterr().out == diarization.to_rttm("speech")
    argv = ["transcribe", "-m", str(paraformer_dir), "--diarize", str(nemotron3_dir), str(speech[0])]
    assert main([*argv, "--word-timestamps", "-f", "diarized_json", "-q", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out) == diarized_json_dict(want)


def test_server(paraformer_dir, nemotron3_dir, speech, expected):
    openai = pytest.importorskip("openai")
    _, want = expected
    argv = ["-m", str(paraformer_dir), "--served-model-name", "pf", "--diarize-model", str(nemotron3_dir)]
    with serve_app(*argv) as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=http, max_retries=0)
        with open(speech[0], "rb") as f:
            doc = client.audio.transcriptions.create(file=f, model="pf", response_format="diarized_json")
        assert doc.model_dump(exclude_none=True) == {
            **diarized_json_dict(want),
            "usage": {"seconds": 4.0, "type": "duration"},
        }
        with open(speech[0], "rb") as f:  # Nemotron 3 has no speaker embeddings to match references with
            with pytest.raises(openai.BadRequestError) as e:
                client.audio.transcriptions.create(
                    file=f,
                    model="pf",
                    response_format="diarized_json",
                    known_speaker_names=["ann"],
                    known_speaker_references=["data:audio/wav;base64,"],
                )
        assert "has no speaker embeddings" in e.value.body["message"]
