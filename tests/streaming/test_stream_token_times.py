"""A live stream's segments time their tokens as the offline CTC strategy does
(``Segment.token_times``): one (start, end) per token, in order, on the stream's timeline;
each word spans its tokens. WeNet's tiny causal U2++ fixture."""

from __future__ import annotations

import pytest

from tests.conftest import AUDIO_DIR, FIXTURES_DIR

CAUSAL = FIXTURES_DIR / "wenet-u2pp-tiny-causal"


def test_stream_segments_carry_their_token_times():
    from oasr.audio import load_audio
    from oasr.engine.engine import ASREngine

    if not (CAUSAL / "train.yaml").is_file():
        pytest.skip(f"fixture not found at {CAUSAL}")
    samples = load_audio(AUDIO_DIR / "jfk.wav")
    engine = ASREngine(str(CAUSAL), max_streams=1)
    stream = engine.open_stream(sample_rate=16000, endpoint=True, word_timestamps=True)
    stream.feed(samples)
    stream.finish()
    segments = stream.output.segments
    assert segments
    for seg in segments:
        times = seg.token_times
        assert len(times) == len(seg.tokens) > 0
        assert all(a <= b for a, b in times) and all(x[1] <= y[0] for x, y in zip(times, times[1:]))
        assert (times[0][0], times[-1][1]) == (seg.start, seg.end)
        assert seg.start <= seg.words[0].start and seg.words[-1].end <= seg.end
    assert segments[-1].token_times[-1][1] <= len(samples) / 16000
