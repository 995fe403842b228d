"""``oasr serve --model whisper-base`` (the real multilingual weights) on real clips:
English transcription, language detection, and the translations route."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from .conftest import ServerProcess, needs_base

pytestmark = [pytest.mark.real_weights, needs_base]

MODEL = "whisper-base"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # greedy (an explicit flag): quicker than Whisper's default beam 5, and what the texts below were read from
    s = ServerProcess(["--model", MODEL, "--beam-size", "1"], tmp_path_factory.mktemp("base") / "server.log")
    yield s
    s.stop()


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^a-z' ]", " ", text.lower()).split())


def test_transcribes_jfk(server, clip):
    with open(clip("jfk.wav"), "rb") as f:
        out = server.client().audio.transcriptions.create(file=f, model=MODEL, response_format="verbose_json")
    assert "ask not what your country can do for you" in _words(out.text)
    assert out.language == "english"  # detected


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")
def test_translates_french_to_english(server, clip):
    path = clip("picovoice_test_fr.wav")  # "Sous le consulat il devient conservateur des eaux et forêts ..."
    data = path.read_bytes()

    def translate(fmt: str):
        # The fallback samples, from a fresh seed per request unless one is given: one seed for both
        # requests makes them (and the words read from them) reproducible.
        return server.client().audio.translations.create(
            file=("fr.wav", data), model=MODEL, response_format=fmt, extra_body={"seed": 0}
        )

    with ThreadPoolExecutor(2) as pool:  # concurrently: the engine batches them (the fallback makes each slow)
        english, verbose = pool.map(translate, ["json", "verbose_json"])
    words = set(_words(english.text).split())
    # English out (whisper-base's greedy translation is rough: "Under the console, it becomes ... forest ...")
    assert {"the", "it", "and"} <= words, english.text
    assert {"forest", "forests"} & words, english.text
    assert not {"sous", "le", "il", "devient", "des", "et", "eaux"} & words, english.text
    assert verbose.text == english.text
    assert verbose.language == "french"  # the detected source language
    assert (verbose.model_extra or {}).get("task") == "translate"
