"""Honest admission behind Ray Serve's proxy (``oasr.serving.ray``): a burst larger than two
replicas can finish within ``--request-timeout`` gets only 200s and 429s, each 429 a replica's
own (its ``Retry-After``, OpenAI's error body, the ``x-oasr-replica`` header: the proxy held
nothing back in a queue of its own), and clients that come back after ``Retry-After`` all
get the text their clip gives alone.

The replicas serve the tiny random Whisper of the server fault suite with every engine step
0.3 s slower (``OASR_FAULT_INJECT=slow:0.3``), as ``tests/server/test_admission.py`` does in
one process: a known ceiling on each replica's decode rate on any machine."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ..server._fault_helpers import ONE_PASS_CLIPS, data_clips, fault_model_dir, solo_texts
from .conftest import free_port

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.slow]

APP = "oasr-admission"
TIMEOUT_S = 10.0
CLIENTS = 12
MAX_ATTEMPTS = 60


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return fault_model_dir(tmp_path_factory, "ray_admission_model")


@pytest.fixture(scope="module")
def clips() -> dict[str, bytes]:
    return data_clips(ONE_PASS_CLIPS)


@pytest.fixture(scope="module")
def base(ray_cluster, model_dir):
    from ray import serve

    from oasr.serving.ray import build_app

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    app = build_app(
        str(model_dir),
        num_replicas=2,
        num_cpus=0.5,
        num_threads=1,
        log_level="warning",
        request_timeout_s=TIMEOUT_S,
        metrics_interval_s=0,
        ray_actor_options={"runtime_env": {"env_vars": {"OASR_FAULT_INJECT": "slow:0.3"}}},
    )
    serve.run(app, name=APP, route_prefix="/")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.delete(APP)
        serve.shutdown()  # the next module starts Serve again, on a port of its own


def _post(base: str, name: str, data: bytes, model: str) -> httpx.Response:
    return httpx.post(
        base + "/v1/audio/transcriptions", files={"file": (name, data)}, data={"model": model}, timeout=300
    )


def test_a_burst_through_the_proxy_gets_each_replicas_early_429s_and_the_retries_succeed(base, model_dir, clips):
    model = str(model_dir)
    names = sorted(clips)
    jobs = [names[i % len(names)] for i in range(CLIENTS)]
    with ThreadPoolExecutor(CLIENTS) as pool:
        first = list(pool.map(lambda name: _post(base, name, clips[name], model), jobs))
    statuses = [r.status_code for r in first]
    others = [(r.status_code, r.text[:200]) for r in first if r.status_code not in (200, 429)]
    assert not others, others
    assert 429 in statuses, "the burst was meant to be more than two replicas finish within the budget"
    for r in first:
        assert r.headers.get("x-oasr-replica"), "every answer, 429 included, comes from a replica"
        if r.status_code == 429:
            assert r.json()["error"]["code"] == "engine_overloaded" and int(r.headers["retry-after"]) >= 1

    def retry(i: int) -> httpx.Response:
        r, attempts = first[i], 1
        while r.status_code == 429 and attempts < MAX_ATTEMPTS:
            time.sleep(int(r.headers["retry-after"]))
            r = _post(base, jobs[i], clips[jobs[i]], model)
            attempts += 1
        return r

    with ThreadPoolExecutor(CLIENTS) as pool:
        final = list(pool.map(retry, range(CLIENTS)))
    failed = [(r.status_code, r.text[:300]) for r in final if r.status_code != 200]
    assert not failed, failed
    assert len({r.headers["x-oasr-replica"] for r in final}) == 2
    solo = solo_texts(model_dir, names)  # decoded alone, without the replicas' slowed steps
    mismatched = [(name, r.json()["text"]) for name, r in zip(jobs, final) if r.json()["text"] != solo[name]]
    assert not mismatched, mismatched
