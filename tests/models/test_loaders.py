"""Resolving model arguments: local paths, bundled names, Hub ids (cache only here)."""

from __future__ import annotations

import re
import shutil

import pytest
import torch

from oasr.models import bundled, loaders
from oasr.models.loaders import ModelNotFoundError, resolve_model_path
from oasr.models.whisper.config import WHISPER_SIZES
from oasr.models.whisper.model import WhisperModel
from tests.conftest import checkout_hint

# Parameter counts (millions) of the releases as their Hugging Face model cards state them
# (OpenAI's rounder figures also count the sinusoidal encoder positions).
PUBLISHED_PARAMS_M = {
    "tiny": 37.8,
    "base": 72.6,
    "small": 242,
    "medium": 764,
    "large-v2": 1543,
    "large-v3": 1543,
    "large-v3-turbo": 809,
}


@pytest.mark.parametrize("size", sorted(PUBLISHED_PARAMS_M))
def test_every_published_size_builds_from_config(size):
    with torch.device("meta"):
        model = WhisperModel(WHISPER_SIZES[size])
    n = sum(p.numel() for p in model.parameters()) / 1e6
    assert abs(n - PUBLISHED_PARAMS_M[size]) / PUBLISHED_PARAMS_M[size] < 0.005, n


def test_missing_default_model_says_how_to_get_one(monkeypatch):
    monkeypatch.setattr(loaders, "bundled_path", lambda name: None)
    with pytest.raises(ModelNotFoundError, match=re.escape(checkout_hint("whisper-base"))):
        resolve_model_path(None)
    with pytest.raises(ModelNotFoundError, match="not installed"):
        resolve_model_path("tiny.en")


def test_unknown_name_is_explained():
    with pytest.raises(ModelNotFoundError, match="not a local path, a bundled model name"):
        resolve_model_path("no such model!")


def test_bundled_names_resolve_when_installed():
    path = bundled.bundled_path("whisper-base")
    if path is None:
        pytest.skip("whisper-base not installed")
    assert resolve_model_path(None) == path == resolve_model_path("base")
    assert (path / "tokenizer.json").is_file()


def test_hub_id_from_the_local_cache(tmp_path, monkeypatch):
    """A Hub id resolves through huggingface_hub's cache when the network is unavailable."""
    src = bundled.bundled_path("whisper-tiny.en")
    if src is None:
        pytest.skip("tiny.en not installed")
    cache = tmp_path / "hub"
    snap = cache / "models--someorg--whisper-tiny.en" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    for f in ("config.json", "tokenizer.json", "model.bin"):
        shutil.copy(src / f, snap / f)
    (cache / "models--someorg--whisper-tiny.en" / "refs").mkdir()
    (cache / "models--someorg--whisper-tiny.en" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    assert resolve_model_path("someorg/whisper-tiny.en") == snap
    with pytest.raises(ModelNotFoundError, match="neither a local directory nor in the Hugging Face cache"):
        resolve_model_path("someorg/not-cached")
