"""``oasr bench --peer transformers`` on a Moonshine Streaming directory: the transformers child
runs the offline decode as Moonshine's card does (``MoonshineStreamingProcessor``, greedy
``generate`` at 6.5 positions per second) and, a clip per batch, gives oasr's transcripts."""

from __future__ import annotations

from tests.models.bench_peer import transformers_child
from tests.models.moonshine_streaming.conftest import CLIPS


def test_transformers_child_equals_oasr_clip_by_clip(reference, engine, manifest):

    by_name = {row["audio"]: row["path"] for row in manifest}
    paths = [by_name[name] for name in CLIPS]
    spec = {"files": paths, "warmup": paths[0], "threads": 1, "batch_size": 1, "model_dir": str(reference.path)}
    result = transformers_child(spec)
    ours = [o.text.strip() for o in engine.transcribe(paths)]  # what the oasr child runs: one batch
    assert result["texts"] == ours and len(set(ours)) == len(ours) and all(ours)
    assert result["tokens"] >= sum(len(t.split()) for t in ours)
