"""``oasr transcribe --ray`` (Ray Data, ``oasr.serving.ray_batch``) over shared clips on the local
Ray of ``conftest.py``: the same files as ``oasr transcribe -o DIR -f json`` writes, a corrupt
file recorded as an error while the others finish, a rerun that skips the finished inputs,
and a JSONL manifest with paths relative to it."""

from __future__ import annotations

import json
import os

import pytest

from oasr.cli.main import main

from .conftest import MODEL, needs_base

pytestmark = [
    pytest.mark.real_weights,
    pytest.mark.slow,
    needs_base,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),  # Ray Data's own renamed settings
]

CLIPS = [
    "jfk.wav",
    "sense_and_sensibility_01_austen_64kb-0870.wav",
    "roots_06_morris_0244.wav",
    "bambatse_06_haggard_0090.wav",
    "nada_lily_30_haggard_0086.wav",
]
COMMON = ["--model", MODEL, "--threads", "1", "--no-progress", "-l", "en"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, audio_dir):
    """The clips and a corrupt ``broken.wav``, in a directory of their own."""
    d = tmp_path_factory.mktemp("in")
    for name in CLIPS:
        (d / name).symlink_to(audio_dir / name)
    (d / "broken.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt " + os.urandom(200))
    return d


@pytest.fixture(scope="module")
def cli_outputs(tmp_path_factory, inputs):
    """What plain ``oasr transcribe -o DIR -f json`` writes for the clips."""
    out = tmp_path_factory.mktemp("cli")
    assert main(["transcribe", *(str(inputs / n) for n in CLIPS), "-o", str(out), "-f", "json", *COMMON]) == 0
    return out


def _ray_transcribe(files, out, *extra) -> int:
    args = ["transcribe", "--ray", *map(str, files), "-o", str(out), "-f", "json", *COMMON]
    return main([*args, "--actors", "2", "--num-cpus-per-actor", "0.5", *extra])


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_ray_batch_writes_what_the_cli_writes_and_resumes(ray_cluster, inputs, cli_outputs, tmp_path, capsys):
    out = tmp_path / "ray"
    files = [inputs / n for n in CLIPS] + [inputs / "broken.wav"]
    assert _ray_transcribe(files, out) == 1  # one input failed, the others finished
    err = capsys.readouterr().err
    assert f"oasr transcribe: {inputs / 'broken.wav'}:" in err and "1 failed" in err, err
    for name in CLIPS:
        stem = name.rsplit(".", 1)[0]
        assert (out / f"{stem}.json").read_bytes() == (cli_outputs / f"{stem}.json").read_bytes(), name
    assert not (out / "broken.json").exists()
    records = {r["audio"]: r for r in _lines(out / "results.jsonl")}
    assert len(records) == len(files)
    broken = records[str(inputs / "broken.wav")]
    assert broken["status"] == "error" and broken["error"] and broken["outputs"] == {}
    ok = [r for r in records.values() if r["status"] == "ok"]
    assert len(ok) == len(CLIPS) and all(r["language"] == "en" and r["outputs"]["json"] for r in ok)
    assert {r["worker"] for r in records.values()} and all(r["duration_s"] > 0 for r in ok)
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(out / "results.parquet").to_pylist()
    assert sorted(r["audio"] for r in table) == sorted(records)

    # A rerun: the finished inputs are skipped (their files untouched), the failed one is tried again.
    stamps = {p.name: p.stat().st_mtime_ns for p in out.glob("*.json")}
    assert _ray_transcribe(files, out) == 1
    err = capsys.readouterr().err
    assert f"{len(files)} inputs: 0 transcribed, {len(CLIPS)} already done (skipped), 1 failed" in err, err
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.json")} == stamps
    again = _lines(out / "results.jsonl")[len(files) :]
    assert [r["audio"] for r in again] == [str(inputs / "broken.wav")]


def test_a_manifest_relative_to_its_directory(ray_cluster, inputs, cli_outputs, tmp_path):
    from oasr.serving.ray_batch import transcribe_dataset

    root = tmp_path / "corpus"
    (root / "clips").mkdir(parents=True)
    for name in CLIPS[2:4]:
        (root / "clips" / name).symlink_to(inputs / name)
    rows = [{"audio": f"clips/{name}", "text": "reference"} for name in CLIPS[2:4]]
    (root / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    summary = transcribe_dataset(
        [root / "manifest.jsonl"],
        out,
        model=MODEL,
        formats=("json", "srt"),
        engine_options={"num_threads": 1},
        decode_options={"language": "en"},
        num_actors=1,
        num_cpus=0.5,
        progress=False,
    )
    assert (summary.total, summary.done, summary.skipped, summary.failed) == (2, 2, 0, [])
    for name in CLIPS[2:4]:
        stem = name.rsplit(".", 1)[0]
        assert (out / f"{stem}.json").read_bytes() == (cli_outputs / f"{stem}.json").read_bytes()
        assert (out / f"{stem}.srt").read_text().startswith("1\n00:00:00,000 --> ")
