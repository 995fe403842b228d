"""Fixtures of the speaker-surface tests: the tone diarizer (``tone.py``) registered as a
diarization package, its model directory, tone recordings of known speakers, and the tiny
firing Paraformer of the server tests (an ASR model with timed words, random text)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tests.diarization import tone

A_HZ, B_HZ = 300.0, 1200.0  # two "voices": the bands [100, 600) and [600, 2000) Hz
EDGES = [100.0, 600.0, 2000.0]
# A, B, A: the truth of ``two_speakers``
SPANS = [(0.3, 2.0, A_HZ), (2.2, 4.0, B_HZ), (4.2, 5.0, A_HZ)]


@pytest.fixture(scope="session")
def tone_package():
    """``tone`` in the loader's table for the session (removed after)."""
    from oasr.diarization.loader import PACKAGES, register_diarizer

    register_diarizer("tone", "tests.diarization.tone", "a tone diarizer test double (tone_diarizer.json)")
    yield "tone"
    PACKAGES.pop("tone", None)


@pytest.fixture(scope="session")
def tone_dir(tone_package, tmp_path_factory) -> Path:
    return tone.write(tmp_path_factory.mktemp("tone") / "model", EDGES)


@pytest.fixture(scope="session")
def two_speakers():
    return tone.tones(SPANS, 5.5)


@pytest.fixture(scope="session")
def paraformer_dir(tmp_path_factory) -> Path:
    from tests.models.paraformer.conftest import write_firing_paraformer_dir

    return write_firing_paraformer_dir(tmp_path_factory.mktemp("paraformer") / "model", seed=3)


def serve_app(*argv: str):
    """``oasr serve ARGV``'s app in-process, behind starlette's ``TestClient`` (an httpx client)."""
    from starlette.testclient import TestClient

    from oasr.cli import serve
    from oasr.server.app import create_app

    parser = argparse.ArgumentParser()
    serve.register(parser.add_subparsers())
    return TestClient(create_app(serve.settings_from_args(parser.parse_args(["serve", *argv]))))
