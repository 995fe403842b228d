"""An MMS checkpoint's ``language`` through every surface: the Python engine, ``oasr transcribe
-l`` and the server's ``language`` form field switch the adapter and vocabulary alike, and a
language the checkpoint has no adapter for is refused (CLI exit 2, HTTP 400 ``invalid_language``)
naming the adapters it has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.server.conftest import wav_bytes

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

LISTING = "deu (German), eng (English), fra (French)"


@pytest.fixture(scope="module")
def clip(tmp_path_factory, clips) -> Path:
    path = tmp_path_factory.mktemp("mms_clip") / "clip.wav"
    path.write_bytes(wav_bytes(clips[0]))
    return path


@pytest.fixture(scope="module")
def python_texts(mms_dir, clip) -> dict[str, str]:
    """The Python engine's text of the clip in each language (and with none)."""
    import oasr

    engine = oasr.ASREngine(str(mms_dir), device="cpu")
    texts = {lang: engine.transcribe(str(clip), language=lang).text for lang in ("fra", "deu")}
    texts[None] = engine.transcribe(str(clip)).text
    assert len(set(texts.values())) == 3  # the languages' heads and vocabularies differ
    return texts


def _cli(mms_dir: Path, clip: Path, capsys, *flags: str) -> tuple[int, str, str]:
    from oasr.cli.main import main

    capsys.readouterr()
    try:
        code = main(
            ["transcribe", str(clip), "--model", str(mms_dir), "--device", "cpu", *flags, "-f", "json", "--no-progress"]
        )
    except SystemExit as e:  # argparse's usage error
        code = int(e.code)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_language_switches_the_adapter(mms_dir, clip, python_texts, capsys):
    code, out, err = _cli(mms_dir, clip, capsys, "-l", "French")
    assert code == 0, err
    assert json.loads(out)["language"] == "fra" and json.loads(out)["text"] == python_texts["fra"]
    code, out, err = _cli(mms_dir, clip, capsys)
    assert code == 0 and json.loads(out)["text"] == python_texts[None], err
    code, _, err = _cli(mms_dir, clip, capsys, "-l", "es")
    assert code == 2 and "language 'es'" in err and LISTING in err, err


def test_server_language_field_switches_the_adapter(mms_dir, clip, python_texts):
    from fastapi.testclient import TestClient

    from oasr.cli.main import build_parser
    from oasr.cli.serve import settings_from_args
    from oasr.server.app import build_engine, create_app

    settings = settings_from_args(build_parser().parse_args(["serve", "--model", str(mms_dir), "--device", "cpu"]))
    engine = build_engine(settings)

    def post(client, **fields):
        files = {"file": (clip.name, clip.read_bytes(), "audio/wav")}
        return client.post("/v1/audio/transcriptions", data={"model": settings.model_names[0], **fields}, files=files)

    try:
        with TestClient(create_app(settings, engine)) as client:
            r = post(client, language="de-DE", response_format="json")
            assert r.status_code == 200 and r.json()["text"] == python_texts["deu"], r.text
            assert post(client).json()["text"] == python_texts[None]
            r = post(client, language="es")
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["code"] == "invalid_language" and LISTING in error["message"], error
            assert post(client, language="fra").status_code == 200  # it keeps serving
    finally:
        engine.shutdown()
