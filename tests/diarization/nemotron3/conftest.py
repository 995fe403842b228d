from __future__ import annotations

import pytest

from tests.diarization.nemotron3.fixture import save_tiny


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
