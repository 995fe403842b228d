"""``oasr bench --peer transformers`` on a Voxtral Realtime directory: the transformers child
runs the model card's offline ``generate`` on a padded batch, cuts each row to its own audio's
tokens, and so gives each clip what transformers gives it alone, which is oasr's text."""

from __future__ import annotations

import torch

from tests.models.bench_peer import transformers_child
from tests.models.voxtral_realtime.conftest import CLIPS


def test_transformers_child_batch_equals_each_clip_alone(tiny_voxtral_realtime, audio_dir):
    from oasr.engine import ASREngine

    fx = tiny_voxtral_realtime
    paths = [str(audio_dir / name) for name in CLIPS]
    spec = {"files": paths, "warmup": paths[1], "threads": 1, "batch_size": 2, "model_dir": str(fx.path)}
    result = transformers_child(spec)
    alone = []
    model = fx.model.float()
    for wave in fx.clips:
        inputs = fx.processor(wave, return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**inputs)
        alone.append(fx.processor.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)[0])
    fx.model.double()
    assert result["texts"] == [t.strip() for t in alone] and all(alone) and alone[0] != alone[1]
    engine = ASREngine(str(fx.path), device="cpu", max_batch_size=2)  # what the oasr child runs
    assert [o.text.strip() for o in engine.transcribe(paths)] == result["texts"]
