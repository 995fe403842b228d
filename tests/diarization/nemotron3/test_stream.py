"""Nemotron 3 Diarization streamed: chunk by chunk equal to transformers' streaming session (its
processor's chunks, the speaker cache and FIFO), and speaker-turn events that rebuild the turns
its processor makes of the streamed logits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.diarization.nemotron3.fixture import reference_stream


def _pieces(audio: np.ndarray, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(0, len(audio), size=len(audio) // 1500))
    return np.split(audio, cuts)


# 4 s and 3.05 s in the mode with look-ahead, 1.0003 s without; 0.125 s is shorter than one chunk
@pytest.mark.parametrize(
    ("mode", "samples"),
    [("low_latency", 64000), ("low_latency", 48777), ("no_lookahead", 16005), ("low_latency", 2000)],
)
def test_steps_equal_transformers_chunk_by_chunk(ref, mine, clip, mode, samples):
    model, processor = ref
    audio = clip[:samples]
    expected = reference_stream(model, processor, audio, mode)
    stream = mine.stream(mode)
    steps = [s for piece in _pieces(audio, samples) for s in stream.push(piece)] + stream.finish()
    assert [s.probabilities.shape[0] for s in steps] == [logits.shape[0] for _, logits in expected]
    assert [s.first_frame for s in steps] == list(np.cumsum([0] + [s.probabilities.shape[0] for s in steps])[:-1])
    for step, (_, logits) in zip(steps, expected, strict=True):
        assert np.abs(step.probabilities - logits.sigmoid().numpy()).max() < 1e-4
    # given transformers' own chunk features, the streamed steps agree to rounding
    state = None
    for i, (feats, logits) in enumerate(expected):
        lookahead = 0 if i == len(expected) - 1 else processor._streaming_chunk_sizes[1]
        with torch.no_grad():
            got, state = mine.model.stream_step(feats, state, lookahead)
        assert (got[0] - logits).abs().max() < 1e-12
    if samples == 64000:
        assert stream.state.compressed  # the fixture overflows the speaker cache


def test_events_rebuild_the_processors_turns(ref, mine, clip):
    model, processor = ref
    expected = reference_stream(model, processor, clip, "low_latency")
    logits = torch.cat([lg for _, lg in expected])[None]
    segments = processor.extract_speaker_dict(logits)[0]
    names: dict[int, str] = {}
    for seg in segments:
        names.setdefault(seg["Speaker"], f"SPEAKER_{len(names):02d}")
    stream = mine.stream()
    events = [e for piece in _pieces(clip, 7) for e in stream.feed(piece)] + stream.close()
    opened = [e for e in events if e.type == "turn_opened"]
    closed = [e for e in events if e.type == "turn_closed"]
    assert len(opened) == len(closed) == len(segments)
    assert [e.time for e in events] == sorted(e.time for e in events)
    assert sorted((e.start, e.time, e.speaker) for e in closed) == sorted(
        (s["Start"], s["End"], names[s["Speaker"]]) for s in segments
    )
    assert stream.close() == []


def test_stream_errors(mine, clip):
    with pytest.raises(ValueError, match="unknown streaming mode"):
        mine.stream("fast")
    stream = mine.stream()
    with pytest.raises(ValueError, match="NaN"):
        stream.feed(np.array([np.nan], np.float32))
    stream.close()
    with pytest.raises(RuntimeError, match="finished"):
        stream.feed(clip[:100])
