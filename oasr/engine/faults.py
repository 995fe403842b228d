"""Fault injection for the engine's own fault tests (never on unless asked).

``OASR_FAULT_INJECT`` (read when an engine builds its decode strategy) wraps the
strategy so that it fails on purpose, proving that the engine loop survives failures
no validation foresaw. Comma-separated rules:

* ``step:N`` — the N-th ``step`` (counted over the process, rebuilt strategies
  included) raises ``InjectedFault`` once;
* ``abort:N`` — the N-th ``abort`` of a known request raises ``InjectedFault`` once;
* ``poison:S`` — every ``step`` raises ``InjectedFault`` while a request of S seconds
  (to 10 ms) is admitted, so that request fails however it is batched;
* ``kill:N`` — the N-th ``step`` raises ``InjectedCrash``, which is not an
  ``Exception``: it stands for a bug the loop cannot survive (the loop dies);
* ``slow:S`` — every ``step`` that has work takes S seconds more (a sleep before it), so
  that the engine's decode rate has a known ceiling however fast the machine is.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

from oasr.engine.decode.base import DecodeStrategy, Request, StepEvent

ENV = "OASR_FAULT_INJECT"


class InjectedFault(RuntimeError):
    """A failure injected by ``OASR_FAULT_INJECT``."""


class InjectedCrash(BaseException):
    """An injected failure the engine loop is not meant to survive."""


class _Rules:
    def __init__(self, spec: str) -> None:
        self.once: dict[str, set[int]] = {"step": set(), "abort": set(), "kill": set()}
        self.poison: list[float] = []
        self.slow = 0.0
        for rule in filter(None, (r.strip() for r in spec.split(","))):
            kind, _, value = rule.partition(":")
            if kind == "poison":
                self.poison.append(float(value))
            elif kind == "slow":
                self.slow = float(value)
            elif kind in self.once:
                self.once[kind].add(int(value))
            else:
                raise ValueError(f"{ENV}: unknown rule {rule!r} (step:N, abort:N, poison:S, kill:N, slow:S)")
        self.steps = itertools.count(1)
        self.aborts = itertools.count(1)
        self.lock = threading.Lock()


_rules: dict[str, _Rules] = {}


class FaultInjection(DecodeStrategy):
    """A decode strategy that delegates to ``inner`` and fails as its rules say."""

    def __init__(self, inner: DecodeStrategy, rules: _Rules) -> None:  # noqa: D107 - no super(): a wrapper
        self.inner = inner
        self.rules = rules
        self.durations: dict[str, float] = {}

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    @property
    def decode_type(self):  # type: ignore[override]
        return self.inner.decode_type

    @property
    def streams_text(self) -> bool:  # type: ignore[override]
        return self.inner.streams_text

    @property
    def stops_early(self) -> bool:  # type: ignore[override]
        return self.inner.stops_early

    @property
    def prompt_option(self) -> str | None:  # type: ignore[override]
        return self.inner.prompt_option

    @property
    def word_timing_modes(self) -> tuple[str, ...]:
        return self.inner.word_timing_modes

    def validate(self, options):
        return self.inner.validate(options)

    def prepare(self, request: Request) -> Request:
        return self.inner.prepare(request)

    def add_request(self, request: Request) -> None:
        self.inner.add_request(request)
        self.durations[request.request_id] = request.duration

    def step(self) -> list[StepEvent]:
        with self.rules.lock:
            n = next(self.rules.steps)
        if n in self.rules.once["kill"]:
            raise InjectedCrash(f"injected crash at step {n}")
        if n in self.rules.once["step"]:
            raise InjectedFault(f"injected failure at step {n}")
        for rid, seconds in self.durations.items():
            if any(abs(seconds - p) < 0.01 for p in self.rules.poison):
                raise InjectedFault(f"injected failure: request {rid} ({seconds:.2f} s) is poisoned")
        if self.rules.slow and self.inner.num_unfinished():
            time.sleep(self.rules.slow)
        events = self.inner.step()
        for event in events:
            if event.kind in ("finished", "error"):
                self.durations.pop(event.request_id, None)
        return events

    def abort(self, request_id: str) -> bool:
        if request_id in self.durations:
            with self.rules.lock:
                n = next(self.rules.aborts)
            if n in self.rules.once["abort"]:
                raise InjectedFault(f"injected failure in abort {n} ({request_id})")
        self.durations.pop(request_id, None)
        return self.inner.abort(request_id)

    def num_unfinished(self) -> int:
        return self.inner.num_unfinished()

    def stats(self) -> dict[str, float]:
        return self.inner.stats()


def with_faults(strategy: DecodeStrategy) -> DecodeStrategy:
    """``strategy``, wrapped when ``OASR_FAULT_INJECT`` asks for failures."""
    spec = os.environ.get(ENV, "").strip()
    if not spec:
        return strategy
    if spec not in _rules:
        _rules[spec] = _Rules(spec)
    return FaultInjection(strategy, _rules[spec])
