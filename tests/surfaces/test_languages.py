"""One language resolution for every family and surface (issue 26, item 4).

The same table of ``language`` inputs (ISO 639-1 and 639-2/3 codes, English names in odd
case, locales with ``-`` and ``_``, "auto" / "none" / "", an unknown word, languages a model
lacks) goes to every family's tiny checkpoint through Python (``make_options``), HTTP (400
``invalid_language`` with ``param="language"``), the CLI (exit 2) and the WebSocket, and
``oasr serve --language`` is the default of requests that send none. Each family's expected
column is what its reference has: Whisper's language tokens (99 codes; ``en`` alone for an
English-only model), the Nemotron prompt table of ``processor_config.json`` (locales where it
has them), Qwen3-ASR's 30 names and Qwen2-Audio's 8 tags (transformers' processors), Granite Speech's
five (its model card), ``en``
for the English CTC checkpoints (Parakeet, LASR, Granite Speech 5), and nothing for the checkpoints that name no
language (WeNet, Paraformer, icefall), which take only "no language"; SenseVoice's six language
queries (funasr's ``lid_dict``).
"""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest

from oasr.languages import LanguageError
from tests.surfaces.test_default_decoding import FAMILIES

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

INPUTS = ("de", "deu", "gErMaN", "de_DE", "de-AT", "en", "eng", "ENGLISH", "en-US", "en_gb")
INPUTS += ("pt-BR", "fil", "cy", "auto", "none", "", "klingon")

LACKS, UNKNOWN, NONE = "!lacks", "!unknown", "!none"  # the refusals: a language it lacks, no language, none named
DETECT = ("auto", "none", "")
_EN = dict.fromkeys(("en", "eng", "ENGLISH", "en-US", "en_gb"), "en")
_DE = dict.fromkeys(("de", "deu", "gErMaN", "de_DE", "de-AT"), "de")


def _column(**values: str | None) -> dict[str, str | None]:
    table = {**dict.fromkeys(DETECT), "klingon": UNKNOWN, **values}
    assert set(table) == set(INPUTS), set(INPUTS) ^ set(table)
    return table


_ENGLISH_ONLY = _column(**_EN, **dict.fromkeys(_DE, LACKS), **{"pt-BR": LACKS, "fil": LACKS, "cy": LACKS})
_NO_LANGUAGE = _column(**dict.fromkeys((*_EN, *_DE, "pt-BR", "fil", "cy"), NONE))

# family -> (input -> resolved language, or the refusal), and a piece of the refusal that lists
# the model's languages.
EXPECTED: dict[str, tuple[dict[str, str | None], str]] = {
    "whisper": (_column(**_EN, **_DE, **{"pt-BR": "pt", "fil": LACKS, "cy": "cy"}), "cy, sk, te"),
    # English-only: no detection, "en" is its only language (and never in the prompt).
    "whisper-en": ({**_ENGLISH_ONLY, **dict.fromkeys(DETECT, "en")}, "has: en (English)"),
    "nemotron": (
        _column(
            **{"en": "en", "eng": "en", "ENGLISH": "en", "en-US": "en-US", "en_gb": "en-GB"},
            **{"de": "de", "deu": "de", "gErMaN": "de", "de_DE": "de-DE", "de-AT": "de"},
            **{"pt-BR": "pt-BR", "fil": LACKS, "cy": LACKS},
        ),
        "en-GB (English)",
    ),
    "qwen3-asr": (_column(**_EN, **_DE, **{"pt-BR": "pt", "fil": "fil", "cy": LACKS}), "fil (Filipino)"),
    "qwen2-audio": (_column(**_EN, **_DE, **{"pt-BR": LACKS, "fil": LACKS, "cy": LACKS}), "yue (Cantonese)"),
    # The model card's five: en, fr, de, es, pt.
    "granite-speech": (_column(**_EN, **_DE, **{"pt-BR": "pt", "fil": LACKS, "cy": LACKS}), "pt (Portuguese)"),
    "voxtral": (_column(**_EN, **_DE, **{"pt-BR": "pt", "fil": LACKS, "cy": LACKS}), "nl (Dutch)"),
    "lasr": (_ENGLISH_ONLY, "has: en (English)"),
    "granite-speech5": (_ENGLISH_ONLY, "has: en (English)"),
    # English-only, and says so: no detection, every answer is "en".
    "moonshine": ({**_ENGLISH_ONLY, **dict.fromkeys(DETECT, "en")}, "has: en (English)"),
    "parakeet-ctc": (_ENGLISH_ONLY, "has: en (English)"),
    "wenet-u2pp": (_NO_LANGUAGE, "names no language"),
    "wav2vec2": (_NO_LANGUAGE, "names no language"),
    "wavlm": (_NO_LANGUAGE, "names no language"),
    "paraformer": (_NO_LANGUAGE, "names no language"),
    # SenseVoice's language queries: zh, en, yue, ja, ko, nospeech
    "sensevoice": (
        _column(**_EN, **dict.fromkeys(_DE, LACKS), **{"pt-BR": LACKS, "fil": LACKS, "cy": LACKS}),
        "yue (Cantonese)",
    ),
    "zipformer": (_NO_LANGUAGE, "names no language"),
    "icefall-transducer": (_NO_LANGUAGE, "names no language"),
}
MESSAGES = {
    LACKS: "is not a language of",
    UNKNOWN: "is not an ISO 639 code, an English name or a locale",
    NONE: "has no language control",
}


