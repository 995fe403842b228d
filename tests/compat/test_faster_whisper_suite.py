"""faster-whisper 1.2.1's own tests run against oasr.compat.faster_whisper, and against faster-whisper
itself on the same weights: each test passes or fails on both alike.

The suite is faster-whisper's GitHub tag's tests/ (the PyPI sdist ships none), found in
``$FASTER_WHISPER_TESTS`` or ``.ci/cache/faster-whisper-1.2.1/tests`` (.ci/run downloads it);
without it the test skips, saying so. Import shims: ``fw_shim/`` maps ``faster_whisper`` to
the drop-in and its Hub size "tiny" to the bundled whisper-base; ``fw_reference_shim/`` gives
the real faster-whisper the same weights (CTranslate2 files joined from the bundled package).
The Hub-only tests (``download_model``) are deselected: oasr has no hub access.
Some tests fail on both: they were written for tiny's transcripts (whisper-base writes
"Americans," where tiny writes "Americans"), which is why the comparison is with the reference.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oasr.models.bundled import bundled_path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SUITE = Path(os.environ.get("FASTER_WHISPER_TESTS", ROOT / ".ci/cache/faster-whisper-1.2.1/tests"))
HUB_ONLY = ["test_utils.py::test_download_model", "test_utils.py::test_download_model_in_cache"]


def _ct2_dir(name: str, dst: Path) -> Path:
    """The bundled checkpoint as one CTranslate2 directory (its split model.bin joined)."""
    from oasr.models.formats.ctranslate2 import find_model_parts

    src = bundled_path(name)
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if not f.name.startswith("model.bin"):
            shutil.copy(f, dst / f.name)
    with open(dst / "model.bin", "wb") as out:
        for part in find_model_parts(src):
            out.write(part.read_bytes())
    return dst


def _outcomes(shim: Path, env_extra: dict[str, str]) -> dict[str, str]:
    """Run the suite with ``shim`` first on the path: {test id: PASSED / FAILED / ERROR / SKIPPED}."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim), str(ROOT)]), **env_extra)
    deselect = [a for t in HUB_ONLY for a in ("--deselect", t)]
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", ".", *deselect]
    out = subprocess.run(cmd, env=env, cwd=SUITE, capture_output=True, text=True, timeout=2400)
    outcomes = {m.group(2): m.group(1) for m in re.finditer(r"^(PASSED|FAILED|ERROR) (\S+)", out.stdout, re.M)}
    assert outcomes, out.stdout[-3000:] + out.stderr[-2000:]
    return outcomes


@pytest.mark.slow
@pytest.mark.skipif(not (SUITE / "test_transcribe.py").exists(), reason=f"faster-whisper's tests not found at {SUITE}")
@pytest.mark.skipif(
    bundled_path("whisper-base") is None or bundled_path("whisper-tiny.en") is None,
    reason="the bundled whisper-base and tiny.en weights are not installed",
)
def test_faster_whisper_own_suite_passes_and_fails_where_faster_whisper_does(tmp_path):
    pytest.importorskip("faster_whisper", reason="faster-whisper (the reference) is not installed")
    models = (
        f"tiny={_ct2_dir('whisper-base', tmp_path / 'base')},tiny.en={_ct2_dir('whisper-tiny.en', tmp_path / 'en')}"
    )
    reference = _outcomes(HERE / "fw_reference_shim", {"OASR_FW_MODELS": models})
    ours = _outcomes(HERE / "fw_shim", {})
    assert sum(v == "PASSED" for v in reference.values()) >= 10, reference
    assert ours == reference
