"""``oasr bench --contention``: each timed child quiet, then beside competitors at the asked
priority (alive during the contended child only), the slowdown per round, and a workload
competitor that runs its command again and again."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import pytest

from oasr.cli import bench, bench_contention
from oasr.cli.main import build_parser


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("level", ["normal", "low"])
def test_each_child_runs_quiet_then_beside_competitors(audio_dir, monkeypatch, level):
    seen: list[tuple[str, list[int]]] = []
    spinners: list[int] = []
    orig = bench_contention.competitors

    def watched(*args, **kwargs):
        with orig(*args, **kwargs) as procs:
            spinners.extend(p.pid for p in procs)
            yield procs

    def fake_child(spec: dict, timeout_s: float) -> dict:
        live = [pid for pid in spinners if _alive(pid)]
        seen.append((spec["system"], [os.getpriority(os.PRIO_PROCESS, pid) for pid in live]))
        wall = 3.0 if live else 1.0
        return {"wall_s": wall, "tokens": 10, "peak_rss_mb": 1.0, "load_s": 0.1, "texts": ["x"]}

    monkeypatch.setattr(bench_contention, "competitors", contextlib.contextmanager(watched))
    monkeypatch.setattr(bench, "run_child", fake_child)
    argv = ["bench", "--workload", "short", "--peer", "none", "--rounds", "2", "--threads", "1"]
    argv += ["--contention", level, "--competitor", "spin", "--competitors", "2", "--audio-dir", str(audio_dir)]
    report = bench.run_benchmark(build_parser().parse_args(argv))
    nice = [bench_contention.LOW_NICE if level == "low" else os.getpriority(os.PRIO_PROCESS, 0)] * 2
    assert seen == [("oasr", []), ("oasr", nice)] * 2  # quiet, then beside two competitors, each round
    assert not any(_alive(pid) for pid in spinners)  # stopped after each contended child
    [result] = report["results"]
    assert [r["slowdown"] for r in result["runs"]] == [3.0, 3.0]
    assert report["settings"]["contention"] == level
    table = bench_contention.slowdown_table(report)
    assert "| short | 8 | oasr | 1.00 | 3.00 | 3.00x [3.00-3.00] |" in table
    json.dumps(report)


def test_no_contention_runs_each_child_once(monkeypatch):
    calls = []
    args = build_parser().parse_args(["bench"])
    assert args.contention == "none"
    out = bench_contention.run_contended(args, {"x": 1}, lambda s: calls.append(s) or {"wall_s": 1.0}, ([], {}))
    assert calls == [{"x": 1}] and "slowdown" not in out
    assert bench_contention.slowdown_table({"settings": {}, "results": []}) == ""


def test_workload_competitor_repeats_its_command(tmp_path):
    marks = tmp_path / "marks"
    cmd = [sys.executable, "-c", f"import sys; open({str(marks)!r}, 'a').write(sys.stdin.read())"]
    job = {"cmd": cmd, "env": dict(os.environ), "input": "x"}
    command = [sys.executable, "-m", "oasr.cli.bench_contention"]
    with bench_contention.competitors("low", 1, command, json.dumps(job)) as [proc]:
        deadline = time.monotonic() + 30
        while (not marks.exists() or len(marks.read_text()) < 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None
    assert len(marks.read_text()) >= 2  # run again after it ended
    assert proc.poll() is not None  # and stopped with the block
