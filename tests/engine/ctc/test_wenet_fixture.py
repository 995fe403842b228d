"""The ctc and ctc_aed_rescoring strategies reproduce WeNet's own decodes of the shared
U2++ fixture end to end: audio file in, ASREngine, tokens and text out."""

from __future__ import annotations

import json

import pytest

from tests.conftest import AUDIO_DIR, FIXTURES_DIR

WENET_DIR = FIXTURES_DIR / "wenet-u2pp-tiny"
CLIP = AUDIO_DIR / "sense_and_sensibility_01_austen_64kb-0870.wav"


@pytest.fixture(scope="module")
def expected() -> dict:
    if not (WENET_DIR / "expected.json").is_file() or not CLIP.is_file():
        pytest.skip(f"WeNet fixture not found at {WENET_DIR}")
    return json.loads((WENET_DIR / "expected.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("decode_type", "method", "beam_size"),
    [
        ("ctc", "ctc_greedy_search", 1),
        ("ctc", "ctc_prefix_beam_search", 4),
        ("ctc_aed_rescoring", "attention_rescoring", 4),  # ctc_weight 0.3, reverse_weight 0.3 from train.yaml
    ],
)
def test_engine_reproduces_wenet(expected, decode_type, method, beam_size):
    from oasr.engine import ASREngine

    engine = ASREngine(str(WENET_DIR), decode_type=decode_type)
    out = engine.transcribe(str(CLIP), beam_size=beam_size, word_timestamps=True)
    assert [t for s in out.segments for t in s.tokens] == expected[method]
    assert out.text == expected["text"][method]
    words = [w for s in out.segments for w in s.words]
    assert words and 0.0 <= words[0].start < words[-1].end <= out.duration


def test_every_token_is_timed_around_its_ctc_spike(expected):
    """``Segment.token_times``: one (start, end) per token, in order, each covering the frames
    where the CTC best path (the model's full-context posteriors of WeNet's own fbank,
    ``reference.npz``, whose path is WeNet's greedy decode) emits that token; a segment and its
    words span their tokens' times."""
    import numpy as np
    import torch

    from oasr.engine import ASREngine

    engine = ASREngine(str(WENET_DIR))
    out = engine.transcribe(str(CLIP), beam_size=1, word_timestamps=True)
    tokens = [t for s in out.segments for t in s.tokens]
    times = [t for s in out.segments for t in s.token_times]
    assert tokens == expected["ctc_greedy_search"] and len(times) == len(tokens)

    model = engine.strategy.model
    feats = torch.from_numpy(np.load(WENET_DIR / "reference.npz")["fbank"])[None]
    with torch.inference_mode():
        enc, _ = model.encode_offline(feats, torch.tensor([feats.shape[1]]))
        best = model.ctc_log_probs(enc)[0].argmax(-1).tolist()
    runs = [(t0, t1, sym) for t0, t1, sym in _runs(best) if sym != model.blank_id]
    assert [sym for *_, sym in runs] == tokens
    frame_s = 0.04  # 10-ms fbank frames, 4x subsampling
    for (start, end), (t0, t1, _) in zip(times, runs, strict=True):
        assert start <= end and start <= (t1 + 1) * frame_s and end >= t0 * frame_s, (start, end, t0, t1)
    assert all(a[1] <= b[0] for a, b in zip(times, times[1:]))
    assert 0.0 <= times[0][0] and times[-1][1] <= out.duration
    for seg in out.segments:
        assert seg.token_times[0][0] == seg.start == seg.words[0].start
        assert seg.token_times[-1][1] == seg.end == seg.words[-1].end


def _runs(best: list[int]) -> list[tuple[int, int, int]]:
    """(first frame, last frame, symbol) of each run of one symbol in a best path."""
    out, t = [], 0
    while t < len(best):
        u = t
        while u + 1 < len(best) and best[u + 1] == best[t]:
            u += 1
        out.append((t, u, best[t]))
        t = u + 1
    return out
