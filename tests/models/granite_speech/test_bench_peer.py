"""``oasr bench --peer transformers`` on a Granite Speech directory: the transformers child runs
the model card (chat prompt, processor, ``generate`` with the LoRA adapter, at the checkpoint's
declared budget, which oasr reads too) and, a clip per batch, gives oasr's transcripts."""

from __future__ import annotations

import shutil

from benchmarks.speech_llm_checkpoints import declare_budget
from tests.conftest import AUDIO_DIR
from tests.models.bench_peer import transformers_child
from tests.models.granite_speech.conftest import CLIPS

MAX_NEW = 12


def test_transformers_child_equals_oasr_clip_by_clip(hf_dir, tmp_path):
    from oasr.engine import ASREngine

    directory = shutil.copytree(hf_dir, tmp_path / "granite", dirs_exist_ok=True)
    declare_budget(directory, MAX_NEW)  # both sides then stop at it (transformers' default is 20)
    paths = [str(AUDIO_DIR / name) for name in CLIPS]
    spec = {"files": paths, "warmup": paths[2], "threads": 1, "batch_size": 1, "model_dir": str(directory)}
    result = transformers_child(spec)
    outputs = ASREngine(str(directory), device="cpu", max_batch_size=3).transcribe(paths)  # the oasr child's run
    assert result["texts"] == [o.text.strip() for o in outputs] and len(set(result["texts"])) > 1
    assert result["tokens"] == 3 * MAX_NEW and {o.finish_reason for o in outputs} == {"length"}
