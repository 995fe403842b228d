"""The Ray surfaces' pieces that need no running Ray: input listing, output names, the
deployment ``build_app`` makes, option checking, and the ``--ray`` command-line checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray.serve", reason="the Ray tests need oasr's ray extra")

from oasr.cli.main import main  # noqa: E402
from oasr.serving.ray_batch import list_inputs, output_targets, transcribe_dataset  # noqa: E402


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_list_inputs_expands_directories_and_manifests_in_order(tmp_path):
    _touch(tmp_path / "d" / "b.wav")
    _touch(tmp_path / "d" / "a.flac")
    _touch(tmp_path / "d" / "notes.txt")
    _touch(tmp_path / "d" / "sub" / "c.mp3")
    single = _touch(tmp_path / "x.opus")
    rows = [{"audio": "clips/e.wav"}, {"audio": str(tmp_path / "abs.wav"), "text": "hi"}, {"audio": "../x.opus"}]
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    flat = [str(tmp_path / "d" / "a.flac"), str(tmp_path / "d" / "b.wav")]
    assert list_inputs([tmp_path / "d"]) == flat
    got = list_inputs([tmp_path / "d", single, tmp_path / "m" / "m.jsonl"], recursive=True)
    assert got == [
        *flat,
        str(tmp_path / "d" / "sub" / "c.mp3"),
        str(single),
        str(tmp_path / "m" / "clips" / "e.wav"),
        str(tmp_path / "abs.wav"),
    ]  # ../x.opus is x.opus again: kept once
    with pytest.raises(ValueError, match="has no audio files"):
        list_inputs([_touch(tmp_path / "empty" / "notes.txt").parent])


def test_output_names_are_the_clis(tmp_path):
    files = [str(tmp_path / "a" / "x.wav"), str(tmp_path / "b" / "x.wav"), str(tmp_path / "a" / "y.mp3")]
    assert output_targets(tmp_path / "o", files, ("text", "srt")) == [
        {"text": tmp_path / "o" / "a" / "x.wav.txt", "srt": tmp_path / "o" / "a" / "x.wav.srt"},
        {"text": tmp_path / "o" / "b" / "x.wav.txt", "srt": tmp_path / "o" / "b" / "x.wav.srt"},
        {"text": tmp_path / "o" / "y.txt", "srt": tmp_path / "o" / "y.srt"},
    ]


@pytest.mark.parametrize(
    "line, problem", [("{not json", "not JSON"), ('{"text": "x"}', "'audio' key"), ("[1]", "'audio' key")]
)
def test_a_bad_manifest_line_is_named_by_file_and_line(tmp_path, line, problem):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"audio": "a.wav"}\n' + line + "\n")
    with pytest.raises(ValueError, match=rf"m\.jsonl:2: .*{problem}"):
        list_inputs([manifest])


def test_a_missing_input_and_a_bad_format_are_refused_before_ray_starts(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.wav"):
        transcribe_dataset([tmp_path / "nope.wav"], tmp_path / "out")
    with pytest.raises(ValueError, match="unknown output format"):
        transcribe_dataset([_touch(tmp_path / "a.wav")], tmp_path / "out", formats=("docx",))


def test_build_app_sets_replicas_resources_and_settings():
    from oasr.serving.ray import app_builder, build_app

    d = build_app("whisper-base", num_replicas=2, num_cpus=0.5, num_gpus=0.25, api_key="k", quantize="int8")
    deployment = d._bound_deployment
    assert deployment.num_replicas == 2
    assert deployment.ray_actor_options == {"num_cpus": 0.5, "num_gpus": 0.25}
    # Every request reaches a replica's admission at once (its max_queue), none waits unseen
    # in the proxy; the proxy's own queue is bounded and answers 429 past it.
    assert deployment.max_ongoing_requests == 256
    config = deployment._deployment_config
    assert config.max_queued_requests == 256
    backpressure = getattr(config, "backpressure_config", None)
    if backpressure is not None:
        assert (backpressure.status_code, backpressure.retry_after_s) == (429, 1.0)
    (settings,) = deployment.init_args
    assert settings.model == "whisper-base" and settings.api_key == "k"
    assert settings.extra_engine_config == {"quantize": "int8"}

    strings = {"autoscaling": "1:3", "num_cpus": "0.25", "max_queue": "12", "request_timeout_s": "30"}
    auto = app_builder({"model": "whisper-base", **strings})
    config = auto._bound_deployment._deployment_config.autoscaling_config
    assert (config.min_replicas, config.max_replicas) == (1, 3)
    assert config.target_ongoing_requests == 8  # a full decode batch (max_batch_size) per replica
    assert auto._bound_deployment.max_ongoing_requests == 12  # max_queue
    assert auto._bound_deployment.ray_actor_options["num_cpus"] == 0.25
    assert auto._bound_deployment.init_args[0].max_queue == 12
    assert auto._bound_deployment.init_args[0].request_timeout_s == 30.0


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"max_queu": 3}, TypeError, "max_queu"),
        ({"num_replicas": 0}, ValueError, "num_replicas"),
        ({"autoscaling": "3:1"}, ValueError, "MIN:MAX"),
        ({"num_gpus": -1}, ValueError, "num_gpus"),
        ({"max_queue": 0}, ValueError, "max_queue"),
    ],
)
def test_build_app_refuses_bad_options_by_name(kwargs, error, match):
    from oasr.serving.ray import build_app

    with pytest.raises(error, match=match):
        build_app("whisper-base", **kwargs)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["serve", "--ray", "--replicas", "2", "--autoscale", "1:2"], "not allowed with argument"),
        (["serve", "--ray", "--autoscale", "3:1"], "MIN <= MAX"),
        (["serve", "--ray", "--num-gpus-per-replica", "-1"], "must be >= 0"),
        (["transcribe", "--ray", "a.wav"], "--ray writes one file per input: give --output-dir"),
        (["transcribe", "--ray", "-", "-o", "out"], "not stdin"),
    ],
)
def test_ray_flags_refuse_bad_combinations(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_oasr_help_and_the_ray_flags_import_no_ray():
    code = (
        "import sys\nfrom oasr.cli.main import build_parser\nbuild_parser()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'torch')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout
