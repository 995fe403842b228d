"""``oasr transcribe`` on a tiny Qwen3-ASR directory: the speech-LLM options
(``--language``, ``--context``, ``--temperature``, ``--seed``, ``--top-k``) reach the
decode and give what the Python API gives for the same options."""

from __future__ import annotations

import json

import pytest

import oasr
from oasr.cli.main import main
from tests.models.qwen3_asr.conftest import CLIPS, _register


@pytest.fixture(scope="module")
def engine(reference):
    _register()
    return oasr.ASREngine(reference.path)


@pytest.fixture
def clip_path(manifest) -> str:
    return next(row["path"] for row in manifest if row["audio"] == CLIPS[2])


def _cli(capsys, *argv) -> dict:
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_sampling_options_equal_the_api(engine, reference, clip_path, capsys):
    argv = ["transcribe", clip_path, "--model", reference.path, "-f", "json", "--no-progress"]
    options = ["--language", "de", "--context", "欢迎", "--temperature", "0.9", "--seed", "7", "--top-k", "20"]
    first = _cli(capsys, *argv, *options)
    again = _cli(capsys, *argv, *options)
    assert first == again, "a fixed --seed must replay the same sampled transcript"
    api = engine.transcribe(clip_path, language="de", context="欢迎", temperature=0.9, seed=7, top_k=20)
    assert first["text"] == api.text and first["language"] == "de"
    greedy = _cli(capsys, *argv, "--language", "German")
    assert greedy["text"] == engine.transcribe(clip_path, language="German").text


def test_cli_unknown_language_is_a_usage_error(reference, clip_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["transcribe", clip_path, "--model", str(reference.path), "--language", "klingon", "--no-progress"])
    assert exit_info.value.code == 2
    assert "language 'klingon' is not an ISO 639 code" in capsys.readouterr().err
