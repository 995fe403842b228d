"""Honest admission through a real ``oasr serve`` (``oasr.engine.admission``): a burst of
clients larger than the server can finish within ``--request-timeout`` gets only 200s and
429s (never a 504 after work was spent), every 429 is answered before any of its audio was
decoded (the engine's counters say so), and clients that come back after ``Retry-After``
all get, in the end, the text their clip gives alone.

The server decodes the tiny random Whisper of the fault suite (``fault_model_dir, data_clips``: a
request costs a few tens of decoder steps whatever its audio) with every engine step made
0.3 s slower (``OASR_FAULT_INJECT=slow:0.3``), so that its decode rate has a known ceiling:
one request takes several seconds, and the burst below is several times what one
``--request-timeout`` of 20 s holds, on any machine."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from ._fault_helpers import ONE_PASS_CLIPS, data_clips, fault_model_dir, solo_texts, start_server
from .conftest import metric

pytest.importorskip("transformers")

TIMEOUT_S = 10.0
SLOW_S = 0.3
CLIENTS = 8
MAX_ATTEMPTS = 60  # a guard against a loop that never ends, far above what a client needs


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return fault_model_dir(tmp_path_factory, "admission_model")


@pytest.fixture(scope="module")
def clips() -> dict[str, bytes]:
    return data_clips(ONE_PASS_CLIPS)


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    s = start_server(
        model_dir,
        tmp_path_factory.mktemp("admission") / "server.log",
        "--request-timeout",
        str(TIMEOUT_S),
        env={"OASR_FAULT_INJECT": f"slow:{SLOW_S}"},
    )
    yield s
    s.stop()


def _post(server, name: str, data: bytes, model_dir: Path) -> httpx.Response:
    return server.post_audio(
        files={"file": (name, data)},
        data={"model": str(model_dir), "response_format": "verbose_json"},
        timeout=300,
    )


def test_a_burst_gets_200s_and_early_429s_and_the_retries_get_their_solo_text(server, model_dir, clips):
    names = sorted(clips)
    jobs = [names[i % len(names)] for i in range(CLIENTS)]
    before = server.metrics()

    # The burst: every client at once.
    with ThreadPoolExecutor(CLIENTS) as pool:
        first = list(pool.map(lambda name: _post(server, name, clips[name], model_dir), jobs))
    statuses = [r.status_code for r in first]
    others = [(r.status_code, r.text[:200]) for r in first if r.status_code not in (200, 429)]
    assert not others, others
    assert 429 in statuses, "the burst was meant to be more than the server can finish within its budget"
    assert 200 in statuses
    refused = [r for r in first if r.status_code == 429]
    for r in refused:
        err = r.json()["error"]
        assert err["code"] == "engine_overloaded" and "budget" in err["message"], err
        assert int(r.headers["retry-after"]) >= 1

    # No work was spent on a refused request: only the admitted ones had their audio decoded
    # and reached the decode loop (their seconds of audio, and no more).
    after = server.metrics()
    admitted = [(name, r) for name, r in zip(jobs, first) if r.status_code == 200]
    prepared = metric(after, "oasr_engine_prepared_total") - metric(before, "oasr_engine_prepared_total")
    assert prepared == len(admitted)
    audio = metric(after, "oasr_audio_seconds_total") - metric(before, "oasr_audio_seconds_total")
    assert audio == pytest.approx(sum(r.json()["duration"] for _, r in admitted), abs=0.01)
    assert metric(after, "oasr_admission_refused_total", reason="deadline") - metric(
        before, "oasr_admission_refused_total", reason="deadline"
    ) == len(refused)

    # The refused clients come back after their Retry-After, as often as they are told to.
    def retry(i: int) -> tuple[int, httpx.Response]:
        name, r, attempts = jobs[i], first[i], 1
        while r.status_code == 429 and attempts < MAX_ATTEMPTS:
            time.sleep(int(r.headers["retry-after"]))
            r = _post(server, name, clips[name], model_dir)
            attempts += 1
        return attempts, r

    again = [i for i, r in enumerate(first) if r.status_code == 429]
    with ThreadPoolExecutor(CLIENTS) as pool:
        final = list(pool.map(retry, again))
    failed = [(attempts, r.status_code, r.text[:300]) for attempts, r in final if r.status_code != 200]
    assert not failed, failed

    # Each text is the clip's text decoded alone (by the engine in this process: the same model and
    # defaults without the server's slowed steps, which would make seven solo decodes the bulk of
    # this test's time).
    solo = solo_texts(model_dir, set(jobs))
    texts = [(name, r.json()["text"]) for name, r in admitted]
    texts += [(jobs[i], r.json()["text"]) for i, (_, r) in zip(again, final)]
    assert len(texts) == CLIENTS
    assert all(text == solo[name] for name, text in texts), [(n, t, solo[n]) for n, t in texts if t != solo[n]]

    end = server.metrics()
    assert metric(end, "oasr_deadline_misses_total") == 0
    assert metric(end, "oasr_requests_total", endpoint="transcriptions", status="504") == 0
    assert metric(end, "oasr_admission_refused_total", reason="deadline") - metric(
        before, "oasr_admission_refused_total", reason="deadline"
    ) == len(refused) + sum(attempts - 2 for attempts, _ in final)  # each retried until its one 200
    assert server.healthy()
