"""``oasr serve`` in a subprocess for the serving benchmarks (serve_bench.py, burst_bench.py)."""

from __future__ import annotations

import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """``cmd`` (an ``oasr serve`` command line listening on ``port``) run until ``stop``, once its
    ``/health`` answers ok; its output goes to ``log``.

    It runs from a neutral directory, not the checkout: ``python -m`` puts the working directory
    first on ``sys.path``, ahead of ``PYTHONPATH``, and would otherwise always run this checkout's oasr.
    """

    def __init__(self, cmd: list[str], port: int, log: Path, start_timeout_s: float = 600.0) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=tempfile.gettempdir())
        import httpx

        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the server did not start:\n{log.read_text()[-3000:]}")

    def peak_rss_mb(self) -> float | None:
        """The server's peak resident set so far (``VmHWM``, MiB); None where /proc has none."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
        except (OSError, StopIteration):
            return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
