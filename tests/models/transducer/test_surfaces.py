"""An icefall hybrid (CTC head + transducer) through every surface, on the tiny causal checkpoint
of the parity tests (whose searches are held to icefall's in ``test_search.py`` / ``test_engine.py``):

* ``oasr transcribe CLIP -f verbose_json``: the CTC head (a hybrid's default) and, with
  ``--architecture transducer``, greedy and ``--beam-size 4``, print the in-process ``ASREngine``'s
  verbose_json (text, segments, word times);
* ``--max-sym-per-frame`` / ``--blank-penalty`` reach ``TranscribeOptions`` (transcribe, eval, serve)
  and change the decode as the engine option does; a bad value is exit 2 with one line;
* hotwords through the engine (beam 4) give the tokens of icefall's ``modified_beam_search`` with
  a ``ContextGraph`` built from the same phrase tokens, and differ from the unbiased search;
* ``oasr serve --architecture transducer``: verbose_json word times equal the engine's; the
  per-request limits: a NaN WAV and audio over ``--max-audio-seconds`` are 400s beside an untouched
  request, and a hang-up beside a running request leaves it its solo text.
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
from tests.models.zipformer.conftest import icefall_input

zipformer = pytest.importorskip("zipformer", reason="the zipformer package (icefall's modules) is not installed")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tests.server._fault_helpers import RawRequest, float_wav  # noqa: E402
from tests.server.conftest import ServerProcess, httpx, metric, wav_bytes  # noqa: E402

# Every test here runs on the causal checkpoint only (the full-context one adds nothing to surfaces).
pytestmark = pytest.mark.parametrize("reference", [True], ids=["causal"], indirect=True)

NAME = "icefall-tiny"
CLIP = "sense_and_sensibility_01_austen_64kb-0930.wav"  # 3.3 s
OTHER = "speechbrain_spk1_snt1.wav"  # 2.9 s
MAX_AUDIO_S = 30
HOTWORDS = "the cat, big dog"
HOTWORD_WEIGHT = 4.0


@pytest.fixture(scope="module")
def clips(audio_dir):
    return {name: audio_dir / name for name in (CLIP, OTHER)}


@pytest.fixture(scope="module")
def ctc_engine(reference):
    return oasr.ASREngine(str(reference.path))


@pytest.fixture(scope="module")
def engine(reference):
    return oasr.ASREngine(str(reference.path), architecture="transducer")


@pytest.fixture(scope="module")
def server(reference, tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "icefall.log"
    args = ["--model", str(reference.path), "--architecture", "transducer", "--served-model-name", NAME]
    s = ServerProcess([*args, "--max-audio-seconds", str(MAX_AUDIO_S)], log, startup_s=120)
    yield s
    s.stop()


def _tokens(out) -> list[int]:
    return [t for seg in out.segments for t in seg.tokens]


def _post(server, data: bytes, timeout: float = 120, **fields):
    return server.post_audio(files={"file": ("a.wav", data)}, data={"model": NAME, **fields}, timeout=timeout)


def _cli_json(capsys, *argv: str) -> dict:
    from oasr.cli.main import main

    capsys.readouterr()
    code = main([*argv, "-f", "verbose_json", "--no-progress"])
    printed = capsys.readouterr().out
    assert code == 0
    return json.loads(printed)


def _as_json(obj):
    return json.loads(json.dumps(obj))


# ---------------------------------------------------------------------------
# CLI


@pytest.mark.parametrize(
    ("extra", "kwargs"),
    [
        ((), {}),
        (("--architecture", "transducer"), {}),
        (("--architecture", "transducer", "--beam-size", "4"), {"beam_size": 4}),
    ],
    ids=["ctc", "transducer_greedy", "transducer_beam4"],
)
def test_cli_verbose_json_equals_the_engine(reference, ctc_engine, engine, clips, capsys, extra, kwargs):
    from oasr.formatting import verbose_json_dict

    eng = engine if "transducer" in extra else ctc_engine
    out = eng.transcribe(str(clips[CLIP]), word_timestamps=True, **kwargs)
    assert out.text.strip() and _tokens(out)
    want = _as_json(verbose_json_dict(out, words=True))
    got = _cli_json(capsys, "transcribe", str(clips[CLIP]), "--model", str(reference.path), *extra, "--word-timestamps")
    assert got["text"] == want["text"] and got["duration"] == want["duration"]
    assert got["segments"] == want["segments"]
    assert got["words"] == want["words"] and all(w["start"] <= w["end"] for w in got["words"])


def test_cli_transducer_flags_reach_the_options(reference, engine, clips, capsys):
    from oasr.cli.common import decode_kwargs
    from oasr.cli.main import build_parser
    from oasr.formatting import verbose_json_dict

    flags = ["--max-sym-per-frame", "3", "--blank-penalty", "1.5"]
    for argv in (["transcribe", "x.wav"], ["eval", "m.jsonl"]):
        args = build_parser().parse_args([*argv, *flags])
        assert {k: decode_kwargs(args)[k] for k in ("max_sym_per_frame", "blank_penalty")} == {
            "max_sym_per_frame": 3,
            "blank_penalty": 1.5,
        }
        assert "max_sym_per_frame" not in decode_kwargs(build_parser().parse_args(argv))  # unset: the default
    from oasr.cli.serve import settings_from_args

    settings = settings_from_args(build_parser().parse_args(["serve", *flags]))
    assert settings.decode_options() == {"max_sym_per_frame": 3, "blank_penalty": 1.5}
    assert settings_from_args(build_parser().parse_args(["serve"])).decode_options() == {}  # the strategy's own

    # End to end: the flags decode as the engine options do, and the penalty changes the decode.
    out = engine.transcribe(str(clips[CLIP]), max_sym_per_frame=3, blank_penalty=1.5)
    assert _tokens(out) != _tokens(engine.transcribe(str(clips[CLIP])))
    argv = ["transcribe", str(clips[CLIP]), "--model", str(reference.path), "--architecture", "transducer"]
    got = _cli_json(capsys, *argv, *flags)
    assert got["text"] == out.text and got["segments"] == _as_json(verbose_json_dict(out)["segments"])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-sym-per-frame", "0"], "argument --max-sym-per-frame: must be >= 1, got 0"),
        (["--max-sym-per-frame", "two"], "argument --max-sym-per-frame: expected an integer"),
        (["--blank-penalty", "nan"], "argument --blank-penalty: must be a finite number, got nan"),
        (["--blank-penalty", "x"], "argument --blank-penalty: expected a number"),
        (["--beam-size", "4", "--max-sym-per-frame", "2"], "max_sym_per_frame applies to greedy search"),
        (["--search", "alsd"], "search must be one of ['greedy', 'malsd', 'maes', 'beam', 'modified_beam']"),
    ],
)
@pytest.mark.parametrize("command", ["transcribe", "eval", "serve"])
def test_cli_bad_transducer_flag_is_exit_2_with_one_line(reference, clips, tmp_path, capsys, command, flags, message):
    from oasr.cli.main import main

    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"audio": str(clips[OTHER]), "text": "x"}) + "\n", encoding="utf-8")
    target = {"transcribe": [str(clips[OTHER])], "eval": [str(manifest)], "serve": []}[command]
    argv = [command, *target, "--model", str(reference.path), "--architecture", "transducer", *flags]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if line != f"(see 'oasr {command} --help')"]
    assert lines[-1].startswith(f"oasr {command}: ") and message in lines[-1], err


# ---------------------------------------------------------------------------
# Hotwords


def test_hotwords_equal_icefall_modified_beam_search_with_a_context_graph(reference, engine, clips):
    from zipformer.decode import search
    from zipformer.decode.context_graph import ContextGraph

    path = str(clips[CLIP])
    request = engine.strategy.prepare(Request("x", path, engine.make_options()))
    feats = icefall_input(request.features.windows[0].feats.double(), reference.causal)
    phrases = [p.strip() for p in HOTWORDS.split(",")]
    token_ids = [engine.strategy.tokenizer.encode_text(p) for p in phrases]
    assert all(token_ids)
    graph = ContextGraph(context_score=HOTWORD_WEIGHT)
    graph.build(token_ids=token_ids, phrases=phrases)
    with torch.no_grad():
        enc, enc_lens = reference.model.forward_encoder(feats[None], torch.tensor([feats.shape[0]]))
        want = search.modified_beam_search(reference.model, enc, enc_lens, beam=4, context_graph=graph)[0]
        plain = search.modified_beam_search(reference.model, enc, enc_lens, beam=4)[0]
    skip = engine.strategy.skip_ids  # the checkpoint's special ids are not text
    want, plain = [t for t in want if t not in skip], [t for t in plain if t not in skip]
    out = engine.transcribe(path, beam_size=4, hotwords=HOTWORDS, hotword_weight=HOTWORD_WEIGHT)
    assert _tokens(out) == want
    assert want != plain  # the graph changes this decode: the comparison is not vacuous
    assert _tokens(engine.transcribe(path, beam_size=4)) == plain


# ---------------------------------------------------------------------------
# Server


def test_server_verbose_json_word_times_equal_the_engine(server, engine, clips):
    from oasr.formatting import verbose_json_dict

    out = engine.transcribe(str(clips[CLIP]), word_timestamps=True)
    want = _as_json(verbose_json_dict(out, words=True))
    fields = {"response_format": "verbose_json", "timestamp_granularities[]": ["word", "segment"]}
    r = _post(server, clips[CLIP].read_bytes(), **fields)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["text"] == out.text and got["duration"] == want["duration"]
    assert got["words"] and got["words"] == want["words"]
    keys = ("id", "start", "end", "text", "tokens")
    assert [{k: s[k] for k in keys} for s in got["segments"]] == [{k: s[k] for k in keys} for s in want["segments"]]


@pytest.fixture(scope="module")
def solo(server, clips) -> dict[str, str]:
    out = {}
    for name, path in clips.items():
        r = _post(server, path.read_bytes())
        assert r.status_code == 200, r.text
        out[name] = r.json()["text"]
    assert all(out.values()) and len(set(out.values())) == len(out), out
    return out


def _nan_wav() -> bytes:
    x = np.zeros(32000, dtype=np.float32)
    x[5000:5004] = np.nan
    return float_wav(x)


@pytest.mark.parametrize(
    ("make", "code"),
    [(_nan_wav, "invalid_audio"), (lambda: wav_bytes(np.full((MAX_AUDIO_S + 3) * 16000, 0.02)), "audio_too_long")],
    ids=["nan", "too_long"],
)
def test_bad_audio_is_400_beside_an_untouched_request(server, clips, solo, make, code):
    beside: dict[str, object] = {}
    thread = threading.Thread(target=lambda: beside.setdefault("r", _post(server, clips[CLIP].read_bytes())))
    thread.start()
    r = _post(server, make())
    thread.join(timeout=120)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", "file", code), err
    assert (beside["r"].status_code, beside["r"].json()["text"]) == (200, solo[CLIP])
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200


def test_hang_up_beside_a_running_request_leaves_it_its_solo_text(server, clips, solo):
    from oasr.audio import load_audio

    speech = load_audio(str(clips[OTHER]), 16000)
    audio = wav_bytes(np.tile(speech, int(np.ceil(25 / (len(speech) / 16000)))))  # 25 s, under the limit
    victim = RawRequest(server.port, "/v1/audio/transcriptions", {"model": NAME}, audio)
    beside: dict[str, object] = {}
    thread = threading.Thread(target=lambda: beside.setdefault("r", _post(server, clips[CLIP].read_bytes())))
    victim.send()  # the whole upload: admitted, then dropped
    thread.start()
    deadline = time.monotonic() + 5
    while metric(server.metrics(), "oasr_queue_depth") < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    victim.hang_up()
    thread.join(timeout=120)
    assert (beside["r"].status_code, beside["r"].json()["text"]) == (200, solo[CLIP])
    assert metric(server.metrics(), "oasr_engine_requests_total", outcome="failed") == 0
    r = _post(server, clips[OTHER].read_bytes())
    assert (r.status_code, r.json()["text"]) == (200, solo[OTHER])
