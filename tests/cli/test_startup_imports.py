"""`oasr --help`, `oasr <command> --help` and `oasr models` start without importing torch.

Each check runs the CLI in a fresh interpreter (the test process has torch loaded already) and
looks at ``sys.modules`` after the command returned.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import contextlib, io, sys
from oasr.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = main({argv!r})
    except SystemExit as e:
        code = e.code
assert code == 0, (code, out.getvalue())
assert {expect!r} in out.getvalue(), out.getvalue()
heavy = sorted(m for m in ("torch", "numpy", "oasr.engine", "oasr.models.base") if m in sys.modules)
print("HEAVY=" + ",".join(heavy))
"""


def _heavy_modules(argv: list[str], expect: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE.format(argv=argv, expect=expect)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("HEAVY=")][-1]
    return [m for m in line[len("HEAVY=") :].split(",") if m]


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["--help"], "transcribe"),
        (["transcribe", "--help"], "--word-timestamps"),
        (["models"], "whisper"),
    ],
    ids=["help", "transcribe-help", "models"],
)
def test_cli_starts_without_torch(argv, expect):
    assert _heavy_modules(argv, expect) == []


def test_version_still_names_torch():
    proc = subprocess.run(
        [sys.executable, "-m", "oasr.cli.main", "--version"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("oasr ") and "torch 2." in proc.stdout


def test_lazy_package_attributes_resolve():
    import oasr
    import oasr.models

    assert callable(oasr.from_pretrained) and callable(oasr.load_pretrained)
    assert "whisper" in oasr.list_models()
    assert oasr.models.LoadError.__name__ == "LoadError"
    from oasr.models.whisper import WhisperConfig

    assert WhisperConfig.__name__ == "WhisperConfig"
    with pytest.raises(AttributeError, match="no_such_name"):
        oasr.no_such_name  # noqa: B018
    with pytest.raises(AttributeError, match="no_such_name"):
        oasr.models.no_such_name  # noqa: B018


def test_submodules_resolve_as_attributes_after_a_bare_import():
    code = (
        "import oasr; assert oasr.models.bundled.ALIASES; assert oasr.models.registry.list_models(); "
        "assert oasr.audio.load_audio"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
