"""``oasr.diarization.scoring`` on hand-made cases whose DER, JER and cpWER are worked out below."""

from __future__ import annotations

import pytest

from oasr.diarization import Diarization, SpeakerTurn
from oasr.diarization.scoring import read_rttm, score_cpwer, score_diarization, speaker_texts

pytest.importorskip("pyannote.metrics", reason="diarization scoring needs pyannote.metrics (.ci/run installs it)")
pytest.importorskip("meeteval", reason="cpWER needs meeteval (.ci/run installs it)")

# Reference: a speaks 0-4, b speaks 5-10 (9 s of speech in a 10-s recording).
REFERENCE = Diarization([SpeakerTurn(0, 4, "a"), SpeakerTurn(5, 10, "b")], 10.0)


def test_der_and_jer_by_hand():
    # X covers a and 1 s of the silence after it (false alarm); Y stops 1 s before b does (missed).
    hyp = Diarization([SpeakerTurn(0, 5, "X"), SpeakerTurn(5, 9, "Y")], 10.0)
    full = score_diarization([(REFERENCE, hyp)])
    assert (full.missed, full.false_alarm, full.confusion, full.total) == pytest.approx((1.0, 1.0, 0.0, 9.0))
    assert full.der == pytest.approx(2 / 9)
    assert full.jer == pytest.approx((1 - 4 / 5 + 1 - 4 / 5) / 2)  # each speaker: 4 s shared of 5 s
    # collar 0.5 = +-0.25 s around 0, 4, 5 and 10 left out: 3.5 + 4.5 s scored, false alarm 4.25-4.75,
    # missed 9-9.75.
    forgiving = score_diarization([(REFERENCE, hyp)], collar=0.5)
    assert (forgiving.missed, forgiving.false_alarm, forgiving.total) == pytest.approx((0.75, 0.5, 8.0))
    assert forgiving.der == pytest.approx(1.25 / 8)


def test_confusion_overlap_and_mapping():
    # Labels do not matter, only the best mapping; a swapped labelling scores 0.
    swapped = Diarization([SpeakerTurn(0, 4, "b"), SpeakerTurn(5, 10, "a")], 10.0)
    assert score_diarization([(REFERENCE, swapped)]).der == 0.0
    # One speaker for everything: mapped to b (the longer), a's 4 s are confused.
    one = Diarization([SpeakerTurn(0, 4, "S"), SpeakerTurn(5, 10, "S")], 10.0)
    s = score_diarization([(REFERENCE, one)])
    assert (s.confusion, s.der) == pytest.approx((4.0, 4 / 9))
    # With a 1-s overlap in the reference (b from 3 s), a hypothesis without overlap misses 1 s;
    # skip_overlap leaves that second out of the scoring.
    overlapped = Diarization([SpeakerTurn(0, 4, "a"), SpeakerTurn(3, 10, "b")], 10.0)
    hyp = Diarization([SpeakerTurn(0, 4, "A"), SpeakerTurn(4, 10, "B")], 10.0)
    full = score_diarization([(overlapped, hyp)])
    assert (full.missed, full.total, full.der) == pytest.approx((1.0, 11.0, 1 / 11))
    assert score_diarization([(overlapped, hyp)], skip_overlap=True).der == 0.0
    # Errors and speech add up over files before dividing.
    both = score_diarization([(REFERENCE, one), (REFERENCE, swapped)])
    assert (both.files, both.der) == (2, pytest.approx(4 / 18))
    with pytest.raises(ValueError, match="nothing to score"):
        score_diarization([])


def test_cpwer_by_hand():
    reference = {"a": "And so, my fellow Americans", "b": "ask not"}
    # Hypothesis speakers in another order and case: y is a with one word wrong, x is b.
    hyp = {"x": "Ask not.", "y": "and so my yellow americans"}
    s = score_cpwer([(reference, hyp)])
    assert (s.errors, s.substitutions, s.reference_words, s.rate) == (1, 1, 7, pytest.approx(1 / 7))
    # A missed speaker's words are deletions, an extra speaker's insertions.
    s = score_cpwer([(reference, {"x": "and so my fellow americans"})])
    assert (s.deletions, s.missed_speakers, s.errors) == (2, 1, 2)
    s = score_cpwer([(reference, {"x": "and so my fellow americans", "z": "hello"})])  # z is mapped to b
    assert (s.substitutions, s.deletions, s.missed_speakers, s.errors) == (1, 1, 0, 2)
    s = score_cpwer([(reference, {"x": "and so my fellow americans", "y": "ask not", "z": "hello there"})])
    assert (s.insertions, s.extra_speakers, s.errors) == (2, 1, 2)


def test_speaker_texts_and_rttm(tmp_path):
    segments = [
        {"start": 2.0, "speaker": "SPEAKER_01", "text": " ask not"},
        {"start": 0.0, "speaker": "SPEAKER_00", "text": "And so"},
        {"start": 1.0, "speaker": "SPEAKER_00", "text": "my fellow Americans"},
        {"start": 3.0, "speaker": None, "text": "(no speaker)"},
    ]
    assert speaker_texts(segments) == {"SPEAKER_00": "And so my fellow Americans", "SPEAKER_01": "ask not"}
    path = tmp_path / "x.rttm"
    path.write_text(REFERENCE.to_rttm("x") + "SPKR-INFO x 1 <NA> <NA> <NA> unknown a <NA> <NA>\n")
    back = read_rttm(path)
    assert list(back) == ["x"] and back["x"].turns == REFERENCE.turns
    path.write_text("SPEAKER x 1 0.5 oops <NA> <NA> a <NA> <NA>\n")
    with pytest.raises(ValueError, match="x.rttm:1"):
        read_rttm(path)
