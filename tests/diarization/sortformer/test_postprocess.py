"""The live post-processing against the offline one (no NeMo needed: ``test_sortformer.py`` holds
the offline one to NeMo's ``ts_vad_post_processing``)."""

from __future__ import annotations

import numpy as np

from oasr.diarization.sortformer.postprocess import LiveSegmenter, PostProcessing, speech_segments


def test_live_segments_are_the_offline_ones_each_opened_at_its_start():
    """Random walks of probabilities cut into random pieces, under thresholds, padding and
    minimum durations that join, drop and revive segments."""
    g = np.random.default_rng(0)
    for _ in range(300):
        n = int(g.integers(1, 150))
        probs = 1 / (1 + np.exp(-np.cumsum(g.normal(0, 1.0, size=(n, 3)), axis=0)))
        params = PostProcessing(
            onset=g.uniform(0.3, 0.7),
            offset=g.uniform(0.3, 0.7),
            pad_onset=float(g.choice([0, 0.05, 0.3, 1.0])),
            pad_offset=float(g.choice([0, 0.1, 0.4, 1.0])),
            min_duration_on=float(g.choice([0, 0.1, 0.5, 1.0])),
            min_duration_off=float(g.choice([0, 0.2, 0.6])),
        )
        live = LiveSegmenter(3, 8, params)
        cuts = sorted(int(c) for c in g.integers(0, n, size=int(g.integers(0, 20))))
        events = [e for a, b in zip([0, *cuts], [*cuts, n]) for e in live.push(probs[a:b])] + live.finish()
        for slot in range(3):
            closed = [(s, e) for kind, k, s, e in events if kind == "closed" and k == slot]
            opened = [s for kind, k, s, _ in events if kind == "opened" and k == slot]
            assert closed == speech_segments(probs[:, slot], 8, params), params
            assert opened == [s for s, _ in closed]
