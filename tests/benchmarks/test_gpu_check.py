"""``benchmarks/gpu_check.py``: a tiny CPU run of every section in a child process where
PyAV, soxr, soundfile, CTranslate2 and FastAPI cannot be imported (as on the GPU machine
it is written for), checked for complete, finite, forced-length figures; and, on a CUDA
machine only, the real Whisper section at batch 1."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu_check.py"
MISSING = ("av", "soxr", "soundfile", "ctranslate2", "fastapi")
TINY_NEW_TOKENS = 8  # the script's --tiny forced length

# Runs the script as __main__ with the packages above made unimportable before anything
# else is imported (``None`` in sys.modules makes ``import x`` raise ImportError).
SHIM = (
    "import runpy, sys\n"
    f"for name in {MISSING!r}:\n"
    "    sys.modules[name] = None\n"
    f"sys.argv = [{str(SCRIPT)!r}] + sys.argv[1:]\n"
    f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
)


def _run_script(tmp_path: Path, *args: str, timeout: float, threads: int = 1) -> tuple[dict, str]:
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run(
        [sys.executable, "-c", SHIM, *args, "--out", str(out), "--workdir", str(tmp_path)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.is_file(), f"no JSON written (rc {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    results = json.loads(out.read_text(encoding="utf-8"))
    errors = {k: v["traceback"] for k, v in results["sections"].items() if v["status"] == "error"}
    assert not errors, "\n".join(f"[{k}]\n{tb}" for k, tb in errors.items())
    assert proc.returncode == 0, proc.stderr[-4000:]
    return results, proc.stdout


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _check_side(side: dict, forced: int | None, *rates: str) -> None:
    assert _positive(side["wall_s"]) and all(_positive(w) for w in side["walls_s"]), side
    for rate in rates:
        assert _positive(side[rate]), (rate, side)
    if forced is not None:
        assert side["generated_tokens_min"] == side["generated_tokens_max"] == forced, side
        assert side["forced_ok"] is True


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[dict, str]:
    return _run_script(tmp_path_factory.mktemp("gpu_check_tiny"), "--tiny", "--device", "cpu", timeout=300)


def test_tiny_run_has_every_section(tiny_run):
    results, stdout = tiny_run
    assert list(results["sections"]) == ["whisper", "ctc", "llm", "accuracy", "streaming"]
    assert all(s["status"] == "ok" for s in results["sections"].values())
    env = results["environment"]
    assert env["device"] == "cpu" and env["torch"] and env["transformers"]
    assert "[whisper] ok" in stdout and "wrote " in stdout


def test_tiny_whisper_figures(tiny_run):
    whisper = tiny_run[0]["sections"]["whisper"]["results"]
    assert whisper["new_tokens"] == TINY_NEW_TOKENS and whisper["batches"] == [1, 2]
    [shape] = whisper["shapes"].values()
    # faster-whisper's budget rule: max_new_tokens=N alone stops near (prompt + N) / 2.
    assert shape["oasr_tokens_with_max_new_tokens_eq_forced"] < TINY_NEW_TOKENS
    assert [run["batch"] for run in shape["runs"]] == [1, 2]
    expected_variants = (
        ["step_graphs=True", "step_graphs=False"] if whisper["engine_config_has_step_graphs"] else ["default"]
    )
    assert whisper["oasr_variants"] == expected_variants
    for run in shape["runs"]:
        assert list(run["oasr"]) == expected_variants
        _check_side(run["transformers"], TINY_NEW_TOKENS, "tokens_per_s", "rtfx")
        for side in run["oasr"].values():
            _check_side(side, TINY_NEW_TOKENS, "tokens_per_s", "rtfx", "ratio_vs_transformers")
        assert _positive(run["best_ratio"]) and isinstance(run["target_met"], bool)


def test_tiny_ctc_figures(tiny_run):
    ctc = tiny_run[0]["sections"]["ctc"]["results"]
    assert set(ctc["families"]) == {"parakeet_ctc_0.6b", "lasr"}
    for family in ctc["families"].values():
        _check_side(family["transformers"], None, "x_real_time")
        _check_side(family["oasr"], None, "x_real_time")
        assert _positive(family["ratio"])
        assert family["shape"]["vocab_size"] in (1025, 512)  # the published vocabularies
        mixed = family["mixed_lengths"]
        for mode in ("padded", "packed"):
            _check_side(mixed[mode], None, "x_real_time")
        assert mixed["packed"]["packed_batches"] >= 1 and mixed["padded"]["packed_batches"] == 0
        assert _positive(mixed["packed_speedup"]) and mixed["same_text"] is True


def test_tiny_llm_figures(tiny_run):
    llm = tiny_run[0]["sections"]["llm"]["results"]
    assert llm["new_tokens"] == TINY_NEW_TOKENS
    assert [run["batch"] for run in llm["runs"]] == [1, 2]
    for run in llm["runs"]:
        _check_side(run["transformers"], TINY_NEW_TOKENS, "tokens_per_s")
        _check_side(run["oasr"], TINY_NEW_TOKENS, "tokens_per_s")
        assert _positive(run["ratio"])


def test_tiny_accuracy_figures(tiny_run):
    """On CPU the half path is bfloat16 (float16 matmuls are not a CPU fast path)."""
    acc = tiny_run[0]["sections"]["accuracy"]["results"]
    assert acc["half_dtype"] == "bfloat16"
    whisper, ctc = acc["whisper"], acc["parakeet_ctc"]
    for key in ("encoder_cosine", "first_step_logits_cosine", "all_steps_logits_cosine"):
        assert 0.99 < whisper[key] <= 1.0 + 1e-9, (key, whisper[key])
    for key in ("encoder_cosine", "log_probs_cosine", "log_probs_centered_cosine"):
        assert 0.99 < ctc[key] <= 1.0 + 1e-9, (key, ctc[key])
    assert 0.5 < whisper["teacher_forced_token_agreement"] <= 1.0
    assert 0.5 < ctc["frame_argmax_agreement"] <= 1.0
    assert set(whisper["targets_met"]) == {
        "encoder_cosine",
        "first_step_logits_cosine",
        "teacher_forced_token_agreement",
    }


def test_tiny_streaming_figures(tiny_run):
    results, stdout = tiny_run
    data = results["sections"]["streaming"]["results"]
    assert data["chunk_ms"] == 80 and data["target_streams"] == 200
    for way in ("batched", "one_stream_loop"):
        runs = data[way]["runs"]
        assert runs and runs[0]["streams"] == 1 and runs[0]["chunks"] > 0, runs
        assert all(r["p95_ms"] >= r["p50_ms"] > 0 for r in runs)
        assert data[way]["capacity"] in (0, *[r["streams"] for r in runs])
    assert data["cache_bytes_per_stream"] > 0
    assert "[streaming] ok" in stdout


@pytest.mark.slow
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_real_whisper_section_at_batch_1(tmp_path):
    results, _ = _run_script(
        tmp_path, "--only", "whisper", "--batches", "1", "--repeats", "1", timeout=900, threads=os.cpu_count() or 1
    )
    whisper = results["sections"]["whisper"]["results"]
    assert whisper["dtype"] == "float16" and set(whisper["shapes"]) == {"base", "small"}
    for shape in whisper["shapes"].values():
        [run] = shape["runs"]
        _check_side(run["transformers"], 100, "tokens_per_s", "rtfx")
        for side in run["oasr"].values():
            _check_side(side, 100, "tokens_per_s", "rtfx", "ratio_vs_transformers")
