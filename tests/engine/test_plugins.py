"""A family and a decode strategy from outside ``oasr/`` plug in through entry points only:
``tests/plugins/oasr_toy`` is installed as a distribution (a ``.dist-info`` with
``oasr.models`` and ``oasr.decode_strategies`` entry points on the path), and a directory
of its format is transcribed through ``ASREngine``, ``oasr transcribe`` and ``oasr serve``
with no edit to the engine. A broken strategy plugin warns and is skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from oasr.audio import load_audio
from oasr.engine.decode.registry import list_decode_strategies, reload_decode_strategies
from oasr.models.registry import reload_registry

REPO_ROOT = Path(__file__).resolve().parents[2]
CLIP = "jfk.wav"
THRESHOLD = 0.05


def _dist(root: Path, strategies_ref: str = "tests.plugins.oasr_toy:register_strategies") -> Path:
    info = root / "oasr_toy-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: oasr-toy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[oasr.models]\ntoy = tests.plugins.oasr_toy:register_models\n\n"
        f"[oasr.decode_strategies]\ntoy_energy = {strategies_ref}\n"
    )
    return root


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The toy distribution on the path of this process (and of the CLI / server it starts)."""
    site = _dist(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    reload_registry()
    reload_decode_strategies()
    yield site
    monkeypatch.undo()
    reload_registry()
    reload_decode_strategies()


@pytest.fixture
def toy_dir(tmp_path) -> Path:
    path = tmp_path / "toy_model"
    path.mkdir()
    (path / "toy.json").write_text(json.dumps({"threshold": THRESHOLD}))
    torch.save({"scale": torch.tensor(2.0)}, path / "toy.pt")
    return path


def _expected(path: Path) -> str:
    """The toy decode, computed here from the samples: one word per whole second."""
    audio = load_audio(str(path)).astype(np.float64)
    words = []
    for s in range(len(audio) // 16000):
        rms = np.sqrt(np.mean(audio[s * 16000 : (s + 1) * 16000] ** 2))
        words.append("loud" if rms * 2.0 > THRESHOLD else "quiet")
    return " ".join(words)


def test_engine_cli_and_server_decode_with_the_plugin(installed, toy_dir, audio_dir, tmp_path):
    import oasr

    assert "toy_energy" in list_decode_strategies() and "toy" in oasr.list_models()
    want = _expected(audio_dir / CLIP)
    assert "loud" in want and "quiet" in want, "the clip should have loud and quiet seconds"

    engine = oasr.ASREngine(str(toy_dir))
    assert str(engine.strategy.decode_type) == "toy_energy"
    assert engine.transcribe(str(audio_dir / CLIP)).text == want

    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "oasr.cli.main",
            "transcribe",
            str(audio_dir / CLIP),
            "--model",
            str(toy_dir),
            "-f",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["text"] == want

    pytest.importorskip("fastapi")
    from tests.server.conftest import ServerProcess

    server = ServerProcess(["--model", str(toy_dir), "--served-model-name", "toy"], tmp_path / "server.log")
    try:
        with open(audio_dir / CLIP, "rb") as f:
            answer = server.client().audio.transcriptions.create(model="toy", file=f)
        assert answer.text == want
    finally:
        server.stop()


def test_a_broken_strategy_plugin_warns_and_the_builtins_stay(tmp_path, monkeypatch):
    site = _dist(tmp_path / "broken", strategies_ref="tests.plugins.no_such_module:register")
    monkeypatch.syspath_prepend(str(site))
    try:
        with pytest.warns(RuntimeWarning, match="skipping decode-strategy plugin 'toy_energy'"):
            reload_decode_strategies()
        names = list_decode_strategies()
        assert "toy_energy" not in names and {"aed", "ctc", "transducer", "llm"} <= set(names)
    finally:
        monkeypatch.undo()
        reload_decode_strategies()
