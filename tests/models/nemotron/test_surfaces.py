"""Nemotron 3.5 ASR through every surface, on the tiny checkpoint of the parity tests (whose
greedy search is held to transformers' ``generate`` per prompt in ``test_parity.py``):

* ``ASREngine.transcribe(clip, language=...)``: for each of two prompt languages, the labels of the
  model's own greedy search under that language's prompt id (the strategy resolves the code against
  the checkpoint's ``processor_config.json`` table and conditions the row on it);
* a batch whose rows carry different languages, decoded in one step, equals each row alone;
* ``oasr transcribe --language xx -f verbose_json`` prints the engine's verbose_json; an unknown code
  is exit 2 naming it, before any audio is read;
* ``oasr serve`` with ``language``: verbose_json (text, segments, word times) equal to the engine's;
  an unknown language is a 400 naming it (``param`` "language");
* the server's per-request limits for a NeMo transducer: a non-finite WAV and audio over
  ``--max-audio-seconds`` are 400s while a request beside them keeps its solo text, and a client that
  hangs up beside a running request leaves that request its solo text.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import torch

import oasr
from oasr.engine.decode.base import Request
from tests.models.nemotron.conftest import PROMPTS

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tests.server._fault_helpers import RawRequest, float_wav  # noqa: E402
from tests.server.conftest import ServerProcess, httpx, metric, wav_bytes  # noqa: E402

NAME = "nemotron-tiny"
CLIP = "sense_and_sensibility_01_austen_64kb-0890.wav"  # 5.3 s
OTHER = "speechbrain_spk1_snt1.wav"  # 2.9 s
LANGUAGES = ("en", "de")
MAX_AUDIO_S = 60


@pytest.fixture(scope="module")
def engine(nemotron_reference):
    return oasr.ASREngine(str(nemotron_reference.path))


@pytest.fixture(scope="module")
def clips(audio_dir):
    return {name: audio_dir / name for name in (CLIP, OTHER)}


@pytest.fixture(scope="module")
def server(nemotron_reference, tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "nemotron.log"
    s = ServerProcess(
        [
            "--model",
            str(nemotron_reference.path),
            "--served-model-name",
            NAME,
            "--max-audio-seconds",
            str(MAX_AUDIO_S),
        ],
        log,
        startup_s=120,
    )
    yield s
    s.stop()


def _labels(out) -> list[int]:
    return [t for seg in out.segments for t in seg.tokens]


def _post(server, data: bytes, timeout: float = 120, **fields):
    return server.post_audio(files={"file": ("a.wav", data)}, data={"model": NAME, **fields}, timeout=timeout)


# ---------------------------------------------------------------------------
# Engine


def test_engine_language_gives_the_model_search_under_that_prompt(engine, clips):
    got = {}
    for language in LANGUAGES:
        out = engine.transcribe(str(clips[CLIP]), language=language, word_timestamps=True)
        assert out.language == language
        feats = engine.strategy.prepare(Request("r", str(clips[CLIP]), engine.make_options())).features
        feats = feats.windows[0].feats
        prompt = torch.tensor([PROMPTS[language]])
        want = engine.model.greedy_decode(feats[None].float(), torch.tensor([feats.shape[0]]), prompt).tokens[0]
        got[language] = _labels(out)
        assert got[language] == want, language
        assert len(want) > 10, "the comparison is vacuous without labels"
        for seg in out.segments:
            assert 0 <= seg.start <= seg.end <= out.duration + 0.1
            assert seg.words and all(0.0 < w.probability <= 1.0 for w in seg.words)
    assert got["en"] != got["de"], "the two prompts should give different labels; the test is vacuous otherwise"
    default = engine.transcribe(str(clips[CLIP]))  # no language: the checkpoint's default prompt
    assert default.language is None and _labels(default) not in (got["en"], got["de"])


def test_engine_refuses_an_unknown_language(engine, clips):
    with pytest.raises(ValueError, match=r"'xx' is not a language of NemotronRnntModel; it has: .*en-GB"):
        engine.transcribe(str(clips[CLIP]), language="xx")


def test_a_batch_with_a_language_per_row_equals_each_row_alone(engine, clips):
    rows = [(CLIP, "en"), (OTHER, "de"), (CLIP, "de"), (OTHER, None)]
    strategy = engine.splitter
    before = engine.strategy.counters.batches
    ids = {}
    for i, (name, language) in enumerate(rows):
        request = strategy.prepare(Request(f"mixed-{i}", str(clips[name]), engine.make_options(language=language)))
        engine.add_request(request)
        ids[request.request_id] = i
    outs: dict[int, object] = {}
    while len(outs) < len(rows):
        for event in strategy.step():
            assert event.kind != "error", event.error
            if event.kind == "finished" and event.request_id in ids:
                outs[ids[event.request_id]] = event.output
    assert engine.strategy.counters.batches - before == 1, "the four rows should share one encoder batch"
    for i, (name, language) in enumerate(rows):
        alone = engine.transcribe(str(clips[name]), language=language)
        assert _labels(outs[i]) == _labels(alone) and outs[i].text == alone.text, (name, language)
    assert _labels(outs[0]) != _labels(outs[2]), "one clip under two prompts should differ"


# ---------------------------------------------------------------------------
# CLI


def test_cli_verbose_json_equals_the_engine(engine, nemotron_reference, clips, capsys):
    from oasr.cli.main import main
    from oasr.formatting import verbose_json_dict

    for language in LANGUAGES:
        capsys.readouterr()
        argv = ["transcribe", str(clips[CLIP]), "--model", str(nemotron_reference.path), "--language", language]
        code = main([*argv, "-f", "verbose_json", "--no-progress"])
        printed = capsys.readouterr().out
        assert code == 0
        want = verbose_json_dict(engine.transcribe(str(clips[CLIP]), language=language))
        got = json.loads(printed)
        assert got["text"] == want["text"] and got["segments"] == json.loads(json.dumps(want["segments"]))
        assert got["duration"] == want["duration"]


def test_cli_unknown_language_is_exit_2_naming_it(nemotron_reference, clips, capsys):
    from oasr.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["transcribe", str(clips[CLIP]), "--model", str(nemotron_reference.path), "--language", "xx"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'xx' is not a language of NemotronRnntModel" in err and "en-GB" in err and "Traceback" not in err


# ---------------------------------------------------------------------------
# Server


def test_server_language_verbose_json_with_word_times_equals_the_engine(server, engine, clips):
    from oasr.formatting import verbose_json_dict

    for language in LANGUAGES:
        out = engine.transcribe(str(clips[CLIP]), language=language, word_timestamps=True)
        want = json.loads(json.dumps(verbose_json_dict(out, words=True)))
        r = _post(
            server,
            clips[CLIP].read_bytes(),
            language=language,
            response_format="verbose_json",
            **{"timestamp_granularities[]": ["word", "segment"]},
        )
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["text"] == out.text and got["duration"] == want["duration"]
        assert got["words"] == want["words"] and got["words"][0]["end"] > got["words"][0]["start"]
        keys = ("id", "start", "end", "text", "tokens")
        assert [{k: s[k] for k in keys} for s in got["segments"]] == [{k: s[k] for k in keys} for s in want["segments"]]


def test_server_unknown_language_is_400_naming_it(server, clips):
    r = _post(server, clips[OTHER].read_bytes(), language="xx")
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "language" and err["code"] == "invalid_language", err
    assert "'xx' is not a language of NemotronRnntModel" in err["message"] and "en-GB" in err["message"], err


@pytest.fixture(scope="module")
def solo(server, clips) -> dict[str, str]:
    out = {}
    for name, path in clips.items():
        r = _post(server, path.read_bytes())
        assert r.status_code == 200, r.text
        out[name] = r.json()["text"]
    assert all(out.values()) and len(set(out.values())) == len(out), out
    return out


def _poison(value: float) -> bytes:
    x = np.zeros(32000, dtype=np.float32)
    x[1000:1010] = value
    return float_wav(x)


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (lambda: _poison(np.nan), "invalid_audio"),
        (lambda: wav_bytes(np.full((MAX_AUDIO_S + 5) * 16000, 0.01)), "audio_too_long"),
    ],
    ids=["nan", "too_long"],
)
def test_bad_audio_is_400_and_the_request_beside_it_keeps_its_text(server, clips, solo, make, code):
    innocent: dict[str, object] = {}
    thread = threading.Thread(target=lambda: innocent.setdefault("r", _post(server, clips[CLIP].read_bytes())))
    thread.start()
    r = _post(server, make())
    thread.join(timeout=120)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", "file", code), err
    assert (innocent["r"].status_code, innocent["r"].json()["text"]) == (200, solo[CLIP])
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200


def test_hang_up_leaves_a_running_request_its_solo_text(server, clips, solo):
    from oasr.audio import load_audio

    speech = load_audio(str(clips[OTHER]), 16000)
    audio = wav_bytes(np.tile(speech, int(np.ceil(40 / (len(speech) / 16000)))))  # 40 s, under the limit
    victim = RawRequest(server.port, "/v1/audio/transcriptions", {"model": NAME}, audio)
    innocent: dict[str, object] = {}
    thread = threading.Thread(target=lambda: innocent.setdefault("r", _post(server, clips[CLIP].read_bytes())))
    victim.send()  # the whole upload: admitted, then gone
    thread.start()
    deadline = time.monotonic() + 5
    while metric(server.metrics(), "oasr_queue_depth") < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    victim.hang_up()
    thread.join(timeout=120)
    assert (innocent["r"].status_code, innocent["r"].json()["text"]) == (200, solo[CLIP])
    r = _post(server, clips[OTHER].read_bytes())
    assert (r.status_code, r.json()["text"]) == (200, solo[OTHER])
