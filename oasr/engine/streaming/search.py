"""Stream searches: decoding carried across chunks, for many streams at once.

A ``StreamSearch`` turns each chunk of encoder output into a growing hypothesis per stream
(one call for every stream advanced in a step, so the head / joiner run batched), reports
the trailing blank frames the endpoint rules read, and at an endpoint or at the end of a
stream gives the segment's best result (WeNet's second pass, attention rescoring, runs
there). Searches are registered by decode type, lazily (``"module:Class"``), so a new
decode family streams by adding a module and a line here.
"""

from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass, field
from typing import Any

import torch

from oasr.engine.config import TranscribeOptions

__all__ = ["Hypothesis", "StreamSearch", "build_stream_search", "register_stream_search"]


@dataclass
class Hypothesis:
    """A segment's tokens with the encoder frame (from the segment's start) each was emitted at.

    Attributes:
        tokens: token ids (no blank, no special ids).
        frames: encoder frame of each token (same length).
        probs: each token's probability where the search knows it (else empty).
        score: the search's score of the hypothesis.
    """

    tokens: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0


class StreamSearch(abc.ABC):
    """The decoding of one decode type for all the streams of an engine.

    Args:
        model: the loaded model.
        blank_id, skip_ids: ids that are not text.
        params: the checkpoint's decoding params (``DecodingSpec.params``).
    """

    def __init__(self, model: Any, blank_id: int, skip_ids: frozenset[int], params: dict[str, Any]) -> None:
        self.model = model
        self.blank_id = blank_id
        self.skip_ids = skip_ids
        self.params = params

    @abc.abstractmethod
    def new_state(self, options: TranscribeOptions) -> Any:
        """A fresh per-stream search state (options already validated by the strategy)."""

    @abc.abstractmethod
    def advance(self, states: list[Any], enc: torch.Tensor, lens: torch.Tensor) -> None:
        """Consume one chunk of encoder output per stream, updating ``states`` in place.

        Shapes:
            enc: (B, T', D), lens: (B,) valid frames per row (rows are ``states``' streams)
        """

    @abc.abstractmethod
    def partial(self, state: Any) -> Hypothesis:
        """The current best hypothesis of the segment (cheap: called after every chunk)."""

    @abc.abstractmethod
    def trailing_blanks(self, state: Any) -> int:
        """Encoder frames since the segment's last emitted token (all of them when none)."""

    @abc.abstractmethod
    def frames(self, state: Any) -> int:
        """Encoder frames the segment has consumed."""

    @abc.abstractmethod
    def finalize(self, state: Any) -> Hypothesis:
        """The segment's final result (a second pass where the family has one)."""

    @abc.abstractmethod
    def reset(self, state: Any) -> None:
        """Start a new segment (after an endpoint): the decoder's history is cleared."""


_SEARCHES: dict[str, str] = {
    "ctc": "oasr.engine.streaming.ctc:CtcStreamSearch",
    "ctc_aed_rescoring": "oasr.engine.streaming.ctc:CtcRescoringStreamSearch",
    "transducer": "oasr.engine.streaming.transducer:TransducerStreamSearch",
    "llm": "oasr.engine.streaming.redecode:RedecodeStreamSearch",
}


def register_stream_search(decode_type: str, ref: str) -> None:
    """Name the stream search (``"module:Class"``) of a decode type (out-of-tree families)."""
    _SEARCHES[str(decode_type)] = ref


def stream_search_class(decode_type: str) -> type[StreamSearch]:
    ref = _SEARCHES.get(str(decode_type))
    if ref is None:
        raise ValueError(
            f"the {str(decode_type)!r} decoding does not stream; streaming decode types: {sorted(_SEARCHES)}"
        )
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def build_stream_search(
    decode_type: str, model: Any, blank_id: int, skip_ids: frozenset[int], params: dict
) -> StreamSearch:
    return stream_search_class(decode_type)(model, blank_id, skip_ids, params)
