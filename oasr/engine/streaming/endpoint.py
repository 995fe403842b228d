"""Endpointing: when a live stream's utterance is over (sherpa-onnx's three rules).

A rule fires when the trailing silence (encoder frames since the last emitted token, in
seconds) and the utterance length both reach its minimums, and, if the rule says so, the
utterance has decoded some text. sherpa-onnx's defaults:

- rule 1: 2.4 s of silence, text or not (nobody spoke: start over);
- rule 2: 1.2 s of silence after some text (the end of a sentence);
- rule 3: 20 s of utterance, whatever it holds (a bound on a segment's length).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EndpointConfig", "EndpointRule"]


@dataclass(frozen=True)
class EndpointRule:
    """One rule: fires when each minimum is reached (0 disables a minimum).

    Attributes:
        must_contain_nonsilence: the utterance must have decoded at least one token.
        min_trailing_silence: seconds since the last token (or the segment's start).
        min_utterance_length: seconds of the segment.
    """

    must_contain_nonsilence: bool
    min_trailing_silence: float
    min_utterance_length: float

    def fires(self, has_text: bool, trailing_s: float, utterance_s: float) -> bool:
        if self.must_contain_nonsilence and not has_text:
            return False
        return trailing_s >= self.min_trailing_silence and utterance_s >= self.min_utterance_length


@dataclass(frozen=True)
class EndpointConfig:
    """sherpa-onnx's three rules (``rule1_min_trailing_silence`` etc. are its option names).

    Attributes:
        rule1_min_trailing_silence: silence that ends a segment without text.
        rule2_min_trailing_silence: silence that ends a segment with text.
        rule3_min_utterance_length: the longest segment.
    """

    rule1_min_trailing_silence: float = 2.4
    rule2_min_trailing_silence: float = 1.2
    rule3_min_utterance_length: float = 20.0

    def __post_init__(self) -> None:
        for name in ("rule1_min_trailing_silence", "rule2_min_trailing_silence", "rule3_min_utterance_length"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or value != value:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")

    @property
    def rules(self) -> tuple[EndpointRule, ...]:
        return (
            EndpointRule(False, self.rule1_min_trailing_silence, 0.0),
            EndpointRule(True, self.rule2_min_trailing_silence, 0.0),
            EndpointRule(False, 0.0, self.rule3_min_utterance_length),
        )

    def detect(self, has_text: bool, trailing_s: float, utterance_s: float) -> bool:
        """Whether any rule fires."""
        return any(r.fires(has_text, trailing_s, utterance_s) for r in self.rules)
