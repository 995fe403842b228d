"""Output writers on hand-built transcripts: exact SRT / WebVTT text, JSON shapes."""

from __future__ import annotations

import json

import pytest

from oasr.engine.outputs import RequestOutput, Segment, Word
from oasr.formatting import (
    EXTENSIONS,
    FORMATS,
    format_output,
    format_timestamp,
    to_json,
    to_srt,
    to_text,
    to_verbose_json,
    to_vtt,
    verbose_json_dict,
)


def _output(segments: list[Segment], text: str | None = None, language: str | None = "en") -> RequestOutput:
    if text is None:
        text = " ".join(s.text.strip() for s in segments if s.text.strip())
    return RequestOutput("req-0", text, segments, language=language, duration=3725.0)


# Segments as the engine numbers them (from 1), with times that need rounding across
# the minute and the hour, and one segment without text.
SEGMENTS = [
    Segment(1, 0, 0.0, 2.5, " Hello world."),
    Segment(2, 0, 59.9996, 61.0004, " Rounding up."),
    Segment(3, 3000, 62.0, 62.5, "   "),
    Segment(4, 360000, 3599.9996, 3661.0014, " Past the hour."),
]

EXPECTED_SRT = (
    "1\n"
    "00:00:00,000 --> 00:00:02,500\n"
    "Hello world.\n"
    "\n"
    "2\n"
    "00:01:00,000 --> 00:01:01,000\n"
    "Rounding up.\n"
    "\n"
    "3\n"
    "01:00:00,000 --> 01:01:01,001\n"
    "Past the hour.\n"
)

EXPECTED_VTT = (
    "WEBVTT\n"
    "\n"
    "00:00:00.000 --> 00:00:02.500\n"
    "Hello world.\n"
    "\n"
    "00:01:00.000 --> 00:01:01.000\n"
    "Rounding up.\n"
    "\n"
    "01:00:00.000 --> 01:01:01.001\n"
    "Past the hour.\n"
)


@pytest.mark.parametrize(
    ("seconds", "srt", "vtt"),
    [
        (0.0, "00:00:00,000", "00:00:00.000"),
        (0.0014, "00:00:00,001", "00:00:00.001"),
        (0.9996, "00:00:01,000", "00:00:01.000"),
        (59.9994, "00:00:59,999", "00:00:59.999"),
        (59.9996, "00:01:00,000", "00:01:00.000"),
        (3599.9996, "01:00:00,000", "01:00:00.000"),
        (3723.456, "01:02:03,456", "01:02:03.456"),
        (86399.9999, "24:00:00,000", "24:00:00.000"),
        (360000.0, "100:00:00,000", "100:00:00.000"),
        (-0.25, "00:00:00,000", "00:00:00.000"),
    ],
)
def test_format_timestamp(seconds, srt, vtt):
    assert format_timestamp(seconds) == srt
    assert format_timestamp(seconds, decimal_marker=".") == vtt


def test_srt_exact():
    assert to_srt(_output(SEGMENTS)) == EXPECTED_SRT


def test_vtt_exact():
    assert to_vtt(_output(SEGMENTS)) == EXPECTED_VTT


def test_subtitles_without_segments():
    empty = _output([], text="")
    assert to_srt(empty) == ""
    assert to_vtt(empty) == "WEBVTT\n"


def test_cue_text_is_one_line_and_vtt_escaped():
    out = _output([Segment(1, 0, 1.0, 2.0, " a < b & c --> d\n\nnext line ")])
    assert to_srt(out) == "1\n00:00:01,000 --> 00:00:02,000\na < b & c --> d next line\n"
    assert to_vtt(out) == "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\na &lt; b &amp; c --&gt; d next line\n"


def test_end_before_start_is_clamped():
    out = _output([Segment(1, 0, 5.0, 4.0, " x")])
    assert to_srt(out) == "1\n00:00:05,000 --> 00:00:05,000\nx\n"


