"""The request table every built-in decode strategy keeps: written once here.

A ``RequestTable`` strategy holds its admitted requests by id (``requests``), one
``TableEntry`` each (a strategy subclasses it with its own per-request state), and does the
bookkeeping that does not depend on how the strategy decodes:

* ``add_request``: refuses a duplicate id, prepares the request if ``prepare`` was not run
  off the loop, builds its entry (``_new_entry``), files it, and hands it to ``_enqueue``;
* ``abort``: drops a known request wherever it is (``_retire``, then ``_forget`` to take it
  out of the strategy's queues and running batches, under inference mode);
* ``_fail``: drops a request whose decode raised and reports it as an ``error`` event;
* ``_complete``: drops a finished request and reports its ``finished`` event;
* ``stats``: the gauges the engine's metrics read (``running_rows``, ``waiting_tasks``)
  and the strategy's typed counters (``DecodeCounters`` or a subclass), under the names
  ``AsyncEngine`` and the Prometheus collector read (``joins_running``, ...).

A request leaves the table exactly once (finished, failed or aborted); ``_retire`` marks its
entry ``done`` so work still queued for it is skipped, and releases what it holds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import torch

from oasr.engine.config import EngineConfig, TranscribeOptions
from oasr.engine.decode.base import DecodeStrategy, Request, StepEvent
from oasr.engine.outputs import RequestOutput
from oasr.models.loaders import LoadedModel


@dataclass
class DecodeCounters:
    """Cumulative counters of a strategy (``stats()`` reports each under its field name).

    Attributes:
        requests_finished / requests_failed / requests_aborted: requests that left the table.
        joins_running: decode tasks that joined a decode batch already running (continuous
            batching at work; the server's ``oasr_decode_joins_running_total``).
    """

    requests_finished: int = 0
    requests_failed: int = 0
    requests_aborted: int = 0
    joins_running: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class TableEntry:
    """One admitted request in the table (a strategy subclasses it with its own state).

    Attributes:
        request: the request as admitted (``features`` set by ``prepare``).
        opts: its validated options.
        done: it left the table; queued work for it is skipped.
    """

    request: Request
    opts: TranscribeOptions
    done: bool = field(default=False, kw_only=True)

    @property
    def rid(self) -> str:
        return self.request.request_id


E = TypeVar("E", bound=TableEntry)


class RequestTable(DecodeStrategy, Generic[E]):
    """A decode strategy's request bookkeeping (see the module); subclasses implement
    ``_new_entry``, ``_enqueue``, ``step`` and the two gauges, and may extend ``_release``
    (what a leaving entry gives back) and ``_forget`` (an aborted entry's queued work)."""

    counters_class: ClassVar[type[DecodeCounters]] = DecodeCounters
    """The typed counters this strategy keeps (a subclass of ``DecodeCounters`` adds its own)."""

    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        super().__init__(loaded, config)
        self.requests: dict[str, E] = {}
        self.counters = self.counters_class()

    # -- what a strategy supplies -------------------------------------------------------

    def _new_entry(self, request: Request) -> E:
        """The table entry of a prepared request."""
        raise NotImplementedError

    def _enqueue(self, entry: E) -> None:
        """Queue a filed entry's first work (it may finish the request at once)."""
        raise NotImplementedError

    def _release(self, entry: E) -> None:
        """Give back what a leaving entry holds (its features, ...)."""

    def _forget(self, entry: E) -> None:
        """Take an aborted entry out of the strategy's queues and running batches now, not
        at the next step (runs under inference mode: the K/V pools were written under it)."""

    def _running_rows(self) -> int:
        return 0

    def _waiting_tasks(self) -> int:
        return 0

    def _extra_stats(self) -> dict[str, Any]:
        """Strategy gauges reported beside the counters (queue lengths, step-graph counts)."""
        return {}

    # -- the table ----------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        if request.features is None:
            self.prepare(request)
        entry = self._new_entry(request)
        self.requests[entry.rid] = entry
        self._enqueue(entry)

    def abort(self, request_id: str) -> bool:
        entry = self.requests.pop(request_id, None)
        if entry is None:
            return False
        self._retire(entry)
        self.counters.requests_aborted += 1
        with torch.inference_mode():
            self._forget(entry)
        return True

    def num_unfinished(self) -> int:
        return len(self.requests)

    def stats(self) -> dict[str, float]:
        return {
            "running_rows": self._running_rows(),
            "waiting_tasks": self._waiting_tasks(),
            **self._extra_stats(),
            **self.counters.as_dict(),
        }

    def _retire(self, entry: E) -> None:
        entry.done = True
        self._release(entry)

    def _remove(self, entry: E) -> bool:
        """Take a live entry out of the table and retire it; False if it already left."""
        if self.requests.pop(entry.rid, None) is None:
            return False
        self._retire(entry)
        return True

    def _fail(self, entry: E, exc: BaseException, events: list[StepEvent]) -> None:
        """The request's decode raised: it alone leaves, with an ``error`` event."""
        if self._remove(entry):
            self.counters.requests_failed += 1
            events.append(StepEvent(entry.rid, "error", error=exc))

    def _complete(self, entry: E, output: RequestOutput, events: list[StepEvent]) -> None:
        """Report a finished request (already taken out by ``_remove``)."""
        self.counters.requests_finished += 1
        events.append(StepEvent(entry.rid, "finished", output=output))


__all__ = ["DecodeCounters", "RequestTable", "TableEntry"]
