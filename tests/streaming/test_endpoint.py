"""Endpoint rules: sherpa-onnx's three, with its defaults."""

from __future__ import annotations

import pytest

from oasr.engine.streaming import EndpointConfig


def test_rule1_silence_without_text():
    ep = EndpointConfig()
    assert not ep.detect(False, 2.39, 2.39)
    assert ep.detect(False, 2.4, 2.4)


def test_rule2_silence_after_text():
    ep = EndpointConfig()
    assert not ep.detect(True, 1.19, 5.0)
    assert ep.detect(True, 1.2, 5.0)
    assert not ep.detect(False, 1.2, 5.0)  # no text: rule 1's 2.4 s applies


def test_rule3_longest_utterance():
    ep = EndpointConfig(rule3_min_utterance_length=20.0)
    assert not ep.detect(True, 0.0, 19.9)
    assert ep.detect(True, 0.0, 20.0)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "2", True])
def test_bad_rule_values_are_refused(bad):
    with pytest.raises(ValueError, match="rule1_min_trailing_silence"):
        EndpointConfig(rule1_min_trailing_silence=bad)