def _whisper_en(d: Path) -> tuple[Path, list[str]]:
    return Path("tiny.en"), []  # the bundled English-only checkpoint


BUILDERS = {**FAMILIES, "whisper-en": _whisper_en}
assert set(BUILDERS) == set(EXPECTED)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, tuple[Path, list[str]]]:
    """Built on first use, one directory per family for the module."""
    made: dict[str, tuple[Path, list[str]]] = {}

    def get(family: str) -> tuple[Path, list[str]]:
        if family not in made:
            made[family] = BUILDERS[family](tmp_path_factory.mktemp(family.replace("-", "_")))
        return made[family]

    return get


def _engine_kwargs(flags: list[str]) -> dict[str, str]:
    return dict(zip([f.lstrip("-").replace("-", "_") for f in flags[::2]], flags[1::2], strict=True))


@pytest.fixture(scope="module")
def engines(checkpoints):
    import oasr

    made = {}

    def get(family: str):
        if family not in made:
            path, flags = checkpoints(family)
            made[family] = oasr.ASREngine(str(path), device="cpu", **_engine_kwargs(flags))
        return made[family]

    return get


@pytest.fixture(scope="module")
def clip(tmp_path_factory, audio_dir) -> Path:
    """The first second of jfk.wav (a short decode for every family)."""
    from oasr.audio import load_audio

    src = audio_dir / "jfk.wav"
    if not src.exists():
        pytest.skip("jfk.wav is not in data/audio")
    x = (np.clip(load_audio(src)[:16000], -1, 1) * 32767).astype(np.int16)
    path = tmp_path_factory.mktemp("clip") / "one_second.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(x.tobytes())
    return path


# ---------------------------------------------------------------------------
# Python


@pytest.mark.parametrize("family", list(EXPECTED))
def test_python_resolves_the_table_for_every_family(family, engines):
    engine = engines(family)
    column, listing = EXPECTED[family]
    for given in INPUTS:
        want = column[given]
        if want in MESSAGES:
            with pytest.raises(LanguageError, match=MESSAGES[want]) as e:
                engine.make_options(language=given)
            assert isinstance(e.value, ValueError) and listing in str(e.value), (given, str(e.value))
        else:
            assert engine.make_options(language=given).language == want, given


def test_nemotron_names_and_locales_pick_the_references_prompt(engines):
    """The prompt a name or locale selects is the one transformers' processor gives its table key."""
    from transformers import Nemotron3_5AsrProcessor

    engine = engines("nemotron")
    path = engine.loaded.source
    processor = Nemotron3_5AsrProcessor.from_pretrained(path)
    column, _ = EXPECTED["nemotron"]
    for given in INPUTS:
        key = column[given]
        if key in MESSAGES:
            continue
        want = int(processor._resolve_prompt_ids(key if key is not None else "auto", 1)[0])
        assert engine.model.resolve_prompt_id(given) == want, given
        assert engine.model.prompt_ids([engine.make_options(language=given).language], 1).tolist() == [want]


def test_nemotron_decodes_a_name_as_its_code(engines, clip):
    engine = engines("nemotron")

    def labels(**options) -> list[int]:
        return [t for s in engine.transcribe(str(clip), **options).segments for t in s.tokens]

    assert labels(language="ENGLISH") == labels(language="en")
    assert labels(language="gErMaN") == labels(language="de")
    assert labels(language="none") == labels()


def test_qwen3_none_detects(engines, clip):
    engine = engines("qwen3-asr")
    detected = engine.transcribe(str(clip))
    out = engine.transcribe(str(clip), language="none")
    assert (out.text, out.language) == (detected.text, detected.language)
    forced = engine.transcribe(str(clip), language="gErMaN")
    assert forced.language == "de" and forced.text == engine.transcribe(str(clip), language="de").text


# ---------------------------------------------------------------------------
# HTTP


def _app(path: Path, flags: list[str], *extra: str):
    from oasr.cli.main import build_parser
    from oasr.cli.serve import settings_from_args
    from oasr.server.app import build_engine, create_app

    argv = ["serve", "--model", str(path), "--device", "cpu", *flags, *extra]
    settings = settings_from_args(build_parser().parse_args(argv))
    engine = build_engine(settings)
    return create_app(settings, engine), engine, settings.model_names[0]


def _post(client, name: str, clip: Path, **fields):
    files = {"file": (clip.name, clip.read_bytes(), "audio/wav")}
    return client.post("/v1/audio/transcriptions", data={"model": name, **fields}, files=files)


