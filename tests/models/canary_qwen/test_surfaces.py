"""Canary-Qwen through each surface with no decoding option: ``oasr.ASREngine(dir)``, ``oasr
transcribe --model dir`` and ``POST /v1/audio/transcriptions`` give the same text, which is
``SALM.generate``'s greedy answer over oasr's default token budget (SALM's own default, transformers'
``max_length=20`` counting the prompt, transcribes nothing: oasr deviates, ``engine/decode/llm.py``).
A ``context`` (OpenAI's ``prompt``) is refused: the model's prompt has no system turn."""

from __future__ import annotations

import pytest

from oasr.audio import load_audio
from oasr.engine.decode.llm import default_token_budget
from tests.models.canary_qwen.reference import salm_greedy

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

CLIP = "bambatse_15_haggard_0247.wav"  # 0.5 s: a budget of 77 tokens


@pytest.fixture(scope="module")
def engine(salm):
    import oasr

    return oasr.ASREngine(str(salm.path), device="cpu")


def _salm_text(ref, wave) -> str:
    tokens = salm_greedy(ref, wave, default_token_budget(len(wave) / 16000))
    return ref.tokenizer.ids_to_text(tokens).strip()


def test_python_cli_and_http_decode_alike_and_as_salm(salm, engine, audio_dir, capsys):
    from tests.surfaces.test_default_decoding import _cli_text, _http_text

    clip = audio_dir / CLIP
    python = engine.transcribe(str(clip)).text
    assert python == _salm_text(salm.model, load_audio(str(clip)))
    assert python  # the random model writes something: the comparison is not vacuous
    assert _cli_text(salm.path, [], clip, capsys, None) == python
    assert _http_text(salm.path, [], clip, None) == python


def test_context_is_refused_naming_the_missing_system_turn(engine, audio_dir):
    with pytest.raises(ValueError, match="no system turn"):
        engine.transcribe(str(audio_dir / CLIP), context="Dashwood")


def test_http_prompt_is_a_400(salm, audio_dir):
    from fastapi.testclient import TestClient

    from oasr.cli.main import build_parser
    from oasr.cli.serve import settings_from_args
    from oasr.server.app import build_engine, create_app

    settings = settings_from_args(build_parser().parse_args(["serve", "--model", str(salm.path), "--device", "cpu"]))
    served = build_engine(settings)
    clip = audio_dir / CLIP
    try:
        with TestClient(create_app(settings, served)) as client:
            files = {"file": (clip.name, clip.read_bytes(), "audio/wav")}
            form = {"model": settings.model_names[0], "prompt": "Dashwood"}
            r = client.post("/v1/audio/transcriptions", data=form, files=files)
    finally:
        served.shutdown()
    assert r.status_code == 400, r.text
    assert "no system turn" in r.text


def test_language_is_english_only(engine, audio_dir):
    """The release transcribes English; its prompt names no language, so a forced ``en`` decodes
    as none does, and another language is refused naming the one it has."""
    clip = str(audio_dir / CLIP)
    plain = engine.transcribe(clip, max_new_tokens=4)
    assert plain.language == "en"
    assert engine.transcribe(clip, language="English", max_new_tokens=4).text == plain.text
    with pytest.raises(ValueError, match="en"):
        engine.transcribe(clip, language="de")
