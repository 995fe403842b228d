"""load_diarizer's dispatch and refusals, and the DiarizationService: batched calls grouped by
speaker constraints, a failing recording failing alone, known speakers named by embedding."""

from __future__ import annotations

import numpy as np
import pytest

from oasr.diarization.loader import DiarizerNotFoundError, load_diarizer
from oasr.diarization.service import DiarizationJob, DiarizationService, SpeakerConstraints
from tests.diarization import tone
from tests.diarization.conftest import A_HZ, B_HZ


def test_load_diarizer_dispatches_and_names_the_layouts(tone_dir, tmp_path):
    assert isinstance(load_diarizer(tone_dir), tone.ToneDiarizer)
    with pytest.raises(DiarizerNotFoundError) as e:
        load_diarizer(tmp_path)
    message = str(e.value)
    for name in ("nemotron3", "pyannote", "sortformer", "tone"):
        assert f"{name}: " in message
    with pytest.raises(FileNotFoundError):
        load_diarizer(tmp_path / "missing")


def test_jobs_share_calls_by_constraints(tone_dir, two_speakers):
    diarizer = load_diarizer(tone_dir)
    service = DiarizationService(diarizer, batch_size=2)
    one = tone.tones([(0.2, 1.5, B_HZ)], 2.0)
    jobs = [DiarizationJob(two_speakers), DiarizationJob(one), DiarizationJob(two_speakers)]
    jobs.append(DiarizationJob(two_speakers, SpeakerConstraints(num_speakers=1)))
    service.run(jobs)
    assert (diarizer.calls, diarizer.rows) == (3, 4)  # [2 unconstrained] [1 unconstrained] [1 num_speakers=1]
    alone = diarizer.diarize([two_speakers])[0]
    assert jobs[0].result == alone and jobs[2].result == alone  # a row's result does not depend on the batch
    assert [(t.start, t.end, t.speaker) for t in alone.turns] == [
        (0.3, 2.0, "SPEAKER_00"),
        (2.2, 4.0, "SPEAKER_01"),
        (4.2, 5.0, "SPEAKER_00"),
    ]
    assert jobs[3].result.speakers == ["SPEAKER_00"]


def test_a_failing_recording_fails_alone(tone_dir, two_speakers):
    diarizer = load_diarizer(tone_dir)
    diarizer.fail_on = 2.0
    jobs = [DiarizationJob(two_speakers), DiarizationJob(tone.tones([], 2.0)), DiarizationJob(two_speakers)]
    DiarizationService(diarizer).run(jobs)
    assert isinstance(jobs[1].error, RuntimeError) and jobs[1].result is None
    assert jobs[0].result is not None and jobs[2].result == jobs[0].result


def test_constraints_are_checked(tone_dir):
    with pytest.raises(ValueError, match="min_speakers=3 is more than max_speakers=2"):
        SpeakerConstraints(min_speakers=3, max_speakers=2)
    with pytest.raises(ValueError, match="num_speakers must be an integer >= 1"):
        SpeakerConstraints(num_speakers=0)
    with pytest.raises(ValueError, match="finds at most 4 speakers"):
        SpeakerConstraints(num_speakers=5).check(load_diarizer(tone_dir))


def test_known_speakers_are_named_by_their_voices(tone_dir, two_speakers):
    service = DiarizationService(load_diarizer(tone_dir))
    references = {"bob": tone.tones([(0.0, 3.0, B_HZ)], 3.0), "ann": tone.tones([(0.0, 3.0, A_HZ)], 3.0)}
    job = DiarizationJob(two_speakers, known=references)
    service.run([job])
    assert [t.speaker for t in job.result.turns] == ["ann", "bob", "ann"]
    only_bob = DiarizationJob(two_speakers, known={"bob": references["bob"]})
    service.run([only_bob])
    assert [t.speaker for t in only_bob.result.turns] == ["SPEAKER_00", "bob", "SPEAKER_00"]
    short = DiarizationJob(two_speakers, known={"ann": references["ann"][:16000]})
    service.run([short])
    assert "references must be 2 to 10 s" in str(short.error)


def test_known_speakers_need_speaker_embeddings(tone_dir, two_speakers):
    class NoEmbed:  # the tone diarizer without embed
        sampling_rate, max_speakers = 16000, 4

        def __init__(self, inner):
            self.inner = inner

        def diarize(self, audios, **kw):
            return self.inner.diarize(audios, **kw)

    service = DiarizationService(NoEmbed(load_diarizer(tone_dir)))
    job = DiarizationJob(two_speakers, known={"ann": np.zeros(48000, np.float32)})
    service.run([job])
    assert "has no speaker embeddings" in str(job.error)
