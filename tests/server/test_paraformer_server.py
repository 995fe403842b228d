"""A FunASR Paraformer directory behind ``oasr serve``: verbose_json with CIF word times,
srt and vtt equal to the in-process ``ASREngine`` on a Mandarin clip, and the fault suite's
per-request limits (non-finite float WAV and audio over ``--max-audio-seconds`` are 400s; a
hang-up leaves a concurrent request its solo text).

The model is the tiny random Paraformer of the family's loader tests (oasr's own modules,
written in FunASR's layout: no funasr needed) with its weights scaled up and its CIF output
biased so that it fires on speech: random text, but timed tokens on every clip.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import AUDIO_DIR
from tests.server._fault_helpers import RawRequest
from tests.server.conftest import ServerProcess, float_wav, metric, wav_bytes

torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

NAME = "paraformer-zh"
ZH = "funasr_asr_example.wav"  # 5.5 s Mandarin
OTHER = "aishell-BAC009S0724W0121.wav"  # 4.3 s Mandarin
MAX_AUDIO_S = 120
TRANSCRIBE = "/v1/audio/transcriptions"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from tests.models.paraformer.conftest import write_firing_paraformer_dir

    return write_firing_paraformer_dir(tmp_path_factory.mktemp("paraformer") / "model", seed=3)


@pytest.fixture(scope="module")
def clips() -> dict[str, Path]:
    missing = [n for n in (ZH, OTHER) if not (AUDIO_DIR / n).is_file()]
    if missing:
        pytest.skip(f"data/audio missing: {missing}")
    return {n: AUDIO_DIR / n for n in (ZH, OTHER)}


@pytest.fixture(scope="module")
def engine(model_dir):
    import oasr

    return oasr.ASREngine(str(model_dir))


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "paraformer.log"
    s = ServerProcess(
        ["--model", str(model_dir), "--served-model-name", NAME, "--max-audio-seconds", str(MAX_AUDIO_S)],
        log,
        startup_s=90,
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def solo(server, clips) -> dict[str, str]:
    """Each clip's text through the server, alone."""
    out = {}
    for name, path in clips.items():
        r = _post(server, path.read_bytes())
        assert r.status_code == 200, r.text
        out[name] = r.json()["text"]
    assert all(out.values()) and len(set(out.values())) == len(out), out
    return out


def _post(server, data: bytes, timeout: float = 120, **fields: str):
    return server.post_audio(files={"file": ("a.wav", data)}, data={"model": NAME, **fields}, timeout=timeout)


# ---------------------------------------------------------------------------
# Formats


def test_verbose_json_with_word_times_equals_the_engine(server, engine, clips):
    from oasr.formatting import verbose_json_dict

    out = engine.transcribe(str(clips[ZH]), word_timestamps=True)
    assert out.text and " " not in out.text  # Mandarin: no spaces between characters
    want = verbose_json_dict(out, words=True)
    r = server.post_audio(
        files={"file": (ZH, clips[ZH].read_bytes())},
        data={"model": NAME, "response_format": "verbose_json", "timestamp_granularities[]": ["word", "segment"]},
    )
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["text"] == out.text and got["duration"] == want["duration"] == pytest.approx(5.547, abs=0.01)
    assert got["words"] == want["words"] and len(got["words"]) == len(out.text)  # one CIF token a character
    starts = [w["start"] for w in got["words"]]
    # FunASR times the tail fire over one extra LFR frame (60 ms) past the last full one: the
    # last word may end up to two LFR frames after the audio does, as funasr's own timestamps.
    assert starts == sorted(starts) and all(w["start"] <= w["end"] <= got["duration"] + 0.12 for w in got["words"])
    keys = ("id", "start", "end", "text", "tokens")
    assert [{k: s[k] for k in keys} for s in got["segments"]] == [{k: s[k] for k in keys} for s in want["segments"]]
    # Through the official client too.
    with open(clips[ZH], "rb") as f:
        verbose = server.client().audio.transcriptions.create(
            model=NAME, file=f, response_format="verbose_json", timestamp_granularities=["word"]
        )
    assert [(w.word, w.start, w.end) for w in verbose.words] == [
        (w["word"], w["start"], w["end"]) for w in want["words"]
    ]


_SRT_CUE = re.compile(r"(\d+)\n(\d\d):(\d\d):(\d\d),(\d\d\d) --> (\d\d):(\d\d):(\d\d),(\d\d\d)\n(.+)\n")
_VTT_CUE = re.compile(r"(\d\d):(\d\d):(\d\d)\.(\d\d\d) --> (\d\d):(\d\d):(\d\d)\.(\d\d\d)\n(.+)\n")


