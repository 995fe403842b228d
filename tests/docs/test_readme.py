"""The README's first Python example runs as written (real whisper-base and tiny.en weights, real
clips from the shared audio), and the later examples name their placeholders as placeholders."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from oasr.models.bundled import bundled_path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)

pytestmark = [pytest.mark.real_weights, pytest.mark.slow]


def test_the_first_python_example_runs(audio_dir):
    for name in ("whisper-base", "tiny.en"):
        if bundled_path(name) is None:
            pytest.skip(f"{name} is not installed")
    pytest.importorskip("silero_vad")
    if audio_dir.resolve() != (REPO.parent / "shared" / "data" / "audio").resolve():
        pytest.skip("the README's paths are relative to a checkout beside ../shared")
    run = subprocess.run([sys.executable, "-c", BLOCKS[0]], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ask not what your country can do for you" in run.stdout.lower()


def test_later_examples_say_which_paths_are_placeholders():
    placeholders = {"exp/u2pp_conformer", "Qwen3-ASR-0.6B/", "speech.wav", "call.wav"}
    used = {p for p in placeholders if any(p in block for block in BLOCKS[1:])}
    assert used, "the later examples changed: update this test"
    assert all(f"`{p}`" in README for p in used)
