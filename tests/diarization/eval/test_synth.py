"""``oasr.diarization.synth``: the two- and three-speaker mixes, built from the repository's
clips, are what their truth says: each turn inside its speaker's clip, the clips' samples where
the layout put them, gaps without overlap, overlaps of two voices at most, the per-speaker
transcripts in order, and the same set on every build."""

from __future__ import annotations

import numpy as np
import pytest

from oasr.audio import load_audio
from oasr.diarization.synth import SAMPLE_RATE, build_set, read_corpus, read_set, write_set
from tests.conftest import AUDIO_DIR

pytest.importorskip("silero_vad", reason="the truth is Silero VAD's speech spans of each clip")


@pytest.fixture(scope="module")
def clips():
    return read_corpus(AUDIO_DIR)


@pytest.fixture(scope="module")
def mixes(clips):
    return build_set(clips, mixes_per_setting=1)


def _overlap(a, b) -> float:
    return max(0.0, min(a.end, b.end) - max(a.start, b.start))


def test_settings_and_determinism(clips, mixes):
    assert [m.name for m in mixes] == ["2spk_gaps_0", "2spk_overlap_0", "3spk_gaps_0", "3spk_overlap_0"]
    assert [m.num_speakers for m in mixes] == [2, 2, 3, 3]
    again = build_set(clips, mixes_per_setting=1)
    for m, n in zip(mixes, again):
        assert np.array_equal(m.audio, n.audio) and m.truth == n.truth and m.transcripts == n.transcripts


def test_truth_is_where_each_clip_speaks(mixes):
    seconds = {p.clip.path: len(load_audio(p.clip.path)) / SAMPLE_RATE for m in mixes for p in m.pieces}
    for mix in mixes:
        turns = mix.truth.turns
        assert turns and all(0 <= t.start < t.end <= mix.duration for t in turns)
        for turn in turns:  # inside a placed clip of that speaker
            assert any(
                p.clip.speaker == turn.speaker
                and p.offset <= turn.start
                and turn.end <= p.offset + seconds[p.clip.path] + 1e-3
                for p in mix.pieces
            )
        others = [_overlap(a, b) for i, a in enumerate(turns) for b in turns[i + 1 :] if a.speaker != b.speaker]
        if mix.overlap:
            assert sum(others) > 0.5, mix.name
        else:
            assert sum(others) == 0.0, mix.name
        # never three voices at once: sample the timeline
        for t in np.arange(0.0, mix.duration, 0.05):
            assert sum(turn.start <= t < turn.end for turn in turns) <= 2
        # each speaker's transcript: their clips' texts in the order spoken
        for speaker, text in mix.transcripts.items():
            assert text == " ".join(p.clip.text for p in mix.pieces if p.clip.speaker == speaker)
        assert set(mix.transcripts) == set(mix.truth.speakers)


def test_samples_are_the_clips_where_placed(mixes):
    mix = mixes[0]  # gaps only: each clip's speech is the only voice there
    for piece in mix.pieces:
        clip = load_audio(piece.clip.path)
        at = round(piece.offset * SAMPLE_RATE)
        turn = next(t for t in mix.truth.turns if t.speaker == piece.clip.speaker and t.start >= piece.offset)
        a, b = round(turn.start * SAMPLE_RATE), min(round(turn.end * SAMPLE_RATE), at + len(clip))  # ms-rounded end
        placed, own = mix.audio[a:b].astype(np.float64), clip[a - at : b - at].astype(np.float64)
        assert np.corrcoef(placed, own)[0, 1] > 0.999, piece.clip.name


def test_written_set_reads_back(mixes, tmp_path):
    manifest = write_set(mixes[:2], tmp_path)
    rows = read_set(manifest)
    assert [r["audio"] for r in rows] == ["2spk_gaps_0.wav", "2spk_overlap_0.wav"]
    for row, mix in zip(rows, mixes):
        audio = load_audio(row["path"])
        assert len(audio) == len(mix.audio) and np.abs(audio - mix.audio).max() < 1e-4  # 16-bit PCM
        assert [(t.start, t.end, t.speaker) for t in row["truth"].turns] == [
            (t.start, t.end, t.speaker) for t in mix.truth.turns
        ]
        assert row["transcripts"] == mix.transcripts and row["num_speakers"] == mix.num_speakers
