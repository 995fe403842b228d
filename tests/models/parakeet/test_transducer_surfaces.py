"""Parakeet RNN-T and TDT through the command line and the server, on the tiny checkpoints of
``test_transducer.py`` (whose greedy labels, frames and TDT durations are held to transformers'
``generate`` there, and the engine's to the model's own search in ``test_transducer_engine.py``):

* ``oasr transcribe -f verbose_json`` prints the in-process ``ASREngine``'s verbose_json;
* ``oasr serve`` answers verbose_json (text, segments, word times) equal to the engine's;
* a search the model does not run is refused: ``oasr transcribe --search modified_beam`` and
  ``oasr serve --search modified_beam`` exit 2 with a one-line message naming the searches it
  runs (the server before it listens).
"""

from __future__ import annotations

import json

import pytest

import oasr
from tests.models.parakeet.test_transducer import _save

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tests.server._fault_helpers import failed_start  # noqa: E402
from tests.server.conftest import ServerProcess  # noqa: E402

CLIP = "sense_and_sensibility_01_austen_64kb-0890.wav"  # 5.3 s


@pytest.fixture(scope="module", params=["rnnt", "tdt"])
def checkpoint(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"parakeet_{request.param}_surfaces")
    _save(path, request.param)
    return request.param, path


@pytest.fixture(scope="module")
def engine(checkpoint):
    return oasr.ASREngine(str(checkpoint[1]))


@pytest.fixture(scope="module")
def clip(audio_dir):
    return audio_dir / CLIP


@pytest.fixture(scope="module")
def server(checkpoint, tmp_path_factory):
    kind, path = checkpoint
    s = ServerProcess(
        ["--model", str(path), "--served-model-name", f"parakeet-{kind}"],
        tmp_path_factory.mktemp("server") / f"{kind}.log",
        startup_s=120,
    )
    yield s
    s.stop()


def test_cli_verbose_json_equals_the_engine(checkpoint, engine, clip, capsys):
    from oasr.cli.main import main
    from oasr.formatting import verbose_json_dict

    out = engine.transcribe(str(clip), word_timestamps=True)
    assert len([t for s in out.segments for t in s.tokens]) > 10, "the comparison is vacuous without labels"
    want = json.loads(json.dumps(verbose_json_dict(out, words=True)))
    capsys.readouterr()
    argv = ["transcribe", str(clip), "--model", str(checkpoint[1]), "--word-timestamps"]
    assert main([*argv, "-f", "verbose_json", "--no-progress"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["text"] == want["text"] and got["duration"] == want["duration"]
    assert got["segments"] == want["segments"]
    if "words" in want:
        assert got["words"] == want["words"]


def test_server_verbose_json_with_word_times_equals_the_engine(checkpoint, server, engine, clip):
    from oasr.formatting import verbose_json_dict

    kind, _ = checkpoint
    out = engine.transcribe(str(clip), word_timestamps=True)
    want = json.loads(json.dumps(verbose_json_dict(out, words=True)))
    r = server.post_audio(
        files={"file": (CLIP, clip.read_bytes())},
        data={
            "model": f"parakeet-{kind}",
            "response_format": "verbose_json",
            "timestamp_granularities[]": ["word", "segment"],
        },
    )
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["text"] == out.text and got["duration"] == want["duration"]
    assert got["words"] == want["words"] and any(w["end"] > w["start"] for w in got["words"])
    starts = [w["start"] for w in got["words"]]
    assert starts == sorted(starts) and starts[-1] > 1.0
    keys = ("id", "start", "end", "text", "tokens")
    assert [{k: s[k] for k in keys} for s in got["segments"]] == [{k: s[k] for k in keys} for s in want["segments"]]


def test_cli_a_search_the_model_lacks_is_exit_2_naming_its_searches(checkpoint, clip, capsys):
    from oasr.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["transcribe", str(clip), "--model", str(checkpoint[1]), "--search", "modified_beam", "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "search='modified_beam'" in err and "'malsd'" in err and "Traceback" not in err


def test_serve_a_search_the_model_lacks_is_exit_2_before_listening(checkpoint):
    code, output, _ = failed_start(["--model", str(checkpoint[1]), "--search", "modified_beam"])
    assert code == 2, output
    assert "search='modified_beam'" in output and "'malsd'" in output and "not starting" in output
    assert "Traceback" not in output
