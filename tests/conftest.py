"""Shared test fixtures: where the real speech and reference fixtures live, and
which optional real-weight packages are installed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = Path(os.environ.get("OASR_SHARED_DIR", REPO_ROOT.parent / "shared"))
AUDIO_DIR = SHARED_DIR / "data" / "audio"
FIXTURES_DIR = SHARED_DIR / "fixtures"


def load_manifest() -> list[dict]:
    """Rows of ``../shared/data/audio/manifest.jsonl`` with ``path`` resolved."""
    rows = []
    with open(AUDIO_DIR / "manifest.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                row["path"] = str(AUDIO_DIR / row["audio"])
                rows.append(row)
    return rows


@pytest.fixture(scope="session")
def audio_dir() -> Path:
    if not (AUDIO_DIR / "manifest.jsonl").exists():
        pytest.skip(f"shared audio not found at {AUDIO_DIR} (set OASR_SHARED_DIR)")
    return AUDIO_DIR


@pytest.fixture(scope="session")
def manifest(audio_dir) -> list[dict]:
    return load_manifest()
