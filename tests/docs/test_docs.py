"""Every code block of the README and docs/ that claims to run runs, from the repository root, as written.

A fenced ``bash`` / ``python`` block runs unless the line before it is ``<!-- no-run: reason -->``.
A bash block that starts ``oasr serve`` is started as a server (on a free port, in place of the one
it names) and the python blocks after it in the same file run against it. The README's command 1
sets up a virtual environment, so only its last command runs here; command 2 is ``.ci/run``'s line.
"""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from oasr.models.bundled import bundled_path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"(?:<!-- no-run: (?P<reason>[^\n]*?) -->\n)?```(?P<lang>bash|python|sh)\n(?P<code>.*?)```", re.S)
JFK = "ask not what your country can do for you"
# Run `oasr` as this checkout's module (the console script may belong to another install).
OASR = f'oasr() {{ {shlex.quote(sys.executable)} -m oasr.cli.main "$@"; }}\n'

pytestmark = [pytest.mark.real_weights, pytest.mark.slow]


def _blocks(path: Path) -> list[dict]:
    return [m.groupdict() for m in FENCE.finditer(path.read_text(encoding="utf-8"))]


def _needs_whisper_base() -> None:
    if bundled_path("whisper-base") is None:
        pytest.skip("whisper-base is not installed (pip install -e '.[whisper-base]')")


def _run(lang: str, code: str, timeout: float = 600) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", code] if lang == "python" else ["bash", "-c", "set -euo pipefail\n" + OASR + code]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_block_runs_or_says_why_not():
    for path in DOCS:
        for block in _blocks(path):
            assert block["reason"] is None or block["reason"].strip(), f"{path.name}: a no-run mark without a reason"
    assert not any("../shared" in p.read_text(encoding="utf-8") for p in DOCS), "a README or docs line names ../shared"


def test_every_relative_link_names_a_file_of_the_repository():
    for path in DOCS:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            assert (path.parent / target).exists(), f"{path.name} links to {target}, which does not exist"


def test_command_2_is_what_ci_runs_and_command_1_transcribes_the_repositorys_clip():
    _needs_whisper_base()
    setup = _blocks(REPO / "README.md")[0]["code"]
    commands = [line for line in setup.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    assert commands[1] in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    last = commands[0].split(" && ")[-1]
    assert last.startswith("oasr transcribe ")
    run = _run("bash", last)
    assert run.returncode == 0, run.stderr[-3000:]
    assert JFK in run.stdout.lower()


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_the_blocks_that_claim_to_run_run(path, tmp_path):
    blocks = [b for b in _blocks(path) if b["reason"] is None]
    if not blocks:
        pytest.skip(f"{path.name} has no block that claims to run")
    _needs_whisper_base()
    server = None
    try:
        for block in blocks:
            code = block["code"]
            if code.lstrip().startswith("oasr serve"):
                server = _serve(code.strip())
                code = None
            elif server is not None:
                code = code.replace(":8000/", f":{server[1]}/")
            if code is None:
                continue
            run = _run(block["lang"], code)
            assert run.returncode == 0, f"{path.name}:\n{code}\n{run.stderr[-3000:]}"
            if "jfk" in code and "stream" not in code:
                assert JFK in run.stdout.lower(), run.stdout[-2000:]
    finally:
        if server is not None:
            server[0].terminate()
            server[0].wait(timeout=60)


def _serve(command: str) -> tuple[subprocess.Popen, int]:
    """Start the block's `oasr serve` on a free port; return it once /health answers ok."""
    port = _free_port()
    argv = shlex.split(command)[2:]
    argv = [a if a != "8000" else str(port) for a in argv]
    proc = subprocess.Popen(
        [sys.executable, "-m", "oasr.cli.main", "serve", *argv],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"oasr serve exited {proc.returncode}: {proc.stderr.read()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(1)
    proc.terminate()
    raise AssertionError("oasr serve did not become healthy in 300 s")
