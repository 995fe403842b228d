import numpy as np
import pytest

from oasr.diarization import Diarization, Diarizer, SpeakerTurn, speaker_label


def test_labels_order_and_merge():
    d = Diarization(
        [
            SpeakerTurn(2.0, 3.0, "SPEAKER_01"),
            SpeakerTurn(0.0, 1.0, "SPEAKER_00"),
            SpeakerTurn(1.05, 1.5, "SPEAKER_00"),
        ],
        duration=4.0,
    )
    assert d.speakers == ["SPEAKER_00", "SPEAKER_01"]
    assert [t.start for t in d.turns] == [0.0, 1.05, 2.0]
    assert d.merged().turns == d.turns
    merged = d.merged(collar=0.1)
    assert merged.turns == [SpeakerTurn(0.0, 1.5, "SPEAKER_00"), SpeakerTurn(2.0, 3.0, "SPEAKER_01")]
    assert speaker_label(3) == "SPEAKER_03"


def test_rttm():
    d = Diarization([SpeakerTurn(0.5, 1.25, "SPEAKER_00")], duration=2.0)
    assert d.to_rttm("clip") == "SPEAKER clip 1 0.500 0.750 <NA> <NA> SPEAKER_00 <NA> <NA>\n"
    with pytest.raises(ValueError, match="whitespace"):
        d.to_rttm("a clip")


def test_bad_turn_and_protocol():
    with pytest.raises(ValueError, match="start <= end"):
        SpeakerTurn(2.0, 1.0, "SPEAKER_00")

    class Fixed:
        sampling_rate = 16000
        max_speakers = None

        def diarize(self, audios, *, num_speakers=None, min_speakers=None, max_speakers=None):
            return [Diarization([], len(a) / 16000) for a in audios]

    assert isinstance(Fixed(), Diarizer)
    assert Fixed().diarize([np.zeros(16000, np.float32)])[0].duration == 1.0
