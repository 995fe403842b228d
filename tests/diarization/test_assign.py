"""Words and segments assigned to speakers (WhisperX's rule), speaker runs, and the documents
that show speakers: verbose_json, SRT / WebVTT labels, OpenAI's diarized_json."""

from __future__ import annotations

import json

import pytest

from oasr.diarization.assign import SpeakerIndex, assign_speakers, letter_labels, speaker_runs
from oasr.diarization.types import Diarization, SpeakerTurn
from oasr.engine.outputs import RequestOutput, Segment, Word
from oasr.formatting import diarized_json_dict, format_output, verbose_json_dict

TURNS = Diarization(
    [
        SpeakerTurn(0.0, 2.0, "SPEAKER_00"),
        SpeakerTurn(1.5, 4.0, "SPEAKER_01"),  # overlaps SPEAKER_00 over 1.5..2.0
        SpeakerTurn(6.0, 7.0, "SPEAKER_00"),
    ],
    duration=8.0,
)


@pytest.mark.parametrize(
    ("start", "end", "fill", "want"),
    [
        (0.2, 0.8, False, "SPEAKER_00"),  # inside one turn
        (1.6, 2.4, False, "SPEAKER_01"),  # 0.4 s of SPEAKER_00 against 0.8 s of SPEAKER_01
        (1.0, 2.5, False, "SPEAKER_00"),  # 1.0 s against 1.0 s: a tie goes to the turn that starts first
        (4.5, 5.0, False, None),  # no turn overlaps: no speaker
        (4.5, 5.0, True, "SPEAKER_00"),  # turn midpoints 1.0, 2.75, 6.5: 6.5 is nearest 4.75 (1.75 against 2.0)
        (4.1, 5.1, True, "SPEAKER_01"),  # 2.75 is nearest 4.6 (1.85 against 1.9)
        (4.0, 4.0, False, None),  # a zero-length word at a turn's end overlaps nothing
    ],
)
def test_whisperx_rule(start, end, fill, want):
    assert SpeakerIndex(TURNS.turns).speaker(start, end, fill) == want


def _output(words_per_segment: bool = True) -> RequestOutput:
    words = [
        Word(0.1, 0.5, " hello", 0.9),
        Word(0.6, 1.0, " there", 0.9),
        Word(2.2, 2.6, " general", 0.9),
        Word(2.7, 3.2, " kenobi", 0.9),
    ]
    seg1 = Segment(1, 0, 0.1, 3.2, " hello there general kenobi", words=words if words_per_segment else None)
    seg2 = Segment(2, 0, 6.1, 6.8, " bye", words=[Word(6.1, 6.8, " bye", 0.9)] if words_per_segment else None)
    seg3 = Segment(3, 0, 4.2, 5.0, " lost", words=[Word(4.2, 5.0, " lost", 0.9)] if words_per_segment else None)
    return RequestOutput("r", " hello there general kenobi bye lost", [seg1, seg2, seg3], duration=8.0)


def test_segments_take_the_speaker_of_most_of_their_words():
    out = assign_speakers(_output(), TURNS)
    assert [w.speaker for w in out.segments[0].words] == ["SPEAKER_00", "SPEAKER_00", "SPEAKER_01", "SPEAKER_01"]
    assert out.segments[0].speaker == "SPEAKER_00"  # 2 words each: the one whose words came first
    assert out.segments[1].speaker == "SPEAKER_00"
    assert out.segments[2].speaker is None and out.segments[2].words[0].speaker is None


def test_segments_without_words_take_their_span_overlap():
    out = assign_speakers(_output(words_per_segment=False), TURNS)
    # 0.1..3.2: SPEAKER_00 1.9 s, SPEAKER_01 1.7 s
    assert [s.speaker for s in out.segments] == ["SPEAKER_00", "SPEAKER_00", None]
    filled = assign_speakers(_output(words_per_segment=False), TURNS, fill_nearest=True)
    assert filled.segments[2].speaker == "SPEAKER_01"  # mid 4.6: the turn mid 2.75 is 1.85 away, 6.5 is 1.9


def test_speaker_runs_cut_segments_where_the_speaker_changes():
    out = assign_speakers(_output(), TURNS)
    runs = speaker_runs(out.segments)
    assert [(r.start, r.end, r.text, r.speaker) for r in runs] == [
        (0.1, 1.0, " hello there", "SPEAKER_00"),
        (2.2, 3.2, " general kenobi", "SPEAKER_01"),
        (6.1, 6.8, " bye", "SPEAKER_00"),
        (4.2, 5.0, " lost", None),
    ]


def test_letter_labels_keep_known_names():
    assert letter_labels(["S1", None, "S0", "S1", "Ann"], keep=["Ann"]) == {"S1": "A", "S0": "B", "Ann": "Ann"}
    assert letter_labels([f"S{i}" for i in range(28)])["S27"] == "AB"


def test_documents_show_speakers():
    out = assign_speakers(_output(), TURNS)
    out.diarization = TURNS
    doc = verbose_json_dict(out, words=True)
    assert [s.get("speaker") for s in doc["segments"]] == ["SPEAKER_00", "SPEAKER_00", None]
    assert "speaker" not in doc["segments"][2]
    speakers = [w.get("speaker") for w in doc["words"]]
    assert speakers == ["SPEAKER_00", "SPEAKER_00", "SPEAKER_01", "SPEAKER_01", "SPEAKER_00", None]
    srt = format_output(out, "srt")
    assert "[SPEAKER_00]: hello there\n" in srt and "[SPEAKER_01]: general kenobi\n" in srt  # cut at the change
    vtt = format_output(out, "vtt")
    assert "<v SPEAKER_01>general kenobi\n" in vtt and "\nlost\n" in vtt  # no speaker: no voice span
    plain = _output()  # not diarized: nothing changes
    assert "speaker" not in json.dumps(verbose_json_dict(plain, words=True)) and "[" not in format_output(plain, "srt")


def test_diarized_json_is_openais_shape():
    openai_types = pytest.importorskip("openai.types.audio")
    out = assign_speakers(_output(), TURNS)
    out.diarization = TURNS
    doc = diarized_json_dict(out, known=("Ann",))
    openai_types.TranscriptionDiarized.model_validate(doc)  # the official client's model of it
    assert [(s["id"], s["text"], s["speaker"]) for s in doc["segments"]] == [
        ("seg_0", "hello there", "A"),
        ("seg_1", "general kenobi", "B"),
        ("seg_2", "bye", "A"),
        ("seg_3", "lost", "B"),  # no turn overlaps it: the nearest turn's speaker (its midpoint 2.75)
    ]
    assert doc["task"] == "transcribe" and doc["duration"] == 8.0 and doc["text"] == out.text.strip()