@pytest.mark.parametrize("family", list(EXPECTED))
def test_http_answers_the_table_for_every_family(family, checkpoints, clip):
    """Every refusal of the table is a 400 before any audio is decoded; one accepted spelling
    (a locale with "_", else "none") decodes, and the response names the language resolved."""
    from fastapi.testclient import TestClient

    path, flags = checkpoints(family)
    column, listing = EXPECTED[family]
    app, engine, name = _app(path, flags)
    try:
        with TestClient(app) as client:
            for given in INPUTS:
                want = column[given]
                if want not in MESSAGES:
                    continue
                r = _post(client, name, clip, language=given)
                assert r.status_code == 400, (given, r.text)
                error = r.json()["error"]
                assert (error["code"], error["param"], error["type"]) == (
                    "invalid_language",
                    "language",
                    "invalid_request_error",
                )
                assert MESSAGES[want] in error["message"] and listing in error["message"], error
            given = next(x for x in ("en_gb", "none") if column[x] not in MESSAGES)
            r = _post(client, name, clip, language=given)
            assert r.status_code == 200, (given, r.text)
            if column[given] is not None:  # forced: the response names it (detection may name any)
                assert r.json()["language"] == column[given], given
    finally:
        engine.shutdown()


@pytest.mark.parametrize("family", ["nemotron", "qwen3-asr"])
def test_serve_language_is_the_default_of_requests_that_send_none(family, checkpoints, clip):
    from fastapi.testclient import TestClient

    path, flags = checkpoints(family)
    app, engine, name = _app(path, flags, "--language", "gErMaN")
    plain_app, plain_engine, _ = _app(path, flags)
    try:
        with TestClient(app) as client, TestClient(plain_app) as plain:
            defaulted = _post(client, name, clip)
            assert defaulted.status_code == 200 and defaulted.json()["language"] == "de"
            assert defaulted.json()["text"] == _post(plain, name, clip, language="de").json()["text"]
            own = _post(client, name, clip, language="en")  # the request's own wins
            assert own.json()["language"] == "en"
            assert own.json()["text"] == _post(plain, name, clip, language="en").json()["text"]
            auto = _post(client, name, clip, language="auto")  # detect, whatever the default
            assert auto.json() == _post(plain, name, clip).json()
            empty = _post(client, name, clip, language="")  # an empty field is no field: the default
            assert empty.json()["language"] == "de"
    finally:
        engine.shutdown()
        plain_engine.shutdown()


def test_serve_refuses_a_default_language_the_model_lacks(checkpoints, capsys):
    from oasr.cli.main import main

    path, _ = checkpoints("nemotron")
    code = main(["serve", "--model", str(path), "--device", "cpu", "--port", "0", "--language", "French"])
    err = capsys.readouterr().err
    assert code == 2 and "--language French" in err and "en-GB (English)" in err and "not starting" in err


def test_websocket_refuses_a_language_the_model_lacks(checkpoints):
    from fastapi.testclient import TestClient

    path, flags = checkpoints("nemotron")
    app, engine, _ = _app(path, flags)
    try:
        with TestClient(app) as client:
            with client.websocket_connect("/v1/audio/stream") as ws:
                ws.send_text(json.dumps({"sample_rate": 16000, "language": "fr"}))
                event = ws.receive_json()
                assert event["type"] == "error" and event["code"] == "invalid_language", event
                assert "en-GB (English)" in event["message"]
                assert ws.receive()["code"] == 1007
            with client.websocket_connect("/v1/audio/stream") as ws:
                ws.send_text(json.dumps({"sample_rate": 16000, "language": "ENGLISH"}))
                ws.send_bytes(np.zeros(3200, dtype=np.int16).tobytes())
                ws.send_text("done")
                events = [ws.receive_json()]
                while events[-1]["type"] not in ("done", "error"):
                    events.append(ws.receive_json())
                assert events[-1]["type"] == "done", events
    finally:
        engine.shutdown()


# ---------------------------------------------------------------------------
# CLI


def _cli(path: Path, flags: list[str], clip: Path, language: str, capsys) -> tuple[int, str, str]:
    from oasr.cli.main import main

    capsys.readouterr()
    argv = ["transcribe", str(clip), "--model", str(path), "--device", "cpu", *flags]
    try:
        code = main([*argv, "--language", language, "-f", "json", "--no-progress"])
    except SystemExit as e:  # argparse's usage error
        code = int(e.code)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("family", list(EXPECTED))
def test_cli_exits_2_naming_the_models_languages(family, checkpoints, clip, capsys):
    path, flags = checkpoints(family)
    column, listing = EXPECTED[family]
    lacking = next(given for given in ("cy", "fil", "de") if column[given] in (LACKS, NONE))
    code, _, err = _cli(path, flags, clip, lacking, capsys)
    assert code == 2 and f"language '{lacking}'" in err and listing in err, err


@pytest.mark.parametrize(("family", "given"), [("nemotron", "ENGLISH"), ("nemotron", "de_DE"), ("qwen3-asr", "none")])
def test_cli_takes_names_locales_and_none(family, given, checkpoints, clip, capsys):
    path, flags = checkpoints(family)
    want = EXPECTED[family][0][given]
    code, out, err = _cli(path, flags, clip, given, capsys)
    assert code == 0, err
    if want is not None:
        assert json.loads(out)["language"] == want
