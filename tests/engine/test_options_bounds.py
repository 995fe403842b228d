"""Integer options refuse floats, and every decode strategy bounds ``beam_size`` (one bound,
``StrategyOptions.max_beam_size``, read by every surface: Python, CLI, HTTP, WebSocket)."""

from __future__ import annotations

import math

import pytest

from oasr.engine.config import MAX_BEAM_SIZE, TranscribeOptions
from oasr.engine.decode.registry import decode_strategy_class, strategies_taking

BEAM_STRATEGIES = strategies_taking("beam_size")


def test_the_builtin_beam_strategies_are_covered():
    assert {"aed", "ctc", "ctc_aed_rescoring", "transducer"} <= set(BEAM_STRATEGIES)


@pytest.mark.parametrize("strategy", BEAM_STRATEGIES)
def test_every_strategy_bounds_its_beam(strategy):
    options_class = decode_strategy_class(strategy).options_class
    bound = options_class.max_beam_size
    assert 1 < bound <= MAX_BEAM_SIZE
    assert options_class.resolve(TranscribeOptions(beam_size=bound), strategy).beam_size == bound
    for wide in (bound + 1, 1000, 10**9):
        with pytest.raises(ValueError, match=f"beam_size={wide}: the '{strategy}' decoding takes beams of at most"):
            options_class.resolve(TranscribeOptions(beam_size=wide), strategy)


@pytest.mark.parametrize("value", [math.inf, 2.5, 5.0, "5", True, [5]])
def test_integer_options_refuse_what_is_not_an_integer(value):
    for name in ("beam_size", "best_of", "max_new_tokens", "max_sym_per_frame", "top_k"):
        with pytest.raises(ValueError, match=f"{name} must be an integer"):
            TranscribeOptions(**{name: value})


def test_python_and_cli_refuse_a_beam_over_the_bound(tmp_path):
    import subprocess
    import sys

    from oasr.engine.engine import ASREngine
    from tests.conftest import AUDIO_DIR, FIXTURES_DIR
    from tests.server.conftest import REPO_ROOT

    model = FIXTURES_DIR / "wenet-u2pp-tiny-causal"
    if not (model / "train.yaml").is_file():
        pytest.skip(f"fixture not found at {model}")
    engine = ASREngine(str(model))
    with pytest.raises(ValueError, match=f"takes beams of at most {MAX_BEAM_SIZE}"):
        engine.transcribe(str(AUDIO_DIR / "jfk.wav"), beam_size=MAX_BEAM_SIZE + 1)
    with pytest.raises(ValueError, match=f"takes beams of at most {MAX_BEAM_SIZE}"):
        engine.open_stream(beam_size=1000)
    argv = ["transcribe", str(AUDIO_DIR / "jfk.wav"), "--model", str(model), "--beam-size", "1000"]
    run = subprocess.run(
        [sys.executable, "-m", "oasr.cli.main", *argv], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 2, run.stderr
    assert "takes beams of at most" in run.stderr


def test_the_help_states_the_bound():
    import argparse

    from oasr.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in ("transcribe", "serve", "stream"):
        flag = next(a for a in sub.choices[command]._actions if a.dest == "beam_size")
        assert f"at most {MAX_BEAM_SIZE}" in flag.help
