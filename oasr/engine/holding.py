"""The base of the engines' post-processing drivers (punctuation, forced alignment): a wrapper
over the strategy driver that hands on its events, except that a request's ``segment`` and
``delta`` events wait for its ``finished`` one, so that the transcripts finished in a step can be
rewritten together before any of their pieces go out."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from oasr.engine.chunking import DriverWrapper
from oasr.engine.decode.base import Request, StepEvent


class HoldingDriver(DriverWrapper):
    """Drives ``inner`` as the engines do; ``take_step`` runs one of its steps and holds each
    request's segments and deltas (``held``) until it finishes.

    Args:
        inner: the driver it wraps (the VAD splitter, or another holding driver).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.held: dict[str, list[StepEvent]] = defaultdict(list)

    def add_request(self, request: Request) -> None:
        self.inner.add_request(request)

    def forget(self, request_id: str) -> None:
        """Drop what is kept for a request that ended without finishing (aborted, failed)."""
        self.held.pop(request_id, None)

    def abort(self, request_id: str) -> bool:
        self.forget(request_id)
        return self.inner.abort(request_id)

    def take_step(self) -> tuple[list[StepEvent], list[StepEvent]]:
        """One step of ``inner``: the events to hand on now, and the ``finished`` events (with an
        output) whose held segments and deltas wait in ``held``."""
        events: list[StepEvent] = []
        finished: list[StepEvent] = []
        for event in self.inner.step():
            if event.kind in ("segment", "delta"):
                self.held[event.request_id].append(event)
            elif event.kind == "finished" and event.output is not None:
                finished.append(event)
            else:
                if event.kind == "error":
                    self.forget(event.request_id)
                events.append(event)
        return events, finished


__all__ = ["HoldingDriver"]
