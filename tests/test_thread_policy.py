"""oasr shortens how long idle OpenMP workers spin (GOMP_SPINCOUNT) unless the user chose a wait
policy: workers spinning for libgomp's default 300,000 rounds slow oasr several-fold beside other
busy processes."""

from __future__ import annotations

import os
import subprocess
import sys

_CLEAN = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}


def _spincount(env: dict[str, str]) -> str:
    code = "import oasr, os; print(os.environ.get('GOMP_SPINCOUNT'))"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


def test_importing_oasr_shortens_the_spin():
    assert _spincount(_CLEAN).strip() == "10000"


def test_a_policy_the_user_set_is_kept():
    assert _spincount({**_CLEAN, "GOMP_SPINCOUNT": "5"}).strip() == "5"
    assert _spincount({**_CLEAN, "OMP_WAIT_POLICY": "ACTIVE"}).strip() == "None"
