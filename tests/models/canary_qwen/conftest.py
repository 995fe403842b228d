"""Fixtures of the Canary-Qwen tests: the tiny SALM built and saved by NeMo (``reference.py``),
once per session, and real clips of unequal lengths. Skipped where ``nemo-toolkit`` or its
speechlm2 imports (``peft``, ...) are absent."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# 2.9 s, 0.5 s (a handful of encoder frames): unequal rows, so batches are left-padded.
CLIPS = ("speechbrain_spk1_snt1.wav", "bambatse_15_haggard_0247.wav")


@dataclass
class Salm:
    """The saved directory and NeMo's SALM (eval, float32)."""

    path: Path
    model: Any


@pytest.fixture(scope="session")
def salm(tmp_path_factory) -> Salm:
    pytest.importorskip("peft", reason="peft is not installed (SALM's LoRA; .ci/run installs it)")
    pytest.importorskip(
        "nemo.collections.speechlm2.models",
        reason="nemo-toolkit's speechlm2 does not import here (the reference of the Canary-Qwen tests)",
    )
    from tests.models.canary_qwen import reference

    path, model = reference.build(tmp_path_factory.mktemp("canary_qwen"))
    return Salm(path, model)


@pytest.fixture(scope="session")
def waveforms(manifest) -> list[np.ndarray]:
    from oasr.audio import load_audio

    by_name = {row["audio"]: row["path"] for row in manifest}
    return [load_audio(by_name[name]) for name in CLIPS]
