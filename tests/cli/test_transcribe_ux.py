"""What a new user meets in ``oasr transcribe``: live segments, lazy segments from Python,
inputs expanded and named, one-line errors, too-short audio refused as the server does,
word-timed subtitle layout through the command line."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import oasr
from oasr.audio import AudioDecodeError, load_audio
from oasr.cli import transcribe as transcribe_cmd
from oasr.cli.common import Source, expand_inputs
from oasr.cli.main import main
from oasr.cli.transcribe import AudioProgress, segment_line
from oasr.engine.outputs import RequestOutput, Segment
from oasr.metrics import normalize_text
from oasr.models.bundled import bundled_path
from oasr.serving.common import output_names

GREEDY = ("--model", "whisper-base", "--beam-size", "1", "--language", "en", "--no-progress")
LIVE_LINE = re.compile(r"\[(\d\d:\d\d\.\d\d\d) --> (\d\d:\d\d\.\d\d\d)\] (.+)")


def _seconds(ts: str) -> float:
    minutes, seconds = ts.split(":")
    return int(minutes) * 60 + float(seconds)


def _usage_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("oasr transcribe: error: "), err
    assert lines[1] == "(see 'oasr transcribe --help')"
    return lines[0]


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


# ---------------------------------------------------------------------------
# inputs and output names (no model)


def test_directories_give_their_audio_files_and_recursive_their_subdirectories(tmp_path, capsys):
    for name in ("b.mp3", "a.wav", "notes.txt", "sub/c.FLAC", "sub/deeper/d.opus", "cover.jpg"):
        _touch(tmp_path / name)
    parser = main.__globals__["build_parser"]()
    flat = expand_inputs([str(tmp_path)], False, parser)
    assert flat == [str(tmp_path / "a.wav"), str(tmp_path / "b.mp3")]
    deep = expand_inputs([str(tmp_path)], True, parser)
    assert deep == sorted(str(tmp_path / n) for n in ("a.wav", "b.mp3", "sub/c.FLAC", "sub/deeper/d.opus"))
    # a file named twice (directly and through its directory) is transcribed once
    assert expand_inputs([str(tmp_path / "a.wav"), str(tmp_path)], False, parser) == flat
    _touch(tmp_path / "empty" / "readme.txt")
    message = _usage_error(["transcribe", str(tmp_path / "empty")], capsys)
    assert message.endswith(
        f"directory {tmp_path / 'empty'} has no audio files (--recursive searches its subdirectories)"
    )


def test_globs_are_expanded_when_the_shell_did_not(tmp_path, capsys):
    for name in ("x1.wav", "x2.wav", "y.wav", "x3.txt"):
        _touch(tmp_path / name)
    parser = main.__globals__["build_parser"]()
    # any file a pattern matches is tried (x3.txt too): the user named it
    assert expand_inputs([str(tmp_path / "x*")], False, parser) == [
        str(tmp_path / n) for n in ("x1.wav", "x2.wav", "x3.txt")
    ]
    assert _usage_error(["transcribe", str(tmp_path / "z*.wav")], capsys).endswith(f"no file matches {tmp_path}/z*.wav")
    # a literal file name with glob characters is that file
    odd = _touch(tmp_path / "take[1].wav")
    assert expand_inputs([str(odd)], False, parser) == [str(odd)]


def test_output_names_keep_inputs_that_share_a_stem():
    assert output_names(["d/a.wav", "d/b.wav"]) == [Path("a"), Path("b")]
    assert output_names(["d/a.wav", "d/a.mp3", "d/b.wav"]) == [Path("a.wav"), Path("a.mp3"), Path("b")]
    assert output_names(["x/a.wav", "y/a.wav", "y/a.mp3"]) == [Path("x/a.wav"), Path("y/a.wav"), Path("a.mp3")]
    assert output_names(["top/x/a.wav", "top/y/z/a.wav"]) == [Path("x/a.wav"), Path("y/z/a.wav")]
    assert output_names(["-", "d/b.wav"]) == [Path("stdin"), Path("b")]


def test_subtitle_layout_flags_need_word_timestamps(capsys):
    message = _usage_error(["transcribe", "a.wav", "-f", "srt", "--max-line-width", "30"], capsys)
    assert message.endswith("--max-line-width needs --word-timestamps (subtitle cues are laid out from word times)")
    message = _usage_error(["transcribe", "a.wav", "--highlight-words"], capsys)
    assert "--highlight-words needs --word-timestamps" in message
    assert "must be >= 1" in _usage_error(["transcribe", "a.wav", "--max-words-per-line", "0"], capsys)
    assert "-v/--verbose" in _usage_error(["transcribe", "a.wav", "-v", "-q"], capsys)


def test_the_cli_and_the_server_refuse_the_same_short_audio():
    from oasr.server.settings import ServerSettings

    assert transcribe_cmd.MIN_DURATION_S == ServerSettings().min_duration_s


# ---------------------------------------------------------------------------
# messages


def test_not_audio_names_the_input_once_without_errno(tmp_path):
    notes = tmp_path / "notes.wav"
    notes.write_text("Meeting notes, not audio.\n" * 40, encoding="utf-8")
    with pytest.raises(AudioDecodeError) as exc:
        load_audio(str(notes))
    message = str(exc.value)
    assert message.count(str(notes)) == 1 and "Errno" not in message
    # the CLI names it at the start of its line, so the reader's copy goes
    assert transcribe_cmd._problem(Source(str(notes), str(notes)), exc.value) == (
        "not an audio file (unrecognised or corrupt data): Invalid data found when processing input"
    )
    # an upload (the server's spooled file object) is not called 'None'
    with tempfile.SpooledTemporaryFile() as upload:
        upload.write(notes.read_bytes())
        upload.seek(0)
        with pytest.raises(AudioDecodeError) as exc:
            load_audio(upload)
    assert "None" not in str(exc.value) and "Errno" not in str(exc.value)


def test_registry_errors_name_the_cli_flag(tmp_path):
    from oasr.models.registry import detect_architecture

    with pytest.raises(ValueError) as exc:
        detect_architecture(tmp_path)
    assert "--architecture NAME" in str(exc.value) and "pass architecture=" not in str(exc.value)


# ---------------------------------------------------------------------------
# live output pieces (no model)


def test_segment_line_is_whispers():
    seg = Segment(1, 0, 12.3404, 15.0, " Hello  there.")
    assert segment_line(seg) == "[00:12.340 --> 00:15.000] Hello there."
    assert segment_line(Segment(2, 0, 3599.5, 3725.25, " x"), "a.wav") == "a.wav [59:59.500 --> 01:02:05.250] x"


def test_progress_counts_seconds_of_audio(clips, tmp_path):
    jfk = Source(clips["jfk"]["path"], clips["jfk"]["path"])
    raw = Source("<stdin>", b"...")  # no header to read: counted when it finishes
    progress = AudioProgress([jfk, raw], enabled=True)
    try:
        assert progress.totals == [pytest.approx(11.0, abs=0.01), None]
        assert progress.bar.total == pytest.approx(11.0, abs=0.05)
        progress.advance(0, 7.6)
        progress.advance(0, 7.0)  # never backwards
        assert progress.bar.n == pytest.approx(7.6)
        progress.advance(0, 12.5)  # a segment past the declared end counts up to it
        assert progress.bar.n == pytest.approx(11.0, abs=0.01)
        progress.finish(1, 4.0)
        assert progress.bar.total == pytest.approx(15.0, abs=0.05) and progress.bar.n == pytest.approx(15.0, abs=0.01)
    finally:
        progress.close()


# ---------------------------------------------------------------------------
# with whisper-base


needs_whisper_base = pytest.mark.skipif(bundled_path("whisper-base") is None, reason="whisper-base is not installed")


@needs_whisper_base
def test_verbose_prints_segments_to_stderr_and_stdout_keeps_the_format(cli, clips):
    jfk = clips["jfk"]["path"]
    code, out, err = cli("transcribe", jfk, "-f", "srt", "--verbose", *GREEDY)
    assert code == 0, err
    assert out.startswith("1\n00:00:00,000 --> ") and "[" not in out
    live = [LIVE_LINE.fullmatch(line) for line in err.splitlines()]
    assert live and all(live), err
    srt_texts = [block.split("\n", 2)[2] for block in out.strip().split("\n\n")]
    assert [m.group(3) for m in live] == srt_texts
    assert _seconds(live[-1].group(2)) <= 11.0
    # quiet: nothing on stderr; the same document on stdout
    code, quiet_out, quiet_err = cli("transcribe", jfk, "-f", "srt", "-q", *GREEDY)
    assert (code, quiet_out, quiet_err) == (0, out, "")


@needs_whisper_base
def test_short_file_fails_alone_and_the_others_are_transcribed(cli, clips, tmp_path):
    short = tmp_path / "blip.wav"
    sf.write(short, np.random.default_rng(0).standard_normal(800).astype(np.float32) * 0.1, 16000)
    good = clips["speechbrain_spk1_snt1"]
    code, out, err = cli("transcribe", short, good["path"], *GREEDY)
    assert code == 1
    assert f"oasr transcribe: {short}: too short to transcribe: audio is 0.050000 s long; the minimum is 0.1 s" in err
    assert "1 of 2 inputs failed" in err
    assert normalize_text(out.split(": ", 1)[1], "en") == normalize_text(good["text"], "en")
    # --min-duration 0 accepts it (whatever Whisper makes of 50 ms of noise)
    code, _, err = cli("transcribe", short, "--min-duration", "0", *GREEDY)
    assert code == 0, err


@needs_whisper_base
def test_word_timed_subtitles_and_tsv_through_the_cli(cli, clips, tmp_path):
    jfk = clips["jfk"]["path"]
    code, out, err = cli(
        "transcribe", jfk, "-f", "srt", "--word-timestamps", "--max-line-width", "20", "--max-line-count", "2", *GREEDY
    )
    assert code == 0, err
    blocks = out.strip().split("\n\n")
    assert len(blocks) >= 3
    for block in blocks:
        lines = block.split("\n")[2:]
        assert 1 <= len(lines) <= 2 and all(len(line) <= 20 for line in lines), block
    words = " ".join(" ".join(block.split("\n")[2:]) for block in blocks)
    assert "ask not what your country can do for you" in normalize_text(words, "en")
    last_end = blocks[-1].split("\n")[1].split(" --> ")[1]
    assert last_end <= "00:00:11,000"
    code, out, err = cli("transcribe", jfk, "-f", "tsv", *GREEDY)
    assert code == 0, err
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows[0] == ["start", "end", "text"]
    assert all(int(a) <= int(b) <= 11000 for a, b, _ in rows[1:])


@needs_whisper_base
def test_shared_stems_and_a_directory_to_output_dir(cli, clips, tmp_path):
    data = Path(clips["speechbrain_spk1_snt1"]["path"]).read_bytes()
    (tmp_path / "in" / "x").mkdir(parents=True)
    (tmp_path / "in" / "y").mkdir()
    for rel in ("x/take.wav", "y/take.wav"):
        (tmp_path / "in" / rel).write_bytes(data)
    code, _, err = cli("transcribe", tmp_path / "in", "--recursive", "-o", tmp_path / "out", *GREEDY)
    assert code == 0, err
    written = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*.txt"))
    assert written == ["x/take.wav.txt", "y/take.wav.txt"]
    texts = {(tmp_path / "out" / w).read_text(encoding="utf-8") for w in written}
    assert len(texts) == 1 and "small dog" in texts.pop()


# ---------------------------------------------------------------------------
# lazy segments from Python


@pytest.fixture(scope="module")
def tiny_en():
    if bundled_path("whisper-tiny.en") is None:
        pytest.skip("whisper tiny.en is not installed (oasr's whisper-tiny-en extra)")
    return oasr.ASREngine("tiny.en", device="cpu")


@pytest.mark.slow
def test_segments_come_out_window_by_window(tiny_en, clips):
    """A 33-s input (two Whisper windows): the first window's segments are yielded steps
    before the input finishes, and they are the output's own segments. (Temperature 0 and
    no conditioning: the repeated clip would send Whisper's fallback to temperature 1.)"""
    jfk = load_audio(clips["jfk"]["path"])
    audio = np.concatenate([jfk] * 3)
    steps = 0
    inner = tiny_en.splitter.step

    def counting_step():
        nonlocal steps
        steps += 1
        return inner()

    tiny_en.splitter.step = counting_step
    try:
        stream = tiny_en.transcribe_stream(audio, beam_size=1, temperature=0.0, condition_on_previous_text=False)
        assert steps == 0  # lazy: nothing decoded before the first next()
        seen = []
        for seg in stream:
            seen.append((steps, seg, stream.output))
    finally:
        del tiny_en.splitter.step
    out = stream.output
    assert isinstance(out, RequestOutput) and [s for _, s, _ in seen] == out.segments
    assert seen[0][2] is None and seen[0][0] < steps  # the first segment came before the end
    assert out.segments[-1].end > 30.0
    assert normalize_text(out.text, "en").count("ask not what your country can do for you") == 3