def test_text_and_json():
    out = _output([Segment(1, 0, 0.0, 1.0, " Un café, s'il vous plaît.")], language="fr")
    assert to_text(out) == "Un café, s'il vous plaît.\n"
    doc = to_json(out)
    assert json.loads(doc) == {"text": "Un café, s'il vous plaît.", "language": "fr"}
    assert "café" in doc  # UTF-8 kept, not \u-escaped
    assert doc.endswith("}\n")


def test_verbose_json_fields():
    words1 = [Word(0.0, 0.41234, " Hello", 0.9), Word(0.41234, 1.0, " world.", 0.8)]
    words2 = [Word(1.2, 1.9996, " Again.", 0.7)]
    out = RequestOutput(
        "req-7",
        " Hello world. Again.",
        [
            Segment(1, 0, 0.0, 1.0, " Hello world.", [50364, 2425, 1002, 13, 50414], 0.0, -0.25, 1.1, 0.01, words1),
            Segment(2, 0, 1.2, 1.9996, " Again.", [50424, 11847, 13, 50464], 0.2, -0.5, 0.9, 0.02, words2),
        ],
        language="en",
        language_probability=0.97,
        duration=2.1234,
        task="transcribe",
    )
    doc = json.loads(to_verbose_json(out, words=True))
    assert doc == {
        "task": "transcribe",
        "language": "english",
        "duration": 2.123,
        "text": "Hello world. Again.",
        "finish_reason": "stop",
        "segments": [
            {
                "id": 0,
                "seek": 0,
                "start": 0.0,
                "end": 1.0,
                "text": " Hello world.",
                "tokens": [50364, 2425, 1002, 13, 50414],
                "temperature": 0.0,
                "avg_logprob": -0.25,
                "compression_ratio": 1.1,
                "no_speech_prob": 0.01,
            },
            {
                "id": 1,
                "seek": 0,
                "start": 1.2,
                "end": 2.0,
                "text": " Again.",
                "tokens": [50424, 11847, 13, 50464],
                "temperature": 0.2,
                "avg_logprob": -0.5,
                "compression_ratio": 0.9,
                "no_speech_prob": 0.02,
            },
        ],
        "words": [
            {"word": "Hello", "start": 0.0, "end": 0.412},
            {"word": "world.", "start": 0.412, "end": 1.0},
            {"word": "Again.", "start": 1.2, "end": 2.0},
        ],
    }
    assert "words" not in json.loads(to_verbose_json(out, words=False))
    out.finish_reason = "length"  # a token budget cut it: said in the document
    assert json.loads(to_verbose_json(out))["finish_reason"] == "length"
    # format_output adds words when the engine timed them, and not otherwise
    assert "words" in json.loads(format_output(out, "verbose_json"))
    for seg in out.segments:
        seg.words = None
    assert "words" not in json.loads(format_output(out, "verbose_json"))


@pytest.mark.parametrize(("code", "name"), [("en", "english"), ("fr", "french"), ("zh", "chinese"), ("xx", "xx")])
def test_verbose_json_language_names(code, name):
    assert verbose_json_dict(_output(SEGMENTS, language=code))["language"] == name


def test_verbose_json_without_language():
    assert verbose_json_dict(_output(SEGMENTS, language=None))["language"] is None


def test_format_output_dispatch():
    out = _output(SEGMENTS)
    assert format_output(out, "srt") == EXPECTED_SRT
    assert format_output(out, "vtt") == EXPECTED_VTT
    assert format_output(out, "text") == "Hello world. Rounding up. Past the hour.\n"
    assert json.loads(format_output(out, "json")) == {
        "text": "Hello world. Rounding up. Past the hour.",
        "language": "en",
    }
    assert json.loads(format_output(out, "verbose_json"))["segments"][3]["id"] == 3


def test_format_output_unknown_format():
    with pytest.raises(ValueError, match=r"unknown output format 'docx'.*verbose_json"):
        format_output(_output(SEGMENTS), "docx")


def test_extensions():
    assert set(EXTENSIONS) == set(FORMATS)
    assert EXTENSIONS["text"] == "txt"
    assert EXTENSIONS["srt"] == "srt" and EXTENSIONS["vtt"] == "vtt" and EXTENSIONS["json"] == "json"
