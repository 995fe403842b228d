"""Fixtures of the Paraformer tests: tiny FunASR directories built by funasr's own classes
(skipped where funasr is absent), the same layout written from oasr's own random model
(no funasr needed), and Mandarin speech from ``../shared``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import AUDIO_DIR
from tests.models.paraformer._funasr_format import TOKENS, config, write_am_mvn

ZH_CLIP = "funasr_asr_example.wav"


def _funasr():
    return pytest.importorskip(
        "funasr", reason="funasr is not installed (pip install torch==2.13.0 funasr==1.4.16): no reference"
    )


@pytest.fixture(scope="session")
def funasr_dirs(tmp_path_factory) -> dict[str, Path]:
    """kind -> a tiny random FunASR directory written from funasr's own model."""
    _funasr()
    from tests.models.paraformer._funasr_format import write_funasr_dir

    root = tmp_path_factory.mktemp("funasr")
    return {kind: write_funasr_dir(root / kind, kind) for kind in ("Paraformer", "BiCifParaformer")}


@pytest.fixture(scope="session")
def funasr_models(funasr_dirs) -> dict[str, object]:
    """kind -> ``funasr.AutoModel`` over that directory (CPU)."""
    from funasr import AutoModel

    return {
        kind: AutoModel(model=str(d), disable_update=True, device="cpu", log_level="ERROR")
        for kind, d in funasr_dirs.items()
    }


def write_oasr_funasr_dir(directory: Path, kind: str = "Paraformer", seed: int = 0) -> Path:
    """The FunASR layout written from oasr's own random model (its module names are FunASR's):
    for the loader tests that need no funasr."""
    import yaml

    from oasr.models.paraformer.convert import model_config
    from oasr.models.paraformer.model import ParaformerModel

    cfg = config(kind)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    torch.manual_seed(seed)
    model = ParaformerModel(model_config(directory / "config.yaml", cfg, len(TOKENS)))
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("encoder.cmvn_")}
    torch.save(state, directory / "model.pt")
    (directory / "tokens.json").write_text(json.dumps(TOKENS, ensure_ascii=False), encoding="utf-8")
    dim = model.config.encoder.input_size
    write_am_mvn(directory / "am.mvn", -10.0 * torch.ones(dim), 0.25 * torch.ones(dim))
    return directory


def write_firing_paraformer_dir(directory: Path, seed: int = 3) -> Path:
    """``write_oasr_funasr_dir`` with its weights scaled up and its CIF output biased so that it
    fires on speech (about every third encoder frame): random text, but timed tokens on every clip."""
    d = write_oasr_funasr_dir(directory, seed=seed)
    state = torch.load(d / "model.pt", weights_only=True)
    with torch.no_grad():
        for v in state.values():
            if v.is_floating_point():
                v.mul_(1.5)
        state["predictor.cif_output.weight"].mul_(0.3)
        state["predictor.cif_output.bias"].fill_(-0.7)
    torch.save(state, d / "model.pt")
    return d


@pytest.fixture
def oasr_dir(tmp_path) -> Path:
    return write_oasr_funasr_dir(tmp_path / "paraformer")


@pytest.fixture(scope="session")
def zh_audio() -> np.ndarray:
    """A Mandarin clip at 16 kHz (float32 mono)."""
    path = AUDIO_DIR / ZH_CLIP
    if not path.is_file():
        pytest.skip(f"data/audio not found at {path}")
    from oasr.audio.io import load_audio

    return load_audio(str(path), 16000)