class _EndOnlyEngine:
    """An engine whose strategy reports segments only in the finished output (as the llm
    strategy does): yields each input's RequestOutput and nothing before it."""

    def make_options(self, **options):
        return options

    def transcribe_iter(self, inputs, *, return_exceptions=False, segments=False, min_duration_s=0.0, **options):
        assert segments
        for index, _ in enumerate(inputs):
            segs = [Segment(1, 0, 0.0, 1.5, " first"), Segment(2, 0, 1.5, 2.0, " second")]
            yield index, RequestOutput(f"r{index}", "first second", segs, duration=2.0)


def test_segments_reported_only_at_the_end_are_still_streamed_and_printed(monkeypatch, capsys, tmp_path):
    from oasr.engine.engine import SegmentStream

    stream = SegmentStream(_EndOnlyEngine(), "a.wav", {})
    assert [s.text for s in stream] == [" first", " second"] and stream.output.text == "first second"

    monkeypatch.setattr(transcribe_cmd, "load_engine", lambda args: _EndOnlyEngine())
    audio = tmp_path / "a.wav"
    audio.write_bytes(b"")
    assert main(["transcribe", str(audio), "-v", "--no-progress", "-f", "json"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == ["[00:00.000 --> 00:01.500] first", "[00:01.500 --> 00:02.000] second"]
    assert out == '{"text": "first second", "language": null}\n'
