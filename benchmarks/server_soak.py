"""Server soak: RSS drift of ``oasr serve`` over many sequential requests.

    python benchmarks/server_soak.py [--model tiny.en] [--requests 500] [--warmup 50] [--json soak.json]

Starts ``oasr serve --model M`` on a free loopback port, sends ``--requests`` sequential
``POST /v1/audio/transcriptions`` of one short clip (``roots_27_morris_0352.wav``, 1.2 s,
"In a week's journey."), checks every answer is 200 with the same text as the first, and
reads the server's VmRSS (``/proc/<pid>/status``) after ``--warmup`` requests and after
the last. Reports requests / second and the drift of VmRSS from the warm-up point to the
end; exits 1 when it is over ``--max-drift`` (default 10 %).

This is the long version of ``tests/server/test_memory.py::test_rss_stable_over_sequential_requests``
(which runs 40 requests in CI): the 500-request run took about 400 s on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLIP = REPO / "data" / "audio" / "roots_27_morris_0352.wav"  # the repository's own data (data/README.md)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _vmrss_kb(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1))


def main() -> int:
    import httpx

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny.en")
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--warmup", type=int, default=50, help="requests before the first RSS reading")
    p.add_argument("--max-drift", type=float, default=10.0, help="percent of VmRSS growth allowed")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args()
    if not 0 < args.warmup < args.requests:
        p.error("--warmup must be between 0 and --requests")

    port = _free_port()
    cmd = [sys.executable, "-m", "oasr.cli.main", "serve", "--model", args.model]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    server = subprocess.Popen(cmd, cwd=REPO)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if server.poll() is not None:
                print(f"oasr serve exited with code {server.returncode}", file=sys.stderr)
                return 2
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            print("oasr serve did not answer /health within 300 s", file=sys.stderr)
            return 2
        data = CLIP.read_bytes()
        first_text = None
        rss: dict[int, int] = {}
        t0 = time.monotonic()
        for i in range(1, args.requests + 1):
            r = httpx.post(
                base + "/v1/audio/transcriptions",
                files={"file": ("a.wav", data)},
                data={"model": args.model},
                timeout=300,
            )
            if r.status_code != 200:
                print(f"request {i}: {r.status_code} {r.text[:300]}", file=sys.stderr)
                return 1
            text = r.json()["text"]
            first_text = text if first_text is None else first_text
            if text != first_text:
                print(f"request {i}: text {text!r} differs from the first {first_text!r}", file=sys.stderr)
                return 1
            if i in (args.warmup, args.requests):
                rss[i] = _vmrss_kb(server.pid)
        elapsed = time.monotonic() - t0
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    drift = (rss[args.requests] / rss[args.warmup] - 1) * 100
    result = {
        "model": args.model,
        "requests": args.requests,
        "warmup": args.warmup,
        "seconds": round(elapsed, 1),
        "requests_per_s": round(args.requests / elapsed, 2),
        "vmrss_mb_after_warmup": round(rss[args.warmup] / 1024, 1),
        "vmrss_mb_at_end": round(rss[args.requests] / 1024, 1),
        "drift_percent": round(drift, 2),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
    }
    print(json.dumps(result, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0 if abs(drift) <= args.max_drift else 1


if __name__ == "__main__":
    sys.exit(main())
