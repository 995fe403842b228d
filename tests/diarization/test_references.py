"""``oasr.diarization.references``: the table of references and how two systems' turns agree."""

from __future__ import annotations

import pytest

from oasr.diarization import Diarization, SpeakerTurn
from oasr.diarization.loader import PACKAGES
from oasr.diarization.references import REFERENCES, agreement, in_batches


def _d(*turns: tuple[float, float, str], duration: float = 10.0) -> Diarization:
    return Diarization([SpeakerTurn(*t) for t in turns], duration)


def test_every_diarization_package_has_a_reference():
    assert set(REFERENCES) == set(PACKAGES)


def test_agreement_ignores_labels_and_scores_other_turns():
    pytest.importorskip("pyannote.metrics")
    ref = [_d((0.0, 4.0, "SPEAKER_00"), (4.0, 8.0, "SPEAKER_01")), _d()]
    swapped = [_d((0.0, 4.0, "SPEAKER_01"), (4.0, 8.0, "SPEAKER_00")), _d()]
    assert agreement(swapped, ref) == {"der": 0.0, "same_turns": 2, "files": 2}
    shifted = [_d((0.0, 5.0, "SPEAKER_00"), (5.0, 8.0, "SPEAKER_01")), _d((1.0, 2.0, "SPEAKER_00"))]
    got = agreement(shifted, ref)  # the empty reference file is not scored: 1 s confused of 8
    assert got["der"] == pytest.approx(1 / 8) and got["same_turns"] == 0
    assert agreement([_d()], [_d()])["der"] is None  # no reference speech anywhere
    with pytest.raises(ValueError):
        agreement(ref, ref[:1])


def test_in_batches_keeps_the_order():
    calls = []

    def diarize(audios):
        calls.append(len(audios))
        return [_d(duration=float(a)) for a in audios]

    assert [d.duration for d in in_batches(diarize, [1, 2, 3, 4, 5], 2)] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert calls == [2, 2, 1]
