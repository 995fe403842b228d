"""faster-whisper 1.2.1's own tests (its GitHub tag's tests/: the PyPI sdist has none) run against
oasr.compat.faster_whisper through the import shim in fw_shim/ ("tiny" -> bundled whisper-base).

The suite is found in ``$FASTER_WHISPER_TESTS`` or ``.ci/cache/faster-whisper-1.2.1/tests``
(.ci/run downloads it); without it the test skips, saying so. Hub-only tests (download_model)
are deselected: oasr has no hub access. Expected failures are the ones faster-whisper itself
has on whisper-base (its tests were written for tiny's transcripts).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oasr.models.bundled import bundled_path

ROOT = Path(__file__).resolve().parents[2]
SUITE = Path(os.environ.get("FASTER_WHISPER_TESTS", ROOT / ".ci/cache/faster-whisper-1.2.1/tests"))
HUB_ONLY = ["test_utils.py::test_download_model", "test_utils.py::test_download_model_in_cache"]


@pytest.mark.slow
@pytest.mark.skipif(not (SUITE / "test_transcribe.py").exists(), reason=f"faster-whisper's tests not found at {SUITE}")
@pytest.mark.skipif(bundled_path("whisper-base") is None, reason="whisper-base is not installed")
def test_faster_whisper_own_suite_imports_and_runs_on_the_drop_in():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent / "fw_shim"), str(ROOT)]))
    deselect = [a for t in HUB_ONLY for a in ("--deselect", t)]
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(SUITE / "test_utils.py"),
        str(SUITE / "test_tokenizer.py"),
        *deselect,
    ]
    out = subprocess.run(cmd, env=env, cwd=SUITE, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
