"""``oasr transcribe`` follows its neighbours' conventions: ``-f txt`` as openai-whisper and
whisper.cpp name text, ``-f all`` as openai-whisper's set, JSON Lines for several inputs in a
JSON format, the transcript shown once on a terminal, a progress bar that never runs past its
total."""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np
import pytest
import soundfile as sf

from oasr.cli.common import Source
from oasr.cli.transcribe import AudioProgress
from oasr.metrics import normalize_text
from oasr.models.bundled import bundled_path

GREEDY = ("--model", "whisper-base", "--beam-size", "1", "--language", "en", "--no-progress")
JFK_PHRASE = "ask not what your country can do for you"

needs_whisper_base = pytest.mark.skipif(bundled_path("whisper-base") is None, reason="whisper-base is not installed")


def _norm(text: str) -> str:
    return normalize_text(text, "en")


@needs_whisper_base
def test_txt_is_text(cli, clips):
    row = clips["speechbrain_spk1_snt1"]
    code, out, err = cli("transcribe", row["path"], "-f", "txt", *GREEDY)
    assert code == 0, err
    assert out.count("\n") == 1 and _norm(out) == _norm(row["text"])
    assert cli("transcribe", row["path"], "-f", "text", *GREEDY)[1] == out


@needs_whisper_base
def test_all_is_openai_whispers_set_and_its_tsv(cli, clips, tmp_path):
    """``-f all`` writes txt, vtt, srt, tsv and json (no .verbose_json), and the tsv is what
    openai-whisper's own writer makes of the same segments."""
    whisper_utils = pytest.importorskip("whisper.utils")
    jfk = clips["jfk"]["path"]
    code, out, err = cli("transcribe", jfk, "-f", "all", "-o", tmp_path / "all", *GREEDY)
    assert (code, out) == (0, ""), err
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == [
        "jfk.json",
        "jfk.srt",
        "jfk.tsv",
        "jfk.txt",
        "jfk.vtt",
    ]
    assert JFK_PHRASE in _norm(json.loads((tmp_path / "all" / "jfk.json").read_text(encoding="utf-8"))["text"])

    assert cli("transcribe", jfk, "-f", "verbose_json", "-o", tmp_path / "vj", *GREEDY)[0] == 0
    result = json.loads((tmp_path / "vj" / "jfk.verbose_json").read_text(encoding="utf-8"))
    (tmp_path / "whisper").mkdir()
    whisper_utils.get_writer("tsv", str(tmp_path / "whisper"))(result, "jfk.wav")
    expected = (tmp_path / "whisper" / "jfk.tsv").read_text(encoding="utf-8")
    assert (tmp_path / "all" / "jfk.tsv").read_text(encoding="utf-8") == expected


@needs_whisper_base
@pytest.mark.parametrize("fmt", ["json", "verbose_json"])
def test_several_inputs_in_json_are_json_lines(cli, clips, fmt):
    rows = [clips["speechbrain_spk1_snt1"], clips["speechbrain_spk1_snt2"]]
    code, out, err = cli("transcribe", *(r["path"] for r in rows), "-f", fmt, *GREEDY)
    assert code == 0, err
    assert "==>" not in out
    lines = out.splitlines()
    assert len(lines) == len(rows)
    docs = [json.loads(line) for line in lines]
    assert [d["file"] for d in docs] == [r["path"] for r in rows]
    assert [_norm(d["text"]) for d in docs] == [_norm(r["text"]) for r in rows]
    if fmt == "verbose_json":
        assert all(d["segments"] for d in docs)


@needs_whisper_base
def test_several_inputs_in_a_subtitle_format_keep_head_style_headers(cli, clips):
    rows = [clips["speechbrain_spk1_snt1"], clips["speechbrain_spk1_snt2"]]
    code, out, err = cli("transcribe", *(r["path"] for r in rows), "-f", "srt", *GREEDY)
    assert code == 0, err
    assert out.startswith(f"==> {rows[0]['path']} <==\n1\n00:00:00,000 --> ")
    assert f"\n==> {rows[1]['path']} <==\n1\n" in out


def _terminal(monkeypatch, *streams) -> None:
    for stream in streams:
        monkeypatch.setattr(stream, "isatty", lambda: True)


@needs_whisper_base
def test_on_a_terminal_the_transcript_is_printed_once(cli, clips, monkeypatch):
    """stdout and stderr both a terminal: the live segments are the output (as openai-whisper
    prints them), the transcript is not printed again."""
    jfk = clips["jfk"]["path"]
    _terminal(monkeypatch, sys.stdout, sys.stderr)
    code, out, err = cli("transcribe", jfk, *GREEDY)
    assert code == 0, err
    assert _norm(out + err).count(JFK_PHRASE) == 1, (out, err)
    lines = out.splitlines()
    assert lines and all(line.startswith("[00:") for line in lines), out
    assert JFK_PHRASE in _norm(out) and err == ""


@needs_whisper_base
def test_on_a_terminal_another_format_is_printed_once(cli, clips, monkeypatch):
    jfk = clips["jfk"]["path"]
    _terminal(monkeypatch, sys.stdout, sys.stderr)
    code, out, err = cli("transcribe", jfk, "-f", "srt", *GREEDY)
    assert code == 0, err
    assert out.startswith("1\n00:00:00,000 --> ") and err == ""
    assert _norm(out + err).count(JFK_PHRASE) == 1


@needs_whisper_base
def test_redirected_stdout_gets_the_document_and_the_terminal_the_live_view(cli, clips, monkeypatch):
    jfk = clips["jfk"]["path"]
    _terminal(monkeypatch, sys.stderr)  # `oasr transcribe jfk.wav > out.txt`
    code, out, err = cli("transcribe", jfk, *GREEDY)
    assert code == 0, err
    assert out.count("\n") == 1 and JFK_PHRASE in _norm(out)
    assert err.startswith("[00:00.000 --> ") and JFK_PHRASE in _norm(err)


@pytest.mark.parametrize("seconds", [1.23, 2.04, 7.349])
def test_progress_never_runs_past_its_total(tmp_path, seconds):
    """A total rounded to 0.1 s below the file's length made the last update pass it, and tqdm
    warned "clamping frac to range [0, 1]"."""
    path = tmp_path / "tone.wav"
    t = np.arange(int(round(seconds * 16000))) / 16000
    sf.write(path, (0.1 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000)
    raw = Source("<stdin>", b"...")  # no header: counted when it finishes
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        progress = AudioProgress([Source(str(path), str(path)), raw], enabled=True)
        for s in np.arange(0.0, seconds, 0.37):
            progress.advance(0, float(s))
        progress.advance(0, seconds + 0.004)  # the last segment's end, past the header's
        progress.finish(0, seconds)
        progress.advance(1, 0.71)
        progress.finish(1, 0.7)
        assert progress.bar.n <= progress.bar.total
        assert progress.bar.n == pytest.approx(seconds + 0.71, abs=1e-6)
        progress.close()
    assert not [w for w in caught if "clamping" in str(w.message)]
