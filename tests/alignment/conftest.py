"""Fixtures of the alignment tests: a tiny random wav2vec2 CTC checkpoint saved by transformers'
own classes (the wav2vec2 family's fixture builder), loaded as an aligner, and a short clip."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import AUDIO_DIR

CLIP = "jfk.wav"
CLIP_S = 3.0
TEXT = "And so, my fellow Americans: ask not what your country can do for you."


@pytest.fixture(scope="package", autouse=True)
def _one_thread():
    """Tiny models on a small shared machine: one intra-op thread (restored afterwards)."""
    import torch

    from oasr.models.decoders.threads import one_intra_op_thread

    with one_intra_op_thread(torch.device("cpu")):
        yield


@pytest.fixture(scope="package")
def w2v_dir(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    from tests.models.wav2vec2 import _reference as ref

    return ref.build_random(tmp_path_factory.mktemp("aligner"), "wav2vec2_group", seed=3)


@pytest.fixture(scope="package")
def loaded(w2v_dir):
    import oasr

    return oasr.load_pretrained(w2v_dir)


@pytest.fixture(scope="package")
def clip():
    from oasr.audio import load_audio

    path = AUDIO_DIR / CLIP
    if not path.is_file():
        pytest.skip(f"{path} not found")
    return load_audio(str(path))[: int(CLIP_S * 16000)]


@pytest.fixture(scope="package")
def clip_path(clip, tmp_path_factory) -> str:
    """The clip as a 16-bit WAV file, for the command line."""
    soundfile = pytest.importorskip("soundfile")

    path = tmp_path_factory.mktemp("clip") / "clip.wav"
    soundfile.write(str(path), clip, 16000, subtype="PCM_16")
    return str(path)
