"""The asynchronous engine behind the server.

One background thread owns the decode strategy and loops: admit what arrived,
``step`` (a batched round of encoding, joining and decoding across every running
request), hand the events back to the asyncio loop. Audio decoding and feature
extraction (``DecodeStrategy.prepare``) run in a small thread pool, so a long
upload never stalls the running batch. Callers ``await transcribe(...)`` or
iterate ``stream(...)``; cancelling the awaiting task (a client that went away,
a timeout) aborts the request and frees its rows at the next step.

Admission is honest (``oasr.engine.admission``): a request with a timeout (its budget,
counted from submission) has its duration read from its header before any work is spent
on it, and is refused at once with ``AdmissionRefused`` (an ``EngineOverloaded`` carrying
``retry_after_s``) when the engine, at its measured decode rate and with the requests it
holds, is not predicted to finish it within its budget, or would then miss an admitted
request's. A request that is admitted finishes unless that prediction was badly wrong: it
is cut at its deadline (``RequestTimeout``) all the same, and counted in
``EngineStats.deadline_misses``. The queue is bounded too: past
``EngineConfig.max_queue_size`` admitted requests, ``transcribe`` refuses at once.

One request never takes the loop down. Everything the thread does to the strategy
(admit, step, abort) runs under the decode's inference mode, and each of those calls
is guarded on its own: a request the strategy refuses, or whose abort fails, fails
alone. A failing ``step`` cannot say which request caused it, so the requests that
were running are aborted (the strategy is rebuilt if they will not leave) and decoded
again one at a time ("quarantine", each prepared afresh from its source): the one that
fails alone gets the error, the others finish with the result they give solo, and new
requests wait meanwhile. If the loop dies all the same (a bug outside a step), every
waiting and new request fails with ``EngineStopped`` at once, ``is_running`` turns
False and the death callbacks run (the server then exits so a supervisor restarts it).
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from oasr.audio.io import fingerprint, probe_duration
from oasr.engine.admission import Admission, DecodeRate
from oasr.engine.config import TranscribeOptions
from oasr.engine.decode.base import EngineOverloaded, Request, StepEvent
from oasr.engine.engine import EngineCore, audio_too_short
from oasr.engine.outputs import RequestOutput, Segment

log = logging.getLogger("oasr.engine")


class RequestTimeout(TimeoutError):
    """A request did not finish within its timeout (it has been aborted)."""


class EngineStopped(RuntimeError):
    """The engine has been shut down, or its decode loop died."""


class AdmissionRefused(EngineOverloaded):
    """The engine does not take this request now; no work was spent on it.

    Attributes:
        retry_after_s: the engine's estimate of when it would take it.
        reason: "deadline" (it would not finish within its budget, or would make an admitted
            request miss its own) or "queue_full" (``max_queue_size`` requests admitted).
    """

    def __init__(self, message: str, retry_after_s: float, reason: str) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.reason = reason


Timeout = float | Callable[[float], float] | None
"""Seconds a request may take from submission (its budget); or a function of its audio's
duration (seconds) giving it: the duration read from the container's header, then the
decoded audio's (without a header duration, the budget of the longest audio the engine
admits until the audio is decoded)."""


@dataclass
class _Handle:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    events: asyncio.Queue | None = None
    submitted: float = field(default_factory=time.monotonic)
    budget: float = 0.0  # seconds from admission it may take (for the timeout message)
    request: Request | None = None  # as submitted (source + options), to decode it again in quarantine
    delivered: int = 0  # segment / delta events delivered (a quarantined rerun skips as many)
    missed: bool = False  # cut at its deadline

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
    quarantined: int = 0  # requests decoded again alone after a failure beside them
    audio_seconds: float = 0.0
    prepared: int = 0  # requests whose audio was decoded and featurised
    refused_deadline: int = 0  # refused before any work: not predicted to finish within their budget
    refused_queue_full: int = 0  # refused before any work: max_queue_size requests admitted
    deadline_misses: int = 0  # admitted requests cut at their deadline all the same
    decode_rate: float = 0.0  # audio seconds decoded per wall second, as admission measures it (0: unknown)
    backlog_seconds: float = 0.0  # audio seconds admitted and not finished
    prediction_correction: float = 1.0  # what admission multiplies its predictions by (recent errors)


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
        self._counts = {"finished": 0, "failed": 0, "aborted": 0, "quarantined": 0}
        self._admitted = 0
        self._preparing = 0
        self.rate = DecodeRate(self.config.max_batch_size)
        self.admission = Admission(self.rate)  # event-loop side: what is admitted, the decisions
        self._refusals = {"deadline": 0, "queue_full": 0}
        self._misses = 0
        self._prepared = 0
        # Engine-thread side of the rate: busy time, and each request's even share of it.
        self._busy_total = 0.0
        self._busy_since_finish = 0.0
        self._shares: dict[str, float] = {}
        self._lives: dict[str, float] = {}
        self._durations: dict[str, float] = {}
        self._audio_seconds = 0.0
        self._death: BaseException | None = None
        self._death_callbacks: list[Callable[[BaseException], None]] = []
        self._live: set[str] = set()  # request ids the strategy holds
        self._quarantine: deque[str] = deque()  # request ids to decode again, one at a time
        self._suspect: str | None = None  # the quarantined request decoding now
        self._held: deque[Request] = deque()  # admitted while a quarantine runs
        self._replaying: dict[str, int] = {}  # rerun request id -> segment / delta events still to skip
        self._streams = None  # the live streams' loop (oasr.engine.streaming.api.StreamingLoop), built on demand
        self._thread = threading.Thread(target=self._run, name="oasr-engine", daemon=True)
        self._thread.start()

    # -- public -----------------------------------------------------------------------

    @property
    def is_running(self) -> bool:
        """Whether the decode thread is alive and accepting requests."""
        return self._thread.is_alive() and not self._stop.is_set() and self._death is None

    @property
    def death(self) -> BaseException | None:
        """What killed the decode loop (None while it runs or after a clean shutdown)."""
        return self._death

    def add_death_callback(self, fn: Callable[[BaseException], None]) -> None:
        """Call ``fn(exc)`` once if the decode loop dies (from the engine thread; at once
        if it is already dead)."""
        self._death_callbacks.append(fn)
        if self._death is not None:
            fn(self._death)

    def stats(self) -> EngineStats:
        """The latest snapshot (cheap; safe from any thread)."""
        s = self._stats
        s.admitted, s.preparing, s.prepared = self._admitted, self._preparing, self._prepared
        s.refused_deadline, s.refused_queue_full = self._refusals["deadline"], self._refusals["queue_full"]
        s.deadline_misses = self._misses
        s.decode_rate = self.rate.admit or 0.0
        s.backlog_seconds = self.admission.backlog_s
        s.prediction_correction = self.admission.correction
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
            timeout: the request's budget: seconds from submission before it is aborted with
                ``RequestTimeout``, or a function of the audio's duration giving them (see
                ``Timeout``). A request not predicted to finish within it is refused at once
                (``AdmissionRefused``; see the module notes).
            min_duration_s: shorter audio is refused with a ValueError.

        Raises:
            AdmissionRefused: the queue is full, or the request would not finish within its
                budget (``retry_after_s``: when it would); no work was spent on it.
            ValueError: bad audio (``AudioDecodeError``) or too short.
            RequestTimeout: ``timeout`` elapsed (the request was aborted).
        """
        loop = asyncio.get_running_loop()
        rid, handle, deadline = await self._admit(source, options, request_id, timeout, min_duration_s, stream=False)
        try:
            return await _wait(asyncio.shield(handle.future), deadline, loop)
        except asyncio.TimeoutError:
            raise self._timed_out(rid, handle) from None
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
        """Like ``transcribe``, but yield each ``segment`` event as it is decoded (and, for a
        strategy that streams text, each ``delta`` event: those carry all its text), then the
        ``finished`` event with the whole output. Closing the iterator early aborts the request."""
        loop = asyncio.get_running_loop()
        rid, handle, deadline = await self._admit(source, options, request_id, timeout, min_duration_s, stream=True)
        try:
            while True:
                event = await _wait(handle.events.get(), deadline, loop)  # type: ignore[union-attr]
                if event.kind == "error":
                    raise event.error  # type: ignore[misc]
                yield event
                if event.kind == "finished":
                    return
        except asyncio.TimeoutError:
            raise self._timed_out(rid, handle) from None
        finally:
            self._release(rid, handle)

    async def _admit(self, source, options, request_id, timeout: Timeout, min_duration_s, *, stream: bool):
        """Decide on the request from its header's duration (refusing it before any work),
        prepare it (decode + featurise) in the pool, then hand it to the engine thread.

        Returns ``(request id, handle, deadline)``, the deadline on the loop's clock (None: none)."""
        if self._death is not None:
            raise EngineStopped(f"the engine's decode loop died ({type(self._death).__name__}: {self._death})")
        if self._stop.is_set():
            raise EngineStopped("the engine has been shut down")
        if self._admitted >= self.config.max_queue_size:
            self._refusals["queue_full"] += 1
            backlog = self.admission.backlog_s / max(1, len(self.admission.admitted))
            raise AdmissionRefused(
                f"the engine is at capacity ({self._admitted} requests queued or running; "
                f"max_queue_size={self.config.max_queue_size})",
                self.admission.retry_after(backlog, math.inf),
                "queue_full",
            )
        loop = asyncio.get_running_loop()
        submitted = loop.time()
        rid = request_id or self.new_request_id()
        self._admitted += 1  # holds its place in the queue while its header is read
        decided: float | None = None  # the duration admission decided on
        key: str | None = None  # the audio's fingerprint: a refused client's place when it retries
        try:
            if timeout is not None:
                # The header says how long the audio is: decide before decoding a sample of it.
                probed, key = await loop.run_in_executor(None, _probe, source, self.sampling_rate)
                if probed is not None:
                    self._decide(rid, probed, timeout, submitted, loop, key)
                    decided = probed
            longest = self.config.max_audio_s if self.config.max_audio_s is not None else 4 * 3600.0
            deadline = _deadline(timeout, decided if decided is not None else longest, submitted)
            self._preparing += 1
            try:
                request = await _wait(
                    loop.run_in_executor(self._executor, self.splitter.prepare, Request(rid, source, options)),
                    deadline,
                    loop,
                )
            finally:
                self._preparing -= 1
            self._prepared += 1
            if request.duration < min_duration_s:
                request.features.close()
                raise audio_too_short(request.duration, min_duration_s)
            if decided is None or request.duration > decided * 1.1 + 1.0:
                # No header duration (or one far short of the audio): decide now, still before
                # the decode loop has spent anything on it.
                self.admission.release(rid)
                try:
                    self._decide(rid, request.duration, timeout, submitted, loop, key)
                except AdmissionRefused:
                    _close_features(request)
                    raise
            else:
                self.admission.resize(rid, request.duration)
        except BaseException as e:
            self._admitted -= 1
            self.admission.release(rid, finished=isinstance(e, asyncio.TimeoutError))
            if isinstance(e, asyncio.TimeoutError):
                self._misses += 1
                budget = (deadline or submitted) - submitted
                raise RequestTimeout(
                    f"request {rid} did not finish within its {budget:.0f}-s budget (it ran out while its "
                    "audio was being decoded) and was aborted"
                ) from None
            raise
        handle = _Handle(loop, loop.create_future(), asyncio.Queue() if stream else None)
        handle.request = Request(rid, source, options, duration=request.duration)
        self._handles[rid] = handle
        if self._death is not None:  # died while this request was being prepared
            _close_features(request)
            self._handles.pop(rid, None)
            self._admitted -= 1
            self.admission.release(rid)
            raise EngineStopped(f"the engine's decode loop died ({type(self._death).__name__}: {self._death})")
        self._inbox.put(("add", request))
        self._wake.set()
        deadline = _deadline(timeout, request.duration, submitted)
        handle.budget = 0.0 if deadline is None else deadline - submitted
        return rid, handle, deadline

    def _decide(self, rid: str, duration: float, timeout: Timeout, submitted: float, loop, key: str | None) -> None:
        """Admit ``rid`` (``duration`` seconds; budget from ``timeout``, counted from
        ``submitted``; its audio's fingerprint ``key``) into the admission model, or raise
        ``AdmissionRefused``."""
        budget = None
        if timeout is not None:
            spent = loop.time() - submitted  # reading the header
            budget = (timeout(duration) if callable(timeout) else timeout) - spent
        retry_after = self.admission.refusal(duration, budget, key=key)
        if retry_after is not None:
            self._refusals["deadline"] += 1
            self.admission.promise(duration, retry_after, key=key)
            rate = self.rate.admit or 0.0
            raise AdmissionRefused(
                f"the engine cannot finish {duration:.1f} s of audio within this request's {budget:.0f}-s budget "
                f"now ({len(self.admission.admitted)} requests, {self.admission.backlog_s:.0f} s of audio admitted; "
                f"decoding {rate:.2f} s of audio per second); retry in {retry_after:.0f} s",
                retry_after,
                "deadline",
            )
        self.admission.admit(rid, duration, budget, key=key)

    def _release(self, rid: str, handle: _Handle) -> None:
        self._admitted -= 1
        future = handle.future
        answered = future.done() and not future.cancelled() and future.exception() is None
        self.admission.release(rid, finished=answered or handle.missed)  # its time vs. the prediction
        if not handle.future.done():
            # The caller went away (cancelled, timed out, stopped iterating): abort.
            handle.future.cancel()
            self._inbox.put(("abort", rid))
            self._wake.set()
        self._handles.pop(rid, None)

    def _timed_out(self, rid: str, handle: _Handle) -> RequestTimeout:
        """An admitted request reached its deadline: counted as a miss of the admission's prediction."""
        self._misses += 1
        handle.missed = True
        return RequestTimeout(f"request {rid} did not finish within its {handle.budget:.0f}-s budget and was aborted")

    async def open_stream(self, **options: Any):
        """Open a live stream (``oasr.engine.streaming.api``): ``feed`` / ``finish`` queue
        samples, ``async for event in stream`` yields its events. Streams are stepped, all of
        them batched, on a thread of their own, started with the first stream.

        Raises:
            EngineOverloaded: every streaming slot is in use.
            ValueError / TypeError: a bad or unknown option, or a model that cannot stream.
        """
        from oasr.engine.streaming.api import StreamingLoop, validate_stream_options

        if not self.is_running:
            raise EngineStopped("the engine is not running")
        opts, sopts = validate_stream_options(self, options)
        if self._streams is None:
            self._streams = StreamingLoop(self)
        return self._streams.open(opts, sopts, asyncio.get_running_loop())

    @property
    def streaming(self):
        """The streaming loop (None until the first ``open_stream``)."""
        return self._streams

    def shutdown(self) -> None:
        """Stop the engine thread; pending requests fail with ``EngineStopped``."""
        if self._streams is not None:
            self._streams.shutdown()
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._fail_all(EngineStopped("the engine was shut down"))

    def _fail_all(self, exc: BaseException) -> None:
        for h in list(self._handles.values()):
            if not h.loop.is_closed():
                h.loop.call_soon_threadsafe(_fail_handle, h, exc)

    # -- the engine thread ----------------------------------------------------------------

    def _run(self) -> None:
        # Fix this thread's intra-op thread count now: VAD in a prepare worker runs with
        # torch's count briefly at 1, which a thread starting its first op then would keep.
        torch.get_num_threads()
        try:
            with torch.inference_mode():  # every tensor the strategy writes, it writes here
                self._loop()
        except BaseException as e:  # noqa: BLE001 - the loop is dead whatever killed it
            self._die(e)

    def _loop(self) -> None:
        while not self._stop.is_set():
            strategy = self.splitter
            if strategy.num_unfinished() == 0 and self._inbox.empty() and not self._quarantine:
                self._wake.wait(timeout=1.0)
                self._wake.clear()
            while not self._inbox.empty():
                kind, arg = self._inbox.get_nowait()
                if kind == "add":
                    if self._quarantine or self._suspect is not None:
                        self._held.append(arg)  # admitted once the quarantine is over
                    else:
                        self._add(arg)
                elif kind == "abort":
                    self._abort(arg)
            if strategy.num_unfinished() == 0:
                self._next_in_quarantine()
                if strategy.num_unfinished() == 0:
                    self._busy_since_finish = 0.0  # idle: what was spent on aborted work is not the next one's
                    self._publish()
                    continue
            running = sorted(self._live)
            started = time.perf_counter()
            try:
                events = strategy.step()
            except Exception as e:
                events = self._step_failed(e, running)
            self._account(time.perf_counter() - started)
            for event in events:
                self._count_and_deliver(event)
            self._stats.steps += 1
            self._publish()

    def _account(self, busy: float) -> None:
        """A step took ``busy`` seconds: the decode rate's clocks (see ``oasr.engine.admission``)."""
        self._busy_total += busy
        self._busy_since_finish += busy
        if self._shares:
            share = busy / len(self._shares)
            for rid in self._shares:
                self._shares[rid] += share
                self._lives[rid] += busy

    def _measure(self, rid: str) -> None:
        """``rid`` finished: its audio and the busy time it took go into the decode rate."""
        share = self._shares.pop(rid, None)
        life = self._lives.pop(rid, 0.0)
        duration = self._durations.pop(rid, 0.0)
        if share is None:
            return
        self.rate.finished(duration, self._busy_since_finish, share, life, self._busy_total)
        self._busy_since_finish = 0.0

    def _forget(self, rid: str) -> None:
        self._shares.pop(rid, None)
        self._lives.pop(rid, None)
        self._durations.pop(rid, None)

    def _add(self, request: Request) -> None:
        """Admit a prepared request; one the strategy refuses fails alone."""
        self._audio_seconds += request.duration
        try:
            self.splitter.add_request(request)
            self._live.add(request.request_id)
            self._shares.setdefault(request.request_id, 0.0)
            self._lives.setdefault(request.request_id, 0.0)
            self._durations[request.request_id] = request.duration
        except Exception as e:
            self._safe_abort(request.request_id)  # whatever part of it the strategy took
            _close_features(request)
            self._count_and_deliver(StepEvent(request.request_id, "error", error=e))

    def _abort(self, rid: str) -> None:
        self._forget(rid)
        self._quarantine = deque(q for q in self._quarantine if q != rid)
        self._held = deque(r for r in self._held if r.request_id != rid)
        if self._safe_abort(rid):
            self._counts["aborted"] += 1

    def _safe_abort(self, rid: str) -> bool:
        """Abort ``rid`` in the strategy; a failing abort is logged and the strategy rebuilt
        if the request will not leave it (the others then go through quarantine)."""
        known = rid in self._live
        self._live.discard(rid)
        try:
            return self.splitter.abort(rid) or known
        except Exception:
            log.exception("aborting request %s failed; its neighbours are decoded again one by one", rid)
            others = sorted(self._live)
            self._reset_strategy()
            self._quarantine.extend(others)
            self._counts["quarantined"] += len(others)
            return True

    def _step_failed(self, error: Exception, running: list[str]) -> list[StepEvent]:
        """A step raised: the request decoding alone in quarantine fails; otherwise every
        running request is decoded again, one at a time, to find the one that fails."""
        if self._suspect is not None and running == [self._suspect]:
            log.error("request %s failed decoding alone: %s: %s", self._suspect, type(error).__name__, error)
            rid, self._suspect = self._suspect, None
            self._reset_strategy()
            self._next_in_quarantine()
            return [StepEvent(rid, "error", error=error)]
        log.exception("decode step failed; decoding its %d requests again one at a time", len(running))
        self._reset_strategy()
        self._suspect = None
        fresh = [r for r in running if r not in self._quarantine]
        self._quarantine.extend(fresh)
        self._counts["quarantined"] += len(fresh)
        return []

    def _reset_strategy(self) -> None:
        """A fresh strategy over the same model: the old one's state is not trusted after a
        failure, and everything it held is decoded again or has failed."""
        self._live.clear()
        self.strategy = self.build_strategy()
        self.splitter = self.new_splitter()

    def _next_in_quarantine(self) -> None:
        """Decode the next quarantined request alone (prepared again from its source); once
        none is left, admit the requests that arrived meanwhile."""
        if self._suspect is not None:  # the last one finished alone: it was innocent
            self._suspect = None
        while self._quarantine:
            rid = self._quarantine.popleft()
            handle = self._handles.get(rid)
            if handle is None or handle.request is None:
                continue
            submitted = handle.request
            try:
                _rewind(submitted.source)
                request = self.splitter.prepare(Request(rid, submitted.source, submitted.options))
                self._replaying[rid] = handle.delivered
                self._suspect = rid
                self.splitter.add_request(request)
                self._live.add(rid)
                return
            except Exception as e:
                self._suspect = None
                self._safe_abort(rid)
                self._count_and_deliver(StepEvent(rid, "error", error=e))
        while self._held:
            self._add(self._held.popleft())

    def _count_and_deliver(self, event: StepEvent) -> None:
        if event.kind in ("finished", "error"):
            self._counts[event.kind if event.kind == "finished" else "failed"] += 1
            if event.kind == "finished":
                self._measure(event.request_id)
            else:
                self._forget(event.request_id)
            self._replaying.pop(event.request_id, None)
            self._live.discard(event.request_id)
        elif event.kind in ("segment", "delta"):
            skip = self._replaying.get(event.request_id, 0)
            if skip:  # a rerun in quarantine: the caller has these already
                self._replaying[event.request_id] = skip - 1
                return
            handle = self._handles.get(event.request_id)
            if handle is not None:
                handle.delivered += 1
        self._deliver(event)

    def _die(self, exc: BaseException) -> None:
        """The loop is dead: fail everything now and tell whoever supervises the process."""
        log.critical("the decode loop died: %s: %s", type(exc).__name__, exc, exc_info=exc)
        self._death = exc
        self._fail_all(EngineStopped(f"the engine's decode loop died ({type(exc).__name__}: {exc})"))
        for fn in self._death_callbacks:
            try:
                fn(exc)
            except Exception:
                log.exception("a death callback failed")

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
            quarantined=self._counts["quarantined"],
            audio_seconds=self._audio_seconds,
        )


async def _wait(awaitable, deadline: float | None, loop: asyncio.AbstractEventLoop):
    if deadline is None:
        return await awaitable
    return await asyncio.wait_for(awaitable, max(0.0, deadline - loop.time()))


def _fail_handle(handle: _Handle, exc: BaseException) -> None:
    handle.deliver(StepEvent("", "error", error=exc))


def _probe(source, sampling_rate: int) -> tuple[float | None, str | None]:
    """The duration from ``source``'s header, and its fingerprint (admission's, before any decoding)."""
    return probe_duration(source, sampling_rate), fingerprint(source)


def _deadline(timeout: Timeout, duration: float, start: float) -> float | None:
    if timeout is None:
        return None
    return start + (timeout(duration) if callable(timeout) else timeout)


def _rewind(source: Any) -> None:
    """Put a file-object source back at its start (it is read again in quarantine)."""
    seek = getattr(source, "seek", None)
    if seek is not None:
        seek(0)


def _close_features(request: Request) -> None:
    close = getattr(request.features, "close", None)
    if close is not None:
        close()


__all__ = ["AdmissionRefused", "AsyncEngine", "EngineOverloaded", "EngineStats", "RequestTimeout", "Segment"]
