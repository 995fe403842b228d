"""Canary through oasr's surfaces, held to NeMo's ``transcribe()`` on the same archive in float32:
``ASREngine("x.nemo")`` with the archive's decoding defaults and with a beam and length penalty,
speech translation (``task="translate"`` with a ``target_language``), ``oasr transcribe --model
x.nemo`` and the HTTP transcriptions and translations routes (equal to the engine)."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from tests.models.canary.conftest import DATA

CLIPS = ("jfk.wav", "speechbrain_spk1_snt1.wav")


def _nemo(ref, decoding: dict, **prompt) -> list[list[int]]:
    ref.change_decoding_strategy(OmegaConf.create(decoding))
    hyps = ref.transcribe([str(DATA / c) for c in CLIPS], batch_size=1, return_hypotheses=True, verbose=False, **prompt)
    return [h.y_sequence.tolist() for h in hyps]


@pytest.fixture(scope="module")
def engine(canary_float32):
    import oasr

    path, _, _ = canary_float32["canary"]
    eng = oasr.ASREngine(str(path))
    return eng


def _tokens(out) -> list[int]:
    return [t for s in out.segments for t in s.tokens]


def test_engine_defaults_and_beam_equal_nemo_transcribe(canary_float32, engine):
    _, ref, archive = canary_float32["canary"]
    want = _nemo(ref, archive, source_lang="en", target_lang="en", pnc="yes")
    assert [_tokens(engine.transcribe(str(DATA / c))) for c in CLIPS] == want
    beam = {"strategy": "beam", "beam": {"beam_size": 2, "length_penalty": 1.0, "max_generation_delta": 50}}
    want = _nemo(ref, beam, source_lang="en", target_lang="en", pnc="yes")
    got = [_tokens(engine.transcribe(str(DATA / c), beam_size=2, length_penalty=1.0)) for c in CLIPS]
    assert got == want
    # Batched (one padded encode, one search over the rows): each clip as alone.
    batched = engine.transcribe([str(DATA / c) for c in CLIPS], beam_size=2, length_penalty=1.0)
    assert [_tokens(o) for o in batched] == want


def test_translation_and_punctuation_build_nemos_prompt(canary_float32, engine):
    _, ref, archive = canary_float32["canary"]
    # NeMo's transcribe() of audio paths reads the task from ``taskname`` (``task`` is not read there).
    want = _nemo(ref, archive, source_lang="en", target_lang="de", taskname="ast", pnc="no")
    outs = [engine.transcribe(str(DATA / c), task="translate", target_language="de", punctuation=False) for c in CLIPS]
    assert [_tokens(o) for o in outs] == want
    assert {(o.task, o.language) for o in outs} == {("translate", "de")}
    # English speech "translated" into English (OpenAI's translations) is its transcript.
    assert _tokens(engine.transcribe(str(DATA / CLIPS[0]), task="translate")) == _tokens(
        engine.transcribe(str(DATA / CLIPS[0]))
    )
    with pytest.raises(ValueError, match="fr"):
        engine.transcribe(str(DATA / CLIPS[0]), target_language="fr")


def test_cli_and_http_equal_the_engine(canary_float32, engine, capsys):
    from fastapi.testclient import TestClient

    from oasr.cli.main import build_parser, main
    from oasr.cli.serve import settings_from_args
    from oasr.server.app import build_engine, create_app

    path, _, _ = canary_float32["canary"]
    clip = DATA / CLIPS[1]
    text = engine.transcribe(str(clip)).text
    translated = engine.transcribe(str(clip), task="translate", target_language="de").text
    assert text and translated
    capsys.readouterr()
    code = main(["transcribe", str(clip), "--model", str(path), "-f", "verbose_json", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(out)["text"] == text
    code = main(["transcribe", str(clip), "--model", str(path), "--target-language", "de", "--no-progress"])
    assert code == 0 and capsys.readouterr().out.strip() == translated

    settings = settings_from_args(build_parser().parse_args(["serve", "--model", str(path), "--device", "cpu"]))
    server_engine = build_engine(settings)
    try:
        with TestClient(create_app(settings, server_engine)) as client:
            files = {"file": (clip.name, clip.read_bytes(), "audio/wav")}
            form = {"model": settings.model_names[0]}
            r = client.post("/v1/audio/transcriptions", data=form, files=files)
            assert r.status_code == 200, r.text
            assert r.json()["text"] == text
            r = client.post("/v1/audio/translations", data={**form, "target_language": "de"}, files=files)
            assert r.status_code == 200, r.text
            assert r.json()["text"] == translated
            r = client.post("/v1/audio/translations", data=form, files=files)
            assert r.status_code == 200, r.text
            assert r.json()["text"] == text  # English speech into English
            r = client.post("/v1/audio/transcriptions", data={**form, "target_language": "xx"}, files=files)
            assert r.status_code == 400 and "target_language" in r.text
    finally:
        server_engine.shutdown()


def test_canary2_word_timestamps_equal_nemo_transcribe(canary_float32):
    import oasr

    path, ref, archive = canary_float32["canary2"]
    ref.change_decoding_strategy(OmegaConf.create(archive))
    hyps = ref.transcribe(
        [str(DATA / c) for c in CLIPS], batch_size=1, timestamps=True, return_hypotheses=True, verbose=False
    )
    engine = oasr.ASREngine(str(path))
    for clip, hyp in zip(CLIPS, hyps):
        out = engine.transcribe(str(DATA / clip), word_timestamps=True)
        assert _tokens(out) == hyp.y_sequence.tolist()
        assert out.text == hyp.text
        words = [(w.word.strip(), w.start, w.end) for s in out.segments for w in s.words or []]
        assert words == [(w["word"], round(w["start"], 3), round(w["end"], 3)) for w in hyp.timestamp["word"]]
        assert words and all(0.0 < w.probability <= 1.0 for s in out.segments for w in s.words)
    with pytest.raises(ValueError, match="word_timestamps"):  # canary (v1) writes no frame tokens
        oasr.ASREngine(str(canary_float32["canary"][0])).transcribe(str(DATA / CLIPS[0]), word_timestamps=True)
