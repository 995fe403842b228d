"""``oasr serve --ray`` as a user runs it: a subprocess that starts its own local Ray, deploys
one tiny.en replica with the server flags (here an API key), answers through Ray Serve's proxy,
and on SIGTERM deletes the app and exits 0."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from oasr.models.bundled import bundled_path

from .conftest import free_port

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

needs_tiny = pytest.mark.skipif(
    bundled_path("tiny.en") is None, reason="tiny.en is not installed (oasr's whisper-tiny-en extra)"
)
pytestmark = [pytest.mark.real_weights, pytest.mark.slow, needs_tiny]

REPO = Path(__file__).resolve().parents[2]


def test_oasr_serve_ray_serves_with_the_server_flags_and_stops_on_sigterm(audio_dir, tmp_path):
    port = free_port()
    temp = tempfile.mkdtemp(prefix="r", dir="/tmp")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", RAY_TMPDIR=temp)
    cmd = [sys.executable, "-m", "oasr.cli.main", "serve", "--ray", "--replicas", "1"]
    cmd += ["--num-cpus-per-replica", "0.5", "--threads", "1", "--model", "tiny.en", "--port", str(port)]
    cmd += ["--api-key", "k", "--log-level", "warning"]
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        url = f"http://127.0.0.1:{port}/v1/audio/transcriptions"
        files = {"file": ("jfk.wav", (audio_dir / "jfk.wav").read_bytes())}
        assert httpx.post(url, files=files, data={"model": "tiny.en"}, timeout=120).status_code == 401
        r = httpx.post(url, files=files, data={"model": "tiny.en"}, headers={"Authorization": "Bearer k"}, timeout=120)
        assert r.status_code == 200 and "ask not what your country" in r.json()["text"].lower(), r.text
        assert r.headers["x-oasr-replica"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text(errors="replace")[-3000:]
        ready = f"oasr serve: ready at http://127.0.0.1:{port} (models: tiny.en; API key: on; device: "
        assert ready in log.read_text(errors="replace") and "1 replica on Ray Serve)" in log.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        shutil.rmtree(temp, ignore_errors=True)
