"""One local Ray for all the Ray tests (package scope: started by the first Ray test, stopped
after the last): 127.0.0.1, 2 CPUs (the replicas and actors ask for fractions), no dashboard,
usage stats and token auth off, its temp dir short (Unix socket paths stay under ~107
characters) and removed afterwards."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile

import pytest

ray = pytest.importorskip("ray", reason="the Ray tests need oasr's ray extra")
pytest.importorskip("ray.serve", reason="the Ray tests need ray[serve] (oasr's ray extra)")
pytest.importorskip("ray.data", reason="the Ray tests need ray[data] (oasr's ray extra)")

from oasr.models.bundled import bundled_path  # noqa: E402

MODEL = "whisper-base"
needs_base = pytest.mark.skipif(
    bundled_path(MODEL) is None, reason="whisper-base is not installed (oasr's whisper-base extra)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="package")
def ray_cluster():
    """``ray`` initialised on a fresh local instance; shut down after the package's tests."""
    env = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    temp = tempfile.mkdtemp(prefix="r", dir="/tmp")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=temp,
        log_to_driver=False,
        _system_config={"metrics_report_interval_ms": 1000},  # the replicas' metrics reach the node's port in ~1 s
    )
    try:
        yield ray
    finally:
        try:
            from ray import serve

            serve.shutdown()
        finally:
            ray.shutdown()
            shutil.rmtree(temp, ignore_errors=True)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
