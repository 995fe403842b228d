"""The asynchronous engine behind the server.

One background thread owns the decode strategy and loops: admit what arrived,
``step`` (a batched round of encoding, joining and decoding across every running
request), hand the events back to the asyncio loop. Audio decoding and feature
extraction (``DecodeStrategy.prepare``) run in a small thread pool, so a long
upload never stalls the running batch. Callers ``await transcribe(...)`` or
iterate ``stream(...)``; cancelling the awaiting task (a client that went away,
a timeout) aborts the request and frees its rows at the next step.

The queue is bounded: past ``EngineConfig.max_queue_size`` admitted requests,
``transcribe`` raises ``EngineOverloaded`` at once.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from oasr.engine.config import TranscribeOptions
from oasr.engine.decode.base import EngineOverloaded, Request, StepEvent
from oasr.engine.engine import EngineCore
from oasr.engine.outputs import RequestOutput, Segment

log = logging.getLogger("oasr.engine")


class RequestTimeout(TimeoutError):
    """A request did not finish within its timeout (it has been aborted)."""


class EngineStopped(RuntimeError):
    """The engine has been shut down."""


@dataclass
class _Handle:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    events: asyncio.Queue | None = None
    submitted: float = field(default_factory=time.monotonic)

    def deliver(self, event: StepEvent) -> None:
        if self.events is not None:
            self.events.put_nowait(event)
        if self.future.done():
            return
        if event.kind == "finished":
            self.future.set_result(event.output)
        elif event.kind == "error":
            self.future.set_exception(event.error)  # type: ignore[arg-type]


@dataclass
class EngineStats:
    """A snapshot of the engine, published by its thread after every step."""

    admitted: int = 0
    preparing: int = 0
    running_requests: int = 0
    running_rows: int = 0
    waiting_tasks: int = 0
    joins_running: int = 0
    steps: int = 0
    finished: int = 0
    failed: int = 0
    aborted: int = 0
    audio_seconds: float = 0.0


class AsyncEngine(EngineCore):
    """``EngineCore`` driven by a background thread, for asyncio callers.

    Args:
        model, config, **config_overrides: as ``EngineCore``.
        prepare_workers: threads decoding audio / computing features.
    """

    def __init__(self, model=None, config=None, *, prepare_workers: int = 2, **config_overrides: Any) -> None:
        super().__init__(model, config, **config_overrides)
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._handles: dict[str, _Handle] = {}
        self._stop = threading.Event()
        self._executor = ThreadPoolExecutor(prepare_workers, thread_name_prefix="oasr-prepare")
        self._stats = EngineStats()
        self._counts = {"finished": 0, "failed": 0, "aborted": 0}
        self._admitted = 0
        self._preparing = 0
        self._audio_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="oasr-engine", daemon=True)
        self._thread.start()

    # -- public -----------------------------------------------------------------------

    @property
    def is_running(self) -> bool:
        """Whether the decode thread is alive and accepting requests."""
        return self._thread.is_alive() and not self._stop.is_set()

    def stats(self) -> EngineStats:
        """The latest snapshot (cheap; safe from any thread)."""
        s = self._stats
        s.admitted, s.preparing = self._admitted, self._preparing
        return s

    async def transcribe(
        self,
        source: Any,
        options: TranscribeOptions,
        *,
        request_id: str | None = None,
        timeout: float | None = None,
        min_duration_s: float = 0.0,
    ) -> RequestOutput:
        """Transcribe one input.

        Args:
            source: a path, bytes, a binary file object or a waveform.
            options: validated options (``make_options``).
            timeout: seconds before the request is aborted with ``RequestTimeout``.
            min_duration_s: shorter audio is refused with a ValueError.

        Raises:
            EngineOverloaded: the queue is full.
            ValueError: bad audio (``AudioDecodeError``) or too short.
            RequestTimeout: ``timeout`` elapsed (the request was aborted).
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        rid, handle = await self._admit(source, options, request_id, deadline, min_duration_s, stream=False)
        try:
            return await _wait(asyncio.shield(handle.future), deadline, loop)
        except asyncio.TimeoutError:
            raise RequestTimeout(f"request {rid} did not finish within {timeout} s and was aborted") from None
        finally:
            self._release(rid, handle)

    async def stream(
        self,
        source: Any,
        options: TranscribeOptions,
        *,
        request_id: str | None = None,
        timeout: float | None = None,
        min_duration_s: float = 0.0,
    ) -> AsyncIterator[StepEvent]:
        """Like ``transcribe``, but yield each ``segment`` event as it is decoded (or,
        for a strategy that streams text, each ``delta`` event), then the ``finished``
        event with the whole output. Closing the iterator early aborts the request."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        rid, handle = await self._admit(source, options, request_id, deadline, min_duration_s, stream=True)
        try:
            while True:
                event = await _wait(handle.events.get(), deadline, loop)  # type: ignore[union-attr]
                if event.kind == "error":
                    raise event.error  # type: ignore[misc]
                yield event
                if event.kind == "finished":
                    return
        except asyncio.TimeoutError:
            raise RequestTimeout(f"request {rid} did not finish within {timeout} s and was aborted") from None
        finally:
            self._release(rid, handle)

    async def _admit(self, source, options, request_id, deadline, min_duration_s, *, stream: bool):
        """Prepare (decode + featurise) in the pool, then hand the request to the engine thread."""
        if self._stop.is_set():
            raise EngineStopped("the engine has been shut down")
        if self._admitted >= self.config.max_queue_size:
            raise EngineOverloaded(
                f"the engine is at capacity ({self._admitted} requests queued or running; "
                f"max_queue_size={self.config.max_queue_size})"
            )
        loop = asyncio.get_running_loop()
        rid = request_id or self.new_request_id()
        self._admitted += 1
        self._preparing += 1
        try:
            request = await _wait(
                loop.run_in_executor(self._executor, self.splitter.prepare, Request(rid, source, options)),
                deadline,
                loop,
            )
            if request.duration < min_duration_s:
                request.features.close()
                raise _too_short(request.duration, min_duration_s)
        except BaseException as e:
            self._admitted -= 1
            if isinstance(e, asyncio.TimeoutError):
                raise RequestTimeout(f"request {rid} timed out while its audio was being decoded") from None
            raise
        finally:
            self._preparing -= 1
        handle = _Handle(loop, loop.create_future(), asyncio.Queue() if stream else None)
        self._handles[rid] = handle
        self._inbox.put(("add", request))
        self._wake.set()
        return rid, handle

    def _release(self, rid: str, handle: _Handle) -> None:
        self._admitted -= 1
        if not handle.future.done():
            # The caller went away (cancelled, timed out, stopped iterating): abort.
            handle.future.cancel()
            self._inbox.put(("abort", rid))
            self._wake.set()
        self._handles.pop(rid, None)

    def shutdown(self) -> None:
        """Stop the engine thread; pending requests fail with ``EngineStopped``."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)
        self._executor.shutdown(wait=False, cancel_futures=True)
        for h in list(self._handles.values()):
            h.loop.call_soon_threadsafe(_fail_handle, h, EngineStopped("the engine was shut down"))

    # -- the engine thread ----------------------------------------------------------------

    def _run(self) -> None:
        # Fix this thread's intra-op thread count now: VAD in a prepare worker runs with
        # torch's count briefly at 1, which a thread starting its first op then would keep.
        torch.get_num_threads()
        strategy = self.splitter
        while not self._stop.is_set():
            if strategy.num_unfinished() == 0 and self._inbox.empty():
                self._wake.wait(timeout=1.0)
                self._wake.clear()
            while not self._inbox.empty():
                kind, arg = self._inbox.get_nowait()
                if kind == "add":
                    try:
                        strategy.add_request(arg)
                        self._audio_seconds += arg.duration
                    except Exception as e:  # a request the strategy refuses fails alone
                        self._deliver(StepEvent(arg.request_id, "error", error=e))
                elif kind == "abort" and strategy.abort(arg):
                    self._counts["aborted"] += 1
            if strategy.num_unfinished() == 0:
                self._publish()
                continue
            try:
                events = strategy.step()
            except Exception as e:  # a bug in a step: fail what is running, keep serving
                log.exception("decode step failed; failing %d running requests", strategy.num_unfinished())
                events = [StepEvent(rid, "error", error=e) for rid in list(self._handles)]
                for rid in list(self._handles):
                    strategy.abort(rid)
            for event in events:
                if event.kind == "finished":
                    self._counts["finished"] += 1
                elif event.kind == "error":
                    self._counts["failed"] += 1
                self._deliver(event)
            self._stats.steps += 1
            self._publish()

    def _deliver(self, event: StepEvent) -> None:
        handle = self._handles.get(event.request_id)
        if handle is not None:
            handle.loop.call_soon_threadsafe(handle.deliver, event)

    def _publish(self) -> None:
        st = self.splitter.stats()
        self._stats = EngineStats(
            running_requests=self.splitter.num_unfinished(),
            running_rows=int(st.get("running_rows", 0)),
            waiting_tasks=int(st.get("waiting_tasks", 0)),
            joins_running=int(st.get("joins_running", 0)),
            steps=self._stats.steps,
            finished=self._counts["finished"],
            failed=self._counts["failed"],
            aborted=self._counts["aborted"],
            audio_seconds=self._audio_seconds,
        )


async def _wait(awaitable, deadline: float | None, loop: asyncio.AbstractEventLoop):
    if deadline is None:
        return await awaitable
    return await asyncio.wait_for(awaitable, max(0.0, deadline - loop.time()))


def _fail_handle(handle: _Handle, exc: BaseException) -> None:
    handle.deliver(StepEvent("", "error", error=exc))


def _too_short(duration: float, minimum: float) -> ValueError:
    from oasr.audio import AudioDecodeError

    # Enough digits that a clip one sample short never reads as equal to the minimum.
    return AudioDecodeError(f"audio is {duration:.6f} s long; the minimum is {minimum:g} s")


__all__ = ["AsyncEngine", "EngineOverloaded", "EngineStats", "RequestTimeout", "Segment"]
