"""``oasr bench --peer transformers`` on a Granite Speech 5 directory: the transformers child
runs the model card (processor, ``generate``, ``batch_decode``) and its padded batch gives each
clip transformers' own text alone, which is oasr's."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.conftest import AUDIO_DIR
from tests.models.bench_peer import transformers_child


def test_transformers_child_runs_the_model_card(hf_dir, processor, hf_model):
    from oasr.engine import ASREngine

    paths = [str(AUDIO_DIR / n) for n in ("jaufry_03_lafon_0298.wav", "roots_38_morris_0130.wav", "jfk.wav")]
    if not all(AUDIO_DIR.joinpath(p).is_file() for p in paths):
        pytest.skip(f"data/audio not found at {AUDIO_DIR}")
    spec = {"files": paths, "warmup": paths[0], "threads": 1, "batch_size": 3, "model_dir": str(hf_dir)}
    result = transformers_child(spec)
    from oasr.audio import load_audio

    hf32 = copy.deepcopy(hf_model).float()  # the child runs float32
    alone = []
    for path in paths:
        inputs = processor(load_audio(path), sampling_rate=16000, return_tensors="pt")
        with torch.inference_mode():
            alone.append(processor.batch_decode(hf32.generate(**inputs), skip_special_tokens=True)[0].strip())
    assert result["texts"] == alone and all(alone) and result["tokens"] > 0
    engine = ASREngine(str(hf_dir), device="cpu", max_batch_size=3)  # what the oasr child runs
    assert [o.text.strip() for o in engine.transcribe(paths)] == alone
