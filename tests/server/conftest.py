"""Fixtures of the server tests: real ``oasr serve`` subprocesses on 127.0.0.1, the
official ``openai`` client and httpx pointed at them, and an in-process reference
engine with the server's decoding defaults."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from oasr.models.bundled import bundled_path  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY = "tiny.en"
# The shared tiny.en server is started with `--beam-size 1` (greedy: fast); every other option is
# the Whisper strategy's own default (fallback on, best_of 5), as in-process.
SERVER_DEFAULTS = {"beam_size": 1}

needs_tiny = pytest.mark.skipif(
    bundled_path(TINY) is None, reason="tiny.en is not installed (oasr's whisper-tiny-en extra)"
)
needs_base = pytest.mark.skipif(
    bundled_path("whisper-base") is None, reason="whisper-base is not installed (oasr's whisper-base extra)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``python -m oasr.cli.main serve ARGS --port <free>`` until ``stop()``."""

    def __init__(self, args: list[str], log_path: Path, api_key: str | None = None, startup_s: float = 120.0):
        self.args = args
        self.log_path = log_path
        self.api_key = api_key
        self.proc: subprocess.Popen | None = None
        for attempt in range(3):
            self.port = _free_port()
            self._start(startup_s)
            if self.proc is not None and self.proc.poll() is None:
                return
            if "address already in use" not in self.log().lower() or attempt == 2:
                raise RuntimeError(f"oasr serve did not start:\n{self.log()[-4000:]}")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _start(self, startup_s: float) -> None:
        cmd = [sys.executable, "-m", "oasr.cli.main", "serve", *self.args, "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port), "--log-level", "warning"]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env)
        deadline = time.monotonic() + startup_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"oasr serve did not answer /health within {startup_s} s:\n{self.log()[-4000:]}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    # -- helpers for the tests ------------------------------------------------------------------

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, **kw):
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 300)
        return openai.OpenAI(base_url=self.base_url + "/v1", api_key=self.api_key or "unused", **kw)

    def async_client(self, **kw):
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 300)
        return openai.AsyncOpenAI(base_url=self.base_url + "/v1", api_key=self.api_key or "unused", **kw)

    def post_audio(self, files=None, data=None, route: str = "transcriptions", timeout: float = 300, **kw):
        return httpx.post(
            f"{self.base_url}/v1/audio/{route}",
            files=files,
            data=data,
            headers={**self.headers(), **kw.pop("headers", {})},
            timeout=timeout,
            **kw,
        )

    def healthy(self) -> bool:
        """Whether /health answers 200."""
        return httpx.get(self.base_url + "/health", timeout=10).status_code == 200

    def metrics(self) -> dict[str, float]:
        """``{'name{label="v",...}': value}`` of every sample on /metrics (labels sorted)."""
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(self.base_url + "/metrics", timeout=10).text
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
        return out

    def reset_peak(self) -> bool:
        """Reset VmHWM to the current VmRSS (Linux ``clear_refs`` 5); False if not allowed."""
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        except OSError:
            return False
        return True

    def memory_kb(self) -> dict[str, int]:
        """VmRSS / VmHWM of the server process, in kB."""
        out = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            m = re.match(r"(VmRSS|VmHWM):\s+(\d+) kB", line)
            if m:
                out[m.group(1)] = int(m.group(2))
        return out


def metric(m: dict[str, float], name: str, **labels: str) -> float:
    key = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")
    return m.get(key, 0.0)


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory):
    """The shared tiny.en server (served as "tiny.en" and "whisper-1")."""
    if bundled_path(TINY) is None:
        pytest.skip("tiny.en is not installed")
    log = tmp_path_factory.mktemp("server") / "tiny.log"
    server = ServerProcess(
        ["--model", TINY, "--served-model-name", TINY, "whisper-1", "--max-queue", "256", "--max-upload-mb", "64"]
        + ["--beam-size", str(SERVER_DEFAULTS["beam_size"])],
        log,
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def reference():
    """The in-process engine the server's answers are compared with."""
    if bundled_path(TINY) is None:
        pytest.skip("tiny.en is not installed")
    import oasr

    return oasr.ASREngine(TINY, device="cpu")


@pytest.fixture(scope="session")
def clip(audio_dir):
    """``clip(name) -> Path`` of a data/audio file."""

    def get(name: str) -> Path:
        path = audio_dir / name
        if not path.exists():
            pytest.skip(f"{name} is not in data/audio")
        return path

    return get


def wav_bytes(samples, rate: int = 16000, channels: int = 1) -> bytes:
    """16-bit PCM WAV of float samples in [-1, 1] (``(n,)`` or ``(n, channels)``)."""
    import io
    import wave

    import numpy as np

    pcm = (np.clip(np.asarray(samples, dtype=np.float64), -1, 1) * 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def float_wav(samples, rate: int = 16000) -> bytes:
    """32-bit IEEE-float mono WAV (WAVE_FORMAT_IEEE_FLOAT, which can carry NaN / inf samples)."""
    import struct

    import numpy as np

    data = np.asarray(samples, dtype="<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body
