"""Fixtures of the WeNet conformer tests: the shared U2++ experiment directory built
and decoded by WeNet's own code (skipped when ``../shared`` is absent), and the
conformer family registered."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import AUDIO_DIR, FIXTURES_DIR

WENET_DIR = FIXTURES_DIR / "wenet-u2pp-tiny"
CLIP = "sense_and_sensibility_01_austen_64kb-0870.wav"


@pytest.fixture(scope="session")
def wenet_dir() -> Path:
    if not (WENET_DIR / "train.yaml").is_file():
        pytest.skip(f"WeNet fixture not found at {WENET_DIR}")
    return WENET_DIR


@pytest.fixture(scope="session")
def reference(wenet_dir) -> dict[str, np.ndarray]:
    with np.load(wenet_dir / "reference.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="session")
def expected(wenet_dir) -> dict:
    return json.loads((wenet_dir / "expected.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def clip_path(wenet_dir) -> Path:
    path = AUDIO_DIR / CLIP
    if not path.is_file():
        pytest.skip(f"fixture clip not found at {path}")
    return path


@pytest.fixture(scope="session")
def waveform(clip_path) -> np.ndarray:
    from oasr.audio import load_audio

    return load_audio(clip_path)


@pytest.fixture(scope="session")
def loaded64(wenet_dir):
    """The fixture through ``oasr.load_pretrained`` in float64 (parity comparisons)."""
    import torch

    import oasr

    return oasr.load_pretrained(wenet_dir, dtype=torch.float64)


@pytest.fixture(scope="session")
def loaded32(wenet_dir):
    """The fixture through ``oasr.load_pretrained`` at its stored float32."""
    import oasr

    return oasr.load_pretrained(wenet_dir)


@pytest.fixture
def edited_dir(wenet_dir, tmp_path):
    """A copy of the fixture directory whose train.yaml the test edits: call it with a
    function that mutates the parsed config (and a directory name to make several);
    returns the copy's path. The weights, units and CMVN are symlinks."""
    import yaml

    def make(edit, name: str = "exp") -> Path:
        out = tmp_path / name
        out.mkdir()
        for name in ("final.pt", "units.txt", "global_cmvn"):
            (out / name).symlink_to(wenet_dir / name)
        cfg = yaml.safe_load((wenet_dir / "train.yaml").read_text(encoding="utf-8"))
        edit(cfg)
        (out / "train.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
        return out

    return make