def _seconds(h, m, s, ms) -> float:
    return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_srt_and_vtt_carry_the_cif_times(server, engine, clips, fmt):
    from oasr.formatting import format_output

    out = engine.transcribe(str(clips[ZH]))
    r = _post(server, clips[ZH].read_bytes(), response_format=fmt)
    assert r.status_code == 200, r.text
    assert r.text == format_output(out, fmt)
    if fmt == "srt":
        cues = [(_seconds(*c[1:5]), _seconds(*c[5:9]), c[9]) for c in _SRT_CUE.findall(r.text)]
    else:
        assert r.text.startswith("WEBVTT")
        cues = [(_seconds(*c[0:4]), _seconds(*c[4:8]), c[8]) for c in _VTT_CUE.findall(r.text)]
    # cues are the segments' CIF times, ends clamped to the audio's end (FunASR's last fire may lie past it)
    assert [(a, b, t) for a, b, t in cues] == [
        (round(s.start, 3), round(min(s.end, out.duration), 3), s.text.strip()) for s in out.segments
    ]
    assert "".join(t for _, _, t in cues) == out.text and cues[0][0] > 0.0  # the first CIF fire, not 0


# ---------------------------------------------------------------------------
# Per-request limits beside an innocent request


def _poison(value: float) -> bytes:
    x = np.zeros(32000, dtype=np.float32)
    x[1000:1010] = value
    return float_wav(x)


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (lambda: _poison(np.nan), "invalid_audio"),
        (lambda: _poison(np.inf), "invalid_audio"),
        (lambda: _poison(-np.inf), "invalid_audio"),
        (lambda: wav_bytes(np.full((MAX_AUDIO_S + 5) * 16000, 0.01)), "audio_too_long"),
    ],
    ids=["nan", "inf", "-inf", "too_long"],
)
def test_bad_audio_is_400_and_the_request_beside_it_keeps_its_text(server, clips, solo, make, code):
    innocent: dict[str, object] = {}
    thread = threading.Thread(target=lambda: innocent.setdefault("r", _post(server, clips[ZH].read_bytes())))
    thread.start()
    r = _post(server, make())
    thread.join(timeout=120)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", "file", code), err
    assert (innocent["r"].status_code, innocent["r"].json()["text"]) == (200, solo[ZH])
    assert server.healthy()


def _engine_ended(server) -> float:
    """Requests the engine has finished, aborted or failed."""
    m = server.metrics()
    return sum(metric(m, "oasr_engine_requests_total", outcome=o) for o in ("finished", "aborted", "failed"))


def _until(condition, limit_s: float = 30.0) -> bool:
    import time

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("moment", ["mid_upload", "after_admission"])
def test_hang_up_leaves_a_concurrent_request_its_solo_text(server, clips, solo, moment):
    from oasr.audio import load_audio

    speech = load_audio(str(clips[OTHER]), 16000)
    long_victim = wav_bytes(np.tile(speech, int(np.ceil(100 / (len(speech) / 16000)))))  # 100 s, under the limit
    victim = RawRequest(server.port, TRANSCRIBE, {"model": NAME}, long_victim)
    ended = _engine_ended(server)
    innocent: dict[str, object] = {}

    def run_innocent() -> None:
        innocent["r"] = _post(server, clips[ZH].read_bytes())

    thread = threading.Thread(target=run_innocent)
    if moment == "mid_upload":
        victim.send(len(victim.data) // 2)  # headers and half the body: never admitted
    else:
        victim.send()  # the whole upload; dropped once the engine holds it (or has already done it)
        admitted = _until(lambda: metric(server.metrics(), "oasr_queue_depth") >= 1 or _engine_ended(server) > ended)
        assert admitted, "the victim never reached the engine"
    thread.start()
    victim.hang_up()
    thread.join(timeout=120)
    assert (innocent["r"].status_code, innocent["r"].json()["text"]) == (200, solo[ZH])
    # Nothing is left held for the victim: the queue drains (an admitted victim is dropped
    # wherever the hang-up finds it: being prepared, queued or decoded).
    assert _until(lambda: metric(server.metrics(), "oasr_queue_depth") == 0)
    if moment == "mid_upload":
        assert _engine_ended(server) == ended + 1  # the innocent only: the victim never reached the engine
    assert metric(server.metrics(), "oasr_engine_requests_total", outcome="failed") == 0
    assert server.healthy()
    r = _post(server, clips[OTHER].read_bytes())
    assert (r.status_code, r.json()["text"]) == (200, solo[OTHER])
