"""``oasr stream`` over WeNet's tiny causal U2++ fixture: each file's result, written as
``oasr transcribe`` writes it, equals an in-process stream of the same audio (chunk and
history flags included); endpoints add segments; partials are rewritten in place on a
terminal; bad files, chunks that do not divide and options a stream cannot honour are
refused as the other subcommands refuse them."""

from __future__ import annotations

import io
import json
import time

import numpy as np
import pytest

from oasr.cli.main import main
from tests.conftest import AUDIO_DIR, FIXTURES_DIR

CAUSAL = FIXTURES_DIR / "wenet-u2pp-tiny-causal"
SHORT = "bambatse_02_haggard_0323.wav"
LONG = "jfk.wav"


@pytest.fixture(scope="module")
def paths():
    if not (CAUSAL / "train.yaml").is_file():
        pytest.skip(f"fixture not found at {CAUSAL}")
    missing = [n for n in (SHORT, LONG) if not (AUDIO_DIR / n).exists()]
    if missing:
        pytest.skip(f"data/audio {missing} not found")
    return {n: AUDIO_DIR / n for n in (SHORT, LONG)}


@pytest.fixture(scope="module")
def engines():
    """In-process references, one per engine configuration (built on first use)."""
    from oasr.engine.engine import ASREngine

    cache: dict[tuple, ASREngine] = {}

    def get(**config) -> ASREngine:
        key = tuple(sorted(config.items()))
        if key not in cache:
            cache[key] = ASREngine(str(CAUSAL), max_streams=1, **config)
        return cache[key]

    return get


def reference_output(engine, path, **options):
    from oasr.audio import load_audio

    stream = engine.open_stream(sample_rate=engine.sampling_rate, **options)
    stream.feed(load_audio(path, engine.sampling_rate))
    stream.finish()
    assert stream.done and stream.output is not None
    return stream.output


def test_every_format_is_the_in_process_stream_written_as_transcribe_writes_it(paths, engines, tmp_path):
    from oasr.formatting import ALL_FORMATS, EXTENSIONS, SubtitleLayout, format_output

    assert main(["stream", str(paths[LONG]), "--model", str(CAUSAL), "-f", "all", "-o", str(tmp_path)]) == 0
    expected = reference_output(engines(), paths[LONG])
    assert expected.segments and expected.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jfk.json", "jfk.srt", "jfk.tsv", "jfk.txt", "jfk.vtt"]
    for fmt in ALL_FORMATS:
        written = (tmp_path / f"jfk.{EXTENSIONS[fmt]}").read_text(encoding="utf-8")
        assert written == format_output(expected, fmt, words=False, layout=SubtitleLayout()), fmt


def test_several_files_print_their_text_in_order(paths, engines, capsys):
    files = [paths[SHORT], paths[LONG]]
    assert main(["stream", *map(str, files), "--model", str(CAUSAL), "-q"]) == 0
    out = capsys.readouterr()
    texts = [reference_output(engines(), p).text for p in files]
    assert out.out == "".join(f"{p}: {t}\n" for p, t in zip(files, texts))
    assert out.err == ""


@pytest.mark.parametrize(
    ("flags", "config"),
    [
        (["--chunk-ms", "160"], {"stream_chunk_ms": 160}),
        (["--chunk-ms", "320", "--left-chunks", "2"], {"stream_chunk_ms": 320, "stream_left_chunks": 2}),
    ],
)
def test_chunk_and_history_flags_reach_the_engine(paths, engines, tmp_path, flags, config):
    argv = ["stream", str(paths[LONG]), "--model", str(CAUSAL), "-f", "verbose_json", "-o", str(tmp_path), *flags]
    assert main(argv) == 0
    doc = json.loads((tmp_path / "jfk.verbose_json").read_text(encoding="utf-8"))
    expected = reference_output(engines(**config), paths[LONG])
    assert [s["tokens"] for s in doc["segments"]] == [s.tokens for s in expected.segments]
    assert doc["text"] == expected.text


def test_each_endpoint_is_one_more_segment(paths, engines, tmp_path):
    import soundfile as sf

    from oasr.audio import load_audio

    long_file = tmp_path / "long.wav"
    x = np.concatenate([load_audio(paths[LONG])] * 3)  # 33 s: the 20-s utterance rule fires
    sf.write(long_file, x, 16000, subtype="FLOAT")
    argv = ["stream", str(long_file), "--model", str(CAUSAL), "--endpoint", "-f", "verbose_json", "-o", str(tmp_path)]
    assert main(argv) == 0
    doc = json.loads((tmp_path / "long.verbose_json").read_text(encoding="utf-8"))
    expected = reference_output(engines(), long_file, endpoint=True)
    assert len(expected.segments) >= 2
    assert [(s["start"], s["end"], s["tokens"]) for s in doc["segments"]] == [
        (pytest.approx(s.start, abs=1e-3), pytest.approx(s.end, abs=1e-3), s.tokens) for s in expected.segments
    ]
    assert main(["stream", str(long_file), "--model", str(CAUSAL), "-f", "verbose_json", "-o", str(tmp_path)]) == 0
    assert len(json.loads((tmp_path / "long.verbose_json").read_text(encoding="utf-8"))["segments"]) == 1


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_partials_are_rewritten_in_place_and_finals_keep_their_times(paths, monkeypatch, capsys):
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert main(["stream", str(paths[SHORT]), "--model", str(CAUSAL)]) == 0
    shown = terminal.getvalue()
    assert shown.count("\r\x1b[K") >= 2  # partials drawn over each other, then cleared for the final
    last_line = shown.rsplit("\r\x1b[K", 1)[1]
    text = capsys.readouterr().out.strip()
    assert last_line == f"[00:00.000 --> 00:02.000] {text}\n"


def test_text_to_a_terminal_is_the_live_view_printed_once(paths, engines, monkeypatch):
    out, err = _Terminal(), _Terminal()
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    assert main(["stream", str(paths[SHORT]), "--model", str(CAUSAL)]) == 0
    text = reference_output(engines(), paths[SHORT]).text.strip()
    assert text and err.getvalue() == ""
    lines = out.getvalue().rsplit("\r\x1b[K", 1)[1]  # what stays on screen after the partials
    assert lines == f"[00:00.000 --> 00:02.000] {text}\n"


def test_realtime_feeds_at_the_speed_of_the_audio(paths):
    started = time.monotonic()
    assert main(["stream", str(paths[SHORT]), "--model", str(CAUSAL), "--realtime", "-q"]) == 0
    assert time.monotonic() - started >= 2.0  # the clip lasts 2 s


def test_a_bad_file_is_reported_and_the_others_still_written(paths, tmp_path, capsys):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio at all")
    argv = ["stream", str(bad), str(paths[SHORT]), "--model", str(CAUSAL), "-o", str(tmp_path / "out")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"oasr stream: {bad}:" in err and "1 of 2 inputs failed" in err
    assert (tmp_path / "out" / "bambatse_02_haggard_0323.txt").read_text(encoding="utf-8").strip()
    assert not (tmp_path / "out" / "bad.txt").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--chunk-ms", "100"], "not a whole number of ConformerEncoder's 40-ms streaming units"),
        (["--vad"], "vad_filter does not apply to a live stream"),
        (["--task", "translate"], "can only transcribe"),
        (["-f", "all"], "-f all writes one file per format"),
    ],
)
def test_what_a_stream_cannot_do_is_a_usage_error(paths, flags, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(["stream", str(paths[SHORT]), "--model", str(CAUSAL), *flags])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
