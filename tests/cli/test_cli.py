"""The ``oasr`` command line, in-process (``main([...])``) and as a subprocess, with
the real whisper-base on short clips of the shared corpus."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oasr.cli.common import Source, run_batch
from oasr.cli.main import main
from oasr.engine.outputs import RequestOutput
from oasr.metrics import normalize_text
from oasr.models.bundled import bundled_path
from tests.conftest import checkout_hint

REPO_ROOT = Path(__file__).resolve().parents[2]
JFK_PHRASE = "ask not what your country can do for you"
GREEDY = ("--model", "whisper-base", "--beam-size", "1", "--language", "en", "--no-progress")

needs_whisper_base = pytest.mark.skipif(
    bundled_path("whisper-base") is None,
    reason="whisper-base is not installed (oasr's whisper-base extra)",
)


def _norm(text: str) -> str:
    return normalize_text(text, "en")


def _bad_files(tmp_path: Path) -> tuple[Path, Path]:
    empty = tmp_path / "bad" / "empty.wav"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    notes = tmp_path / "bad" / "notes.wav"  # a text file renamed .wav
    notes.write_text("These are meeting notes, not audio.\n" * 20, encoding="utf-8")
    return empty, notes


# ---------------------------------------------------------------------------
# transcribe, real model


def _srt_or_vtt_cues(text: str, marker: str) -> list[tuple[str, str, str]]:
    ts = rf"\d\d:\d\d:\d\d{re.escape(marker)}\d\d\d"
    cues = []
    for block in text.strip("\n").split("\n\n"):
        lines = block.split("\n")
        if marker == ",":
            number, times, *body = lines
            assert number == str(len(cues) + 1)
        else:
            times, *body = lines
        m = re.fullmatch(rf"({ts}) --> ({ts})", times)
        assert m, times
        assert len(body) == 1 and body[0].strip() == body[0] != ""
        cues.append((m.group(1), m.group(2), body[0]))
    return cues


@needs_whisper_base
def test_every_format_to_output_dir(cli, clips, tmp_path):
    """``-f all`` writes <stem>.<ext> for openai-whisper's set of formats from one transcription;
    ``-f verbose_json`` writes <stem>.verbose_json."""
    row = clips["speechbrain_spk1_snt1"]
    reference = _norm(row["text"])  # "the child almost hurt the small dog"
    code, out, err = cli("transcribe", row["path"], "-f", "all", "-o", tmp_path / "out", *GREEDY)
    assert code == 0, err
    assert out == ""
    stem = "speechbrain_spk1_snt1"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        f"{stem}.json",
        f"{stem}.srt",
        f"{stem}.tsv",
        f"{stem}.txt",
        f"{stem}.vtt",
    ]

    def read(ext: str) -> str:
        return (tmp_path / "out" / f"{stem}.{ext}").read_text(encoding="utf-8")

    text = read("txt")
    assert text.endswith("\n") and text.count("\n") == 1
    assert _norm(text) == reference

    data = json.loads(read("json"))
    assert set(data) == {"text", "language"}
    assert data["language"] == "en"
    assert _norm(data["text"]) == reference

    code, out, err = cli("transcribe", row["path"], "-f", "verbose_json", "-o", tmp_path / "out", *GREEDY)
    assert (code, out) == (0, ""), err
    data = json.loads(read("verbose_json"))
    assert data["task"] == "transcribe"
    assert data["language"] == "english"
    assert data["duration"] == pytest.approx(row["duration_s"], abs=0.05)
    assert _norm(data["text"]) == reference
    assert "words" not in data  # not asked for
    keys = {"id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob"}
    keys |= {"compression_ratio", "no_speech_prob"}
    assert [s["id"] for s in data["segments"]] == list(range(len(data["segments"])))
    for seg in data["segments"]:
        assert set(seg) == keys
        assert 0.0 <= seg["start"] <= seg["end"] <= row["duration_s"] + 0.5
        assert seg["tokens"] and all(isinstance(t, int) for t in seg["tokens"])
        assert seg["avg_logprob"] < 0 and 0 <= seg["no_speech_prob"] <= 1
    assert _norm("".join(s["text"] for s in data["segments"])) == reference

    cues = _srt_or_vtt_cues(read("srt"), ",")
    assert cues[0][0] == "00:00:00,000"
    assert _norm(" ".join(c[2] for c in cues)) == reference

    vtt = read("vtt")
    assert vtt.startswith("WEBVTT\n\n")
    cues = _srt_or_vtt_cues(vtt[len("WEBVTT\n\n") :], ".")
    assert cues[0][0] == "00:00:00.000"
    assert _norm(" ".join(c[2] for c in cues)) == reference


@needs_whisper_base
def test_verbose_json_word_timestamps_jfk(cli, clips, tmp_path):
    row = clips["jfk"]
    code, _, err = cli("transcribe", row["path"], "-f", "verbose_json", "--word-timestamps", "-o", tmp_path, *GREEDY)
    assert code == 0, err
    data = json.loads((tmp_path / "jfk.verbose_json").read_text(encoding="utf-8"))
    assert JFK_PHRASE in _norm(data["text"])
    assert data["language"] == "english"
    words = data["words"]
    assert [w["word"] for w in words[:4]] == ["And", "so", "my", "fellow"]
    assert _norm(" ".join(w["word"] for w in words)) == _norm(data["text"])
    starts = [w["start"] for w in words]
    assert starts == sorted(starts)
    assert all(0.0 <= w["start"] <= w["end"] <= 11.0 for w in words)
    # "country." closes the sentence, after 9 s of the 11-s clip
    assert words[-1]["word"] == "country." and words[-1]["end"] > 9.0


@needs_whisper_base
def test_text_to_stdout_several_files_in_input_order(cli, clips, monkeypatch):
    """Two inputs, the second one read from stdin (``-``)."""
    a, b = clips["speechbrain_spk1_snt2"], clips["speechbrain_spk1_snt1"]
    stdin = io.TextIOWrapper(io.BytesIO(Path(b["path"]).read_bytes()))
    monkeypatch.setattr(sys, "stdin", stdin)
    code, out, err = cli("transcribe", a["path"], "-", *GREEDY)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2
    for line, label, row in zip(lines, (a["path"], "<stdin>"), (a, b)):
        prefix = f"{label}: "
        assert line.startswith(prefix)
        assert _norm(line[len(prefix) :]) == _norm(row["text"])


def test_decode_options_reach_the_engine_as_transcribe_options():
    from oasr.cli.common import decode_kwargs
    from oasr.cli.main import build_parser

    args = build_parser().parse_args(
        ["transcribe", "x.wav", "--task", "translate", "-l", "de", "--beam-size", "3", "--best-of", "2"]
        + ["--temperature", "0,0.4,0.8", "--word-timestamps", "--initial-prompt", "Glossary: oasr."]
        + ["--no-condition-on-previous-text", "--without-timestamps", "--patience", "1.5"]
    )
    assert decode_kwargs(args) == {
        "language": "de",
        "task": "translate",
        "beam_size": 3,
        "best_of": 2,
        "patience": 1.5,
        "temperature": (0.0, 0.4, 0.8),
        "initial_prompt": "Glossary: oasr.",
        "word_timestamps": True,
        "without_timestamps": True,
        "condition_on_previous_text": False,
    }
    # nothing given: the engine's defaults apply
    assert decode_kwargs(build_parser().parse_args(["transcribe", "x.wav"])) == {}
    assert decode_kwargs(build_parser().parse_args(["transcribe", "x.wav", "--temperature", "0.3"])) == {
        "temperature": 0.3
    }


@pytest.mark.parametrize("command", ["transcribe", "eval", "serve"])
def test_engine_switches_reach_the_engine_config(command):
    from oasr.cli.common import engine_extras
    from oasr.cli.main import build_parser

    parser = build_parser()
    inputs = {"transcribe": ["x.wav"], "eval": ["m.jsonl"], "serve": []}[command]
    args = parser.parse_args([command, *inputs, "--step-graphs", "off", "--sequence-packing", "on"])
    assert engine_extras(args) == {"step_graphs": False, "sequence_packing": True}
    args = parser.parse_args([command, *inputs, "--sequence-packing", "auto"])
    assert engine_extras(args) == {"sequence_packing": None}
    assert engine_extras(parser.parse_args([command, *inputs])) == {}


@needs_whisper_base
def test_single_file_text_to_stdout_is_just_the_transcript(cli, clips):
    row = clips["speechbrain_spk1_snt3"]
    code, out, err = cli("transcribe", row["path"], *GREEDY)
    assert code == 0, err
    assert out.count("\n") == 1 and row["path"] not in out
    assert _norm(out) == _norm(row["text"])  # "at that high level the air is pure"


@needs_whisper_base
def test_bad_files_are_reported_and_the_good_one_still_written(cli, clips, tmp_path):
    empty, notes = _bad_files(tmp_path)
    good = clips["speechbrain_spk1_snt1"]
    code, out, err = cli("transcribe", empty, good["path"], notes, "-f", "srt", "-o", tmp_path / "out", *GREEDY)
    assert code == 1
    assert "Traceback" not in err
    err_lines = err.splitlines()
    assert any(str(empty) in line and "empty file" in line for line in err_lines), err
    assert any(str(notes) in line and "not an audio file" in line for line in err_lines), err
    assert "2 of 3 inputs failed" in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["speechbrain_spk1_snt1.srt"]
    srt = (tmp_path / "out" / "speechbrain_spk1_snt1.srt").read_text(encoding="utf-8")
    assert srt.startswith("1\n00:00:00,000 --> ")
    assert "The child almost hurt the small dog" in srt


@needs_whisper_base
def test_unknown_language_is_a_usage_error(cli, clips):
    with pytest.raises(SystemExit) as exc:
        cli("transcribe", clips["jfk"]["path"], "--language", "klingon", "--model", "whisper-base")
    assert exc.value.code == 2


# ---------------------------------------------------------------------------
# transcribe, no model needed


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-f", "docx"], "invalid choice: 'docx'"),
        (["--beam-size", "0"], "must be >= 1"),
        (["--temperature", "-0.5"], "temperatures must be >= 0"),
        (["--task", "summarize"], "invalid choice: 'summarize'"),
        (["--dtype", "float8"], "invalid choice: 'float8'"),
        (["--threads", "many"], "expected an integer"),
    ],
)
def test_bad_option_values_are_argparse_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["transcribe", "x.wav", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    # one line and a pointer to --help, not the usage block
    assert err.startswith("oasr transcribe: error: ") and "usage:" not in err
    assert err.splitlines()[1:] == ["(see 'oasr transcribe --help')"]
    assert message in err


def test_all_formats_need_an_output_dir(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["transcribe", "a.wav", "-f", "all"])
    assert exc.value.code == 2
    assert "-f all writes one file per format: give --output-dir" in capsys.readouterr().err


def test_two_inputs_writing_the_same_file_are_refused(tmp_path, capsys):
    """Only when no naming rule separates them (a file and stdin both named stdin.<ext>)."""
    with pytest.raises(SystemExit) as exc:
        main(["transcribe", "stdin", "-", "-o", str(tmp_path)])
    assert exc.value.code == 2
    assert "would both be written to" in capsys.readouterr().err


@pytest.mark.parametrize(("device", "message"), [("tpu", "is not a device"), ("cuda:99", "CUDA")])
def test_unusable_device_exits_2_without_traceback(device, message, capsys):
    code = main(["transcribe", "x.wav", "--device", device, "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"oasr transcribe: error: --device {device}") and message in err
    assert "Traceback" not in err


def test_missing_model_directory_exits_2_without_traceback(tmp_path, capsys):
    missing = tmp_path / "no-such-model"
    code = main(["transcribe", str(tmp_path / "x.wav"), "--model", str(missing), "--no-progress", "--device", "cpu"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"model {str(missing)!r} is not a local path" in err
    assert "Traceback" not in err


def test_default_model_not_installed_exits_2_with_install_hint(tmp_path, monkeypatch, capsys):
    import oasr.models.loaders as loaders

    monkeypatch.setattr(loaders, "bundled_path", lambda name: None)
    code = main(["transcribe", str(tmp_path / "x.wav"), "--no-progress", "--device", "cpu"])
    assert code == 2
    err = capsys.readouterr().err
    assert "the default model is not installed" in err
    assert checkout_hint("whisper-base") in err
    assert "Traceback" not in err


class _FakeEngine:
    """Yields what the real engine yields with return_exceptions=True: outputs and exceptions by index."""

    def transcribe_iter(self, inputs, *, return_exceptions=False, **options):
        assert return_exceptions
        for k, data in enumerate(inputs):
            if data == "broken":
                yield k, ValueError("not audio")
            else:
                yield k, RequestOutput(f"req-{k}", f"text {data}", [])


def test_run_batch_reports_each_input_once():
    sources = [Source(str(i), d) for i, d in enumerate(["0", "broken", "2"])]
    results, errors = {}, {}
    run_batch(
        _FakeEngine(), sources, {}, lambda i, o: results.__setitem__(i, o.text), lambda i, e: errors.__setitem__(i, e)
    )
    assert results == {0: "text 0", 2: "text 2"}
    assert list(errors) == [1] and str(errors[1]) == "not audio"


# ---------------------------------------------------------------------------
# eval


@needs_whisper_base
def test_eval_three_clip_manifest(cli, clips, manifest, tmp_path):
    """Relative and absolute audio paths, a language filter, a limit and a missing file."""
    root = tmp_path / "corpus"
    (root / "audio").mkdir(parents=True)
    rows = []
    for name in ("speechbrain_spk1_snt1", "speechbrain_spk1_snt2"):
        (root / "audio" / f"{name}.wav").symlink_to(clips[name]["path"])
        rows.append({**clips[name], "audio": f"audio/{name}.wav"})
    french = next(r for r in manifest if r["language"] == "fr")
    rows.append({**french, "audio": french["path"]})  # filtered out by --language-filter en
    rows.append({**clips["speechbrain_spk1_snt3"], "audio": clips["speechbrain_spk1_snt3"]["path"]})  # absolute
    rows.append({"audio": "audio/not-there.wav", "text": "nothing", "language": "en"})
    rows.append({**clips["jfk"], "audio": clips["jfk"]["path"]})  # beyond --limit 4
    for r in rows:
        r.pop("path", None)
    manifest_path = root / "manifest.jsonl"
    manifest_path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    report = tmp_path / "report" / "wer.json"
    code, out, err = cli(
        "eval", manifest_path, "--model", "whisper-base", "--language-filter", "en", "--limit", "4",
        "--beam-size", "1", "--json", report, "--no-progress",
    )  # fmt: skip
    assert code == 1  # the missing file
    assert str(root / "audio" / "not-there.wav") in err and "No such file" in err

    table = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert "fr" not in table
    lang, metric, utts, ref_units, errors, rate = table["en"]
    assert (metric, utts) == ("WER", "3")
    # references: 7 + 8 + 8 words
    assert ref_units == "23"
    assert float(rate.rstrip("%")) / 100 < 0.2
    assert "3 of 4 utterances scored (1 failed)" in out

    data = json.loads(report.read_text(encoding="utf-8"))
    assert set(data["languages"]) == {"en"}
    en = data["languages"]["en"]
    assert en["metric"] == "wer" and en["utterances"] == 3 and en["reference_units"] == 23
    assert en["rate"] < 0.2
    assert data["overall"]["scored"] == 3 and data["overall"]["failed"] == 1
    assert [u["audio"] for u in data["utterances"]][-1] == "audio/not-there.wav"
    assert "error" in data["utterances"][-1]
    assert _norm(data["utterances"][0]["hypothesis"]) == "the child almost hurt the small dog"


def test_eval_bad_manifest_line(tmp_path, capsys):
    manifest_path = tmp_path / "m.jsonl"
    manifest_path.write_text('{"audio": "a.wav", "text": "x"}\nnot json\n', encoding="utf-8")
    code = main(["eval", str(manifest_path), "--device", "cpu"])
    assert code == 2
    assert f"{manifest_path}:2: not JSON" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# models, --version


def test_models_lists_architectures_and_bundled(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    arch = next(line.split() for line in out.splitlines() if line.split()[:1] == ["whisper"])
    assert arch[1] == "builtin"
    assert "CT2WhisperConverter," in arch and "HFWhisperConverter," in arch
    base = next(line for line in out.splitlines() if line.strip().startswith("whisper-base"))
    tiny = next(line for line in out.splitlines() if line.strip().startswith("whisper-tiny.en"))
    assert "(default)" in base and "tiny.en" in tiny
    if bundled_path("whisper-base") is not None:
        assert " installed " in base


def test_models_not_installed_shows_install_command(monkeypatch, capsys):
    import oasr.models.bundled as bundled

    monkeypatch.setattr(bundled, "bundled_path", lambda name: None)
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    tiny = next(line for line in out.splitlines() if line.strip().startswith("whisper-tiny.en"))
    assert "not installed" in tiny and checkout_hint("whisper-tiny-en") in tiny


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("oasr 0.1.0 (torch ")


def test_no_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == "oasr: error: the following arguments are required: COMMAND\n(see 'oasr --help')\n"


# ---------------------------------------------------------------------------
# as a separate process, with the real model load


@needs_whisper_base
def test_subprocess_transcribe_jfk_to_stdout(clips, tmp_path):
    empty, _ = _bad_files(tmp_path)
    cmd = [sys.executable, "-m", "oasr.cli.main", "transcribe", clips["jfk"]["path"], str(empty)]
    cmd += ["--device", "cpu", *GREEDY]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"oasr transcribe: {empty}: empty file" in proc.stderr
    (line,) = proc.stdout.splitlines()  # only the good file
    assert line.startswith(f"{clips['jfk']['path']}: ")
    assert JFK_PHRASE in _norm(line)


@pytest.mark.skipif(shutil.which("oasr") is None, reason="the oasr script is not installed (pip install -e .)")
def test_console_script_version():
    proc = subprocess.run(["oasr", "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert proc.stdout.startswith("oasr 0.1.0")
