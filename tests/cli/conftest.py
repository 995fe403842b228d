"""Fixtures of the command-line tests: short shared clips and one loaded whisper-base."""

from __future__ import annotations

from pathlib import Path

import pytest

import oasr
from oasr.cli import evaluate as evaluate_cmd
from oasr.cli import transcribe as transcribe_cmd
from oasr.cli.main import main
from oasr.models.bundled import bundled_path


@pytest.fixture(scope="session")
def clips(manifest) -> dict[str, dict]:
    """Short English clips by file stem, with their manifest rows (reference text, duration)."""
    rows = {Path(r["audio"]).stem: r for r in manifest}
    wanted = ("jfk", "speechbrain_spk1_snt1", "speechbrain_spk1_snt2", "speechbrain_spk1_snt3")
    missing = [w for w in wanted if w not in rows]
    if missing:
        pytest.skip(f"clips {missing} are not in the manifest")
    return {w: rows[w] for w in wanted}


@pytest.fixture(scope="session")
def engine():
    """One whisper-base engine for every CLI test (loading it is most of a short test's time)."""
    if bundled_path("whisper-base") is None:
        pytest.skip("whisper-base is not installed")
    return oasr.ASREngine("whisper-base", device="cpu")


@pytest.fixture
def cli(engine, monkeypatch, capsys):
    """``cli(*argv) -> (exit code, stdout, stderr)``, reusing one loaded whisper-base.

    Only the model load is shared; everything after it is the command's own path.
    """

    def load(args):
        assert args.model == "whisper-base"
        return engine

    monkeypatch.setattr(transcribe_cmd, "load_engine", load)
    monkeypatch.setattr(evaluate_cmd, "load_engine", load)

    def run(*argv: str):
        capsys.readouterr()
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
