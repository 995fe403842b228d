"""``oasr bench --contention``: each timed run once on its own and once beside competing processes.

With ``--contention normal`` or ``low`` every timed child of ``oasr bench`` runs twice in a row
in its round: quiet, then with ``--competitors`` competing processes started before it and
stopped after it, at normal priority or at ``nice 19``. The result reported is the contended
run; beside it, ``quiet_wall_s`` and ``slowdown`` (contended wall / quiet wall of the same
round), so the slowdown of each side is measured back to back, whatever else the machine does.

A competitor is a copy of the timed workload run again and again (``--competitor workload``:
the same child spec, the same threads: what a second user of the machine would run), or a
pure-Python spin loop (``--competitor spin``: one busy core each).

Only the standard library at module level, as ``bench.py`` (its children must not import torch).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any

LEVELS = ("none", "normal", "low")
LOW_NICE = 19
# A busy core from a pure-Python loop; nothing is imported, nothing is allocated.
SPIN = "while True: pass"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from oasr.cli.common import positive_int

    g = parser.add_argument_group("contention")
    g.add_argument(
        "--contention",
        choices=LEVELS,
        default="none",
        help="time each run also beside competing processes at normal priority or nice 19 (default none)",
    )
    g.add_argument("--competitors", type=positive_int, default=1, metavar="N", help="competing processes (default 1)")
    g.add_argument(
        "--competitor",
        choices=("workload", "spin"),
        default="workload",
        help="what each competitor runs: the timed workload again and again, or a Python spin loop (default workload)",
    )


def _repeat_main() -> int:
    """A competitor running the timed child's command again and again until it is stopped
    (a JSON ``{"cmd", "env", "input"}`` on stdin)."""
    job = json.loads(sys.stdin.read())
    while True:
        subprocess.run(job["cmd"], input=job["input"], env=job["env"], capture_output=True, text=True, check=False)


@contextmanager
def competitors(level: str, count: int, command: Sequence[str], stdin: str | None = None):
    """``count`` processes running ``command`` (its ``stdin`` given to each), at normal priority
    or ``nice 19``, alive for the ``with`` block; each leads its own process group, which is
    stopped at the end (its children with it). They stay in this session: with the kernel's
    autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) a new session is a new
    scheduling group, weighed equally with ours whatever its nice value, so ``nice 19`` in a
    session of its own competed like normal priority."""
    procs: list[subprocess.Popen] = []

    def own_group() -> None:
        os.setpgid(0, 0)
        if level == "low":
            os.nice(LOW_NICE)

    try:
        for _ in range(count):
            p = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                text=True,
                preexec_fn=own_group,
            )
            if stdin is not None:
                p.stdin.write(stdin)
            p.stdin.close()
            procs.append(p)
        yield procs
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _competitor_command(args: argparse.Namespace, child: Sequence[str], spec: dict, env: dict) -> tuple[list, str]:
    if args.competitor == "spin":
        return [sys.executable, "-c", SPIN], None
    job = {"cmd": list(child), "env": env, "input": json.dumps(spec)}
    return [sys.executable, "-m", "oasr.cli.bench_contention"], json.dumps(job)


def run_contended(
    args: argparse.Namespace,
    spec: dict,
    run_child: Callable[[dict], dict],
    child: tuple[Sequence[str], dict],
) -> dict:
    """``run_child(spec)`` as ``--contention`` asks: once (``none``), or quiet then beside the
    competitors, returning the contended result with ``quiet_wall_s`` and ``slowdown``.

    Args:
        child: the timed child's command and environment (what a ``workload`` competitor runs).
    """
    if args.contention == "none":
        return run_child(spec)
    quiet = run_child(spec)
    command, stdin = _competitor_command(args, child[0], spec, child[1])
    with competitors(args.contention, args.competitors, command, stdin):
        result = run_child(spec)
    result["quiet_wall_s"] = quiet["wall_s"]
    result["slowdown"] = result["wall_s"] / quiet["wall_s"]
    return result


def settings(args: argparse.Namespace) -> dict[str, Any]:
    if args.contention == "none":
        return {"contention": "none"}
    return {"contention": args.contention, "competitors": args.competitors, "competitor": args.competitor}


def slowdown_table(report: dict) -> str:
    """A markdown table of each system's slowdown (median [min-max] over the rounds), or ""."""
    s = report["settings"]
    if s.get("contention", "none") == "none":
        return ""
    rows = [
        f"\nContention: {s['competitors']} x {s['competitor']} at "
        f"{'nice ' + str(LOW_NICE) if s['contention'] == 'low' else 'normal priority'}; slowdown = contended wall "
        "/ quiet wall of the same round.\n",
        "| compute | threads | workload | batch | system | quiet wall s | contended wall s | slowdown |",
        "|---|---:|---|---:|---|---:|---:|---:|",
    ]
    for r in report["results"]:
        runs = r["runs"]
        slow = [x["slowdown"] for x in runs]
        quiet = statistics.median(x["quiet_wall_s"] for x in runs)
        loaded = statistics.median(x["wall_s"] for x in runs)
        rows.append(
            f"| {r.get('compute_type', '-')} | {r.get('threads', '-')} | {r['workload']} | {r['batch_size']} "
            f"| {r['system']} | {quiet:.2f} | {loaded:.2f} | "
            f"{statistics.median(slow):.2f}x [{min(slow):.2f}-{max(slow):.2f}] |"
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # a workload competitor, started by run_contended
    sys.exit(_repeat_main())
