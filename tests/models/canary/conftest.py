"""The Canary fixtures: tiny NeMo ``EncDecMultiTaskModel`` archives of both prompt formats, built
once per session by NeMo's own classes (``nemo_reference``) and read through oasr's loader."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

DATA = Path(__file__).resolve().parents[3] / "data" / "audio"


@pytest.fixture(scope="session")
def canary(tmp_path_factory):
    """format -> (.nemo path, NeMo model in float64, oasr LoadedModel in float64)."""
    pytest.importorskip(
        "nemo.collections.asr", reason="nemo-toolkit is not installed (the reference of the Canary parity tests)"
    )
    from oasr.models.loaders import load_pretrained
    from tests.models.canary import nemo_reference

    root = tmp_path_factory.mktemp("canary")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fmt in nemo_reference.FORMATS:
            path, model = nemo_reference.build(fmt, root)
            out[fmt] = (path, model.double().eval().requires_grad_(False), load_pretrained(path, dtype=torch.float64))
    return out


@pytest.fixture(scope="session")
def canary_float32(canary):
    """format -> (.nemo path, a NeMo model in float32 restored from the archive, as users run it, and
    the archive's own ``decoding`` section)."""
    from nemo.collections.asr.models import EncDecMultiTaskModel
    from omegaconf import OmegaConf

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fmt, (path, _, _) in canary.items():
            model = EncDecMultiTaskModel.restore_from(str(path), map_location="cpu").eval()
            out[fmt] = (path, model, OmegaConf.to_container(model.cfg.decoding))
    return out
