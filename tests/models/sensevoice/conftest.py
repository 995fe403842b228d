"""Fixtures of the SenseVoice tests: a tiny SenseVoiceSmall directory written from funasr's own
model (skipped where funasr is absent) and funasr's ``AutoModel`` over it, the same layout written
from oasr's own random model (no funasr needed), and clips from ``data/audio``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import AUDIO_DIR
from tests.models.paraformer._funasr_format import write_am_mvn
from tests.models.sensevoice._funasr_format import BPE, CONFIGURATION, config, write_bpe

# Three languages, three lengths (2.9 s, 3.9 s, 4.3 s).
CLIPS = ("speechbrain_spk1_snt1.wav", "picovoice_test_ko.wav", "aishell-BAC009S0724W0121.wav")


@pytest.fixture(scope="session")
def funasr_dir(tmp_path_factory) -> Path:
    """A tiny random SenseVoiceSmall directory written from funasr's own model."""
    pytest.importorskip(
        "funasr", reason="funasr is not installed (pip install torch==2.13.0 funasr==1.4.16): no reference"
    )
    from tests.models.sensevoice._funasr_format import write_funasr_dir

    return write_funasr_dir(tmp_path_factory.mktemp("sensevoice"))


@pytest.fixture(scope="session")
def funasr_model(funasr_dir):
    """``funasr.AutoModel`` over the tiny directory (CPU), its front end without dither.

    The released config sets no ``dither``, so funasr's ``WavFrontend`` adds its default random
    dither (1.0 on int16-scaled samples) to every call; oasr's front end is deterministic, as
    funasr's with ``dither=0``, which is what it is compared with.
    """
    from funasr import AutoModel

    return AutoModel(
        model=str(funasr_dir), disable_update=True, device="cpu", log_level="ERROR", frontend_conf={"dither": 0.0}
    )


def write_oasr_sensevoice_dir(directory: Path, seed: int = 0) -> Path:
    """The released layout written from oasr's own random model (its module names are FunASR's
    but for the head, ``ctc.ctc_lo`` there): for the tests that need no funasr."""
    import json

    import yaml

    from oasr.models.sensevoice.convert import check_tokenizer, model_config
    from oasr.models.sensevoice.model import SenseVoiceModel

    cfg = config()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    (directory / "configuration.json").write_text(json.dumps(CONFIGURATION, indent=2), encoding="utf-8")
    vocab = check_tokenizer(write_bpe(directory / BPE))
    torch.manual_seed(seed)
    model = SenseVoiceModel(model_config(directory / "config.yaml", cfg, vocab))
    state = {k: v for k, v in model.state_dict().items() if not k.startswith(("encoder.cmvn_", "ctc."))}
    state["ctc.ctc_lo.weight"] = model.ctc.weight[:vocab].detach().clone()
    state["ctc.ctc_lo.bias"] = model.ctc.bias[:vocab].detach().clone()
    torch.save(state, directory / "model.pt")
    dim = model.config.encoder.input_size
    write_am_mvn(directory / "am.mvn", -10.0 * torch.ones(dim), 0.25 * torch.ones(dim))
    return directory


@pytest.fixture(scope="session")
def oasr_dir(tmp_path_factory) -> Path:
    return write_oasr_sensevoice_dir(tmp_path_factory.mktemp("sensevoice_oasr"))


@pytest.fixture(scope="session")
def clips() -> dict[str, np.ndarray]:
    """name -> 16 kHz float32 mono samples."""
    from oasr.audio.io import load_audio

    missing = [c for c in CLIPS if not (AUDIO_DIR / c).is_file()]
    if missing:
        pytest.skip(f"{missing} not in {AUDIO_DIR}")
    return {c: load_audio(str(AUDIO_DIR / c), 16000) for c in CLIPS}
