from __future__ import annotations

import pytest

from tests.diarization.nemotron3.fixture import reference, save_tiny


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random checkpoint saved by transformers' ``save_pretrained``."""
    pytest.importorskip("transformers.models.nemotron3_diarization")
    return save_tiny(tmp_path_factory.mktemp("nemotron3_diarization"))


@pytest.fixture(scope="module")
def clip():
    """4 s of real speech (16 kHz float32)."""
    from oasr.audio.io import load_audio
    from tests.conftest import AUDIO_DIR

    return load_audio(AUDIO_DIR / "1272-141231-0002.flac")[: 16000 * 4]


@pytest.fixture(scope="module")
def ref(tiny_dir):
    """transformers' float64 model and its processor."""
    return reference(tiny_dir)


@pytest.fixture(scope="module")
def mine(tiny_dir):
    """oasr's float64 diarizer of the same directory."""
    import torch

    from oasr.diarization.nemotron3 import load

    return load(tiny_dir, dtype=torch.float64)
