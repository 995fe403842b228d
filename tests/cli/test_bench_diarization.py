"""``oasr bench --peer reference``: a diarizer against its reference (transformers for nemotron3),
its report and table, and its refusals. The children run in this process (their subprocess
plumbing is ``tests/cli/test_bench.py``'s)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from oasr.cli import bench
from oasr.cli.main import main

CLIP = "speechbrain_spk1_snt3.wav"  # 2.7 s


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """The nemotron3 tests' tiny random checkpoint (transformers' ``save_pretrained``)."""
    pytest.importorskip("transformers.models.nemotron3_diarization")
    from tests.diarization.nemotron3.fixture import save_tiny

    return save_tiny(tmp_path_factory.mktemp("nemotron3_diarization"))


@pytest.fixture(scope="module")
def one_clip(audio_dir, tmp_path_factory):
    """A folder whose manifest holds one short 16-kHz clip of ``audio_dir``."""
    row = next(r for r in bench.read_manifest(audio_dir, "en") if r["audio"] == CLIP)
    folder = tmp_path_factory.mktemp("one_clip")
    (folder / "manifest.jsonl").write_text(json.dumps({**row, "audio": row["path"]}) + "\n", encoding="utf-8")
    return folder


def _in_process(monkeypatch) -> list[str]:
    """``run_child`` as ``child_main`` runs it, without the process; returns the systems run, in order."""
    systems = []

    def child(spec: dict, timeout_s: float) -> dict:
        systems.append(spec["system"])
        threads = torch.get_num_threads()  # the child sets its own: keep this process's
        try:
            return {**bench._diarization_child(json.loads(json.dumps(spec))), "peak_rss_mb": 1.0}
        finally:
            torch.set_num_threads(threads)

    monkeypatch.setattr(bench, "run_child", child)
    return systems


def test_nemotron3_against_transformers_same_turns(tiny_dir, one_clip, tmp_path, monkeypatch, capsys):
    pytest.importorskip("pyannote.metrics")
    systems = _in_process(monkeypatch)
    out = tmp_path / "bench.json"
    argv = ["bench", "-m", str(tiny_dir), "--peer", "reference", "--workload", "short", "--rounds", "2"]
    argv += ["--batch-size", "1", "--threads", "1", "--audio-dir", str(one_clip), "--json", str(out)]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert systems == ["oasr", "reference", "reference", "oasr"]  # A/B, then B/A
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["settings"]["diarizer"] == "nemotron3" and report["settings"]["reference"] == "transformers"
    mine, ref = report["results"]
    assert (mine["system"], ref["system"]) == ("oasr", "transformers")
    assert mine["vs_oasr"] is None and mine["agreement"] is None
    assert ref["stats"]["wall_s"]["median"] > 0 and ref["stats"]["cpu_s"]["median"] > 0
    assert ref["vs_oasr"]["wall_s"] == pytest.approx(
        mine["stats"]["wall_s"]["median"] / ref["stats"]["wall_s"]["median"]
    )
    assert ref["vs_oasr"]["cpu_s"] == pytest.approx(mine["stats"]["cpu_s"]["median"] / ref["stats"]["cpu_s"]["median"])
    # The same weights in float32 on both sides: the same turns, so a DER of 0 against them.
    assert ref["speakers"] == mine["speakers"] and ref["speakers"][0] > 0
    assert ref["agreement"] == {"der": 0.0, "same_turns": 1, "files": 1}
    assert mine["audio_s"] == pytest.approx(2.72, abs=0.01)
    assert "| 1 | short | 2.7 | 1 | transformers |" in captured.out and "| 0.00% | 1/1 |" in captured.out
    assert "oasr's nemotron3 diarizer) against transformers" in captured.out


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--peer", "reference", "transformers"], "a diarizer's own reference, alone"),
        (["--peer", "reference", "--beam-size", "2", "--vad"], "drop --beam-size --vad"),
    ],
)
def test_reference_peer_refuses_what_it_does_not_compare(extra, said, tiny_dir, capsys):
    assert main(["bench", "-m", str(tiny_dir), *extra]) == 2
    assert said in capsys.readouterr().err


def test_reference_peer_needs_a_diarizer(tmp_path, capsys):
    assert main(["bench", "-m", str(tmp_path), "--peer", "reference"]) == 2
    err = capsys.readouterr().err
    assert "is not a diarizer oasr.load_diarizer reads" in err and "nemotron3:" in err


def test_missing_reference_names_its_package(tiny_dir, monkeypatch, capsys):
    from oasr.diarization import references

    gone = dataclasses.replace(references.REFERENCES["nemotron3"], module="transformers.no_such_model")
    monkeypatch.setitem(references.REFERENCES, "nemotron3", gone)
    assert main(["bench", "-m", str(tiny_dir), "--peer", "reference"]) == 2
    err = capsys.readouterr().err
    assert "reference is transformers, which needs transformers.no_such_model: pip install torch==" in err
