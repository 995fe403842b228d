"""``oasr bench --peer transformers`` on a Moonshine Streaming directory: the transformers child
runs the offline decode as Moonshine's card does (``MoonshineStreamingProcessor``, greedy
``generate`` at 6.5 positions per second) and, a clip per batch, gives oasr's transcripts."""

from __future__ import annotations

import torch

from tests.models.moonshine_streaming.conftest import CLIPS


def test_transformers_child_equals_oasr_clip_by_clip(reference, engine, manifest):
    from oasr.cli import bench

    by_name = {row["audio"]: row["path"] for row in manifest}
    paths = [by_name[name] for name in CLIPS]
    spec = {"files": paths, "warmup": paths[0], "threads": 1, "batch_size": 1, "model_dir": str(reference.path)}
    threads = torch.get_num_threads()
    try:
        result = bench._transformers_child(spec)
    finally:
        torch.set_num_threads(threads)
    ours = [o.text.strip() for o in engine.transcribe(paths)]  # what the oasr child runs: one batch
    assert result["texts"] == ours and len(set(ours)) == len(ours) and all(ours)
    assert result["tokens"] >= sum(len(t.split()) for t in ours)
