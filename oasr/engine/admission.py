"""Honest admission: a request the engine cannot finish within its budget is refused
before any work is spent on it.

A request's budget (``AsyncEngine.transcribe(timeout=...)``; ``oasr serve``'s
``--request-timeout``, by default 60 s plus 4 s per second of audio) is its caller's
deadline, counted from submission. When the request arrives, its duration is read from
its container's header (``oasr.audio.io.probe_duration``; no sample decoded) and the
engine predicts when it would finish. It is refused (``AdmissionRefused``: HTTP 429 with
``Retry-After``) when that prediction is past ``HEADROOM`` of its budget, or when taking
it would push a request already admitted past ``HEADROOM`` of that one's budget. A
request that is admitted is expected to finish: it is still cut at its deadline (the
caller's answer is worthless later), but that only happens when the prediction was badly
wrong, and each such cut is counted (``deadline_misses``).

The model. Continuous batching shares the engine among the requests it holds, so the
engine is taken to be processor sharing at a decode rate ``R`` (audio seconds per wall
second, measured below): each of ``n`` admitted requests is served ``R / n`` seconds of
its audio per second. A request of ``d`` seconds taken beside requests with ``r_i``
seconds left finishes after ``(sum_i min(r_i, d) + d) / R`` seconds, and delays each of
them by ``min(d, r_i) / R``. A short request beside a long recording is thus not held
behind all of it, as continuous batching would not hold it. But batching makes ``R``
depend on how many requests share a step: measured while many did, it is too high for a
request decoded nearly alone, which goes no faster than one request goes. So a second
limit holds: no request is predicted faster than ``d / S``, ``S`` the speed of one
request (its audio over its time in the engine, measured at whatever depth it ran, so
never above its speed alone). A prediction is the later of the two. What is left of each
admitted request (``r_i``) follows from its admission at the lower of ``R / n`` and
``S`` (the model's virtual time), never below zero.

The rates, measured from finished work on the engine thread (``DecodeRate``): the wall
time the decode loop spends in steps, and the audio seconds of the requests that finish,
summed with exponential forgetting over ``RATE_MEMORY_S`` seconds of busy time. Three
attributions of the busy time are kept:

* to admit, ``R`` (``DecodeRate.admit``): the time since the previous request finished
  goes to the next one that does. Under sharing, most requests finish together at the end
  of their turn, so this reads low at the first of them: it errs on the side of refusing;
* to admit, ``S`` (``DecodeRate.speed``): each request's own time in the engine;
* to say when to come back (``DecodeRate.retry``): each step's time is split evenly
  over the requests in the engine, each request's share going with it when it finishes;
  this reads high where the engine serves in arrival order. A ``Retry-After`` that is
  too short costs the client one more early 429; one that is too long leaves the engine
  idle, so ``Retry-After`` is computed with the higher of the two.

The model's own errors. Requests do not all cost the same per second of audio: Whisper's
temperature fallback decodes a hard window up to five times more, and under sharing such a
request also slows every request beside it, so a group admitted together to the edge of its
budgets would miss together. Each finished request's time is compared with the model's
prediction for it (as of the last admission beside it), and every prediction is multiplied
by ``correction``: the ``ERROR_QUANTILE`` of the last ``ERROR_MEMORY`` such ratios, never below
1. A workload whose requests keep to the model is admitted up to ``HEADROOM``; one with heavy
requests among them is given the room they took.

Before any request has finished the rate is unknown and requests are admitted on the
queue bound alone; ``oasr serve`` (and every Ray replica) decodes one second of silence
before it serves, which is that first measurement. One second of silence costs a Whisper
model nearly what a 30-s window of speech does, so this first rate is low (admission
starts cautious); while it is the only measurement, ``Retry-After`` assumes a full batch
decodes at that rate per request.

Refused requests keep their place. Each refusal is remembered under the request's
fingerprint (``oasr.audio.io.fingerprint``: the same upload posted again has the same one)
with the time it was first refused, until ``GRACE_S`` past the time it was told to come
back (a client that has not come back by then has gone). A request is decided with every
refused request older than its own first refusal counted as admitted ahead of it, so the
clients that retry after ``Retry-After`` are taken in the order they first came: none is
passed over again and again by newer ones, and the oldest is judged on the admitted
requests alone.

``Retry-After`` is the model's time until the request would be admitted: the first time
at which, the requests ahead having been served (those admitted, and the refused ones
ahead of it, so that a burst of refused clients is spread out rather than sent back
together), it would finish within its budget; at most the request's budget (a later
prediction is too uncertain to make a client wait on: it comes back and is told again),
and while only one request has been measured, at most the time that one took (the first
real request soon tells more). A request that cannot finish within its budget even alone
is admitted when the engine holds nothing else (it is refused until then).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass

HEADROOM = 0.8  # a request is admitted only if predicted to finish within this share of its budget
RATE_MEMORY_S = 60.0  # busy seconds over which the decode rate forgets (e-folding)
MIN_RETRY_AFTER_S = 1.0
ERROR_MEMORY = 32  # finished requests whose prediction errors set the correction
ERROR_QUANTILE = 0.9  # the correction covers this share of them
GRACE_S = 10.0  # a refused client not back this long after its Retry-After has gone
RETURN_SLACK_S = 0.5  # a client may come back this much before its Retry-After


class _Ratio:
    """``audio / busy`` over decayed sums (forgetting by the engine's busy time)."""

    def __init__(self) -> None:
        self.audio = 0.0
        self.busy = 0.0
        self.clock = 0.0
        self.value: float | None = None

    def add(self, audio_s: float, busy_s: float, clock: float) -> None:
        keep = math.exp(-max(0.0, clock - self.clock) / RATE_MEMORY_S)
        self.clock = clock
        self.audio = self.audio * keep + audio_s
        self.busy = self.busy * keep + busy_s
        if self.audio > 0 and self.busy > 0:
            self.value = self.audio / self.busy


class DecodeRate:
    """The engine's decode rate in audio seconds per wall second, measured from finished
    requests (see the module notes). Written by the engine thread, read from any thread.

    Args:
        batch: requests decoded at once at most (``EngineConfig.max_batch_size``).
    """

    def __init__(self, batch: int) -> None:
        self.batch = max(1, batch)
        self._lo = _Ratio()
        self._hi = _Ratio()
        self._speed = _Ratio()
        self.measured = 0  # requests measured
        self.first_request_s = 0.0  # the first measured request's time in the engine

    def finished(self, audio_s: float, busy_s: float, share_s: float, life_s: float, clock: float) -> None:
        """A request of ``audio_s`` finished; ``busy_s``: the engine's busy time since the
        previous one did; ``share_s``: its even share of the busy time it was in the engine;
        ``life_s``: the busy time it was in the engine; ``clock``: the engine's total busy time."""
        if audio_s <= 0:
            return
        self._lo.add(audio_s, busy_s, clock)
        self._hi.add(audio_s, share_s, clock)
        self._speed.add(audio_s, life_s, clock)
        if not self.measured:
            self.first_request_s = life_s
        self.measured += 1

    @property
    def admit(self) -> float | None:
        """The engine's rate ``R`` admission is decided with (None: nothing measured yet)."""
        return self._lo.value

    @property
    def speed(self) -> float | None:
        """One request's speed ``S`` (audio seconds per second in the engine; None: unmeasured)."""
        return self._speed.value

    @property
    def retry(self) -> float | None:
        """The rate ``Retry-After`` is computed with (never below ``admit``)."""
        lo, hi = self._lo.value, self._hi.value
        if lo is None:
            return None
        rate = max(lo, hi or lo)
        return rate * self.batch if self.measured < 2 else rate


@dataclass
class _Waiting:
    """A refused request, until it is admitted or gone."""

    first: float  # when it was first refused: its place
    duration: float
    due: float  # when it was told to come back


@dataclass
class _Admitted:
    duration: float
    target: float  # when (time.monotonic) it must be predicted to finish by: HEADROOM of its budget
    served: float  # the model's virtual service when it was admitted
    since: float  # when it was admitted
    predicted: float | None = None  # the model's (uncorrected) finish, as of the latest admission


class Admission:
    """The admitted requests as the model sees them, and the decisions (event-loop thread).

    Args:
        rate: the engine's ``DecodeRate``.
    """

    def __init__(self, rate: DecodeRate) -> None:
        self.rate = rate
        self.admitted: dict[str, _Admitted] = {}
        self.waiting: dict[str, list[_Waiting]] = {}  # refused requests by fingerprint, oldest first
        self._anonymous = 0  # keys for refused requests without a fingerprint
        self.errors: deque[float] = deque(maxlen=ERROR_MEMORY)  # finished requests' time / predicted time
        self._virtual = 0.0  # audio seconds each admitted request has been served since time zero
        self._clock: float | None = None

    @property
    def backlog_s(self) -> float:
        """Audio seconds admitted and not finished."""
        return sum(a.duration for a in list(self.admitted.values()))  # list(): read from other threads too

    @property
    def correction(self) -> float:
        """What predictions are multiplied by: how much longer than the model predicted the
        recent requests took (``ERROR_QUANTILE`` of them; never below 1)."""
        if not self.errors:
            return 1.0
        ranked = sorted(self.errors)
        return max(1.0, ranked[min(len(ranked) - 1, int(ERROR_QUANTILE * len(ranked)))])

    def _advance(self, now: float) -> None:
        rate, speed = self.rate.admit, self.rate.speed
        if self._clock is not None and self.admitted and rate and speed:
            self._virtual += max(0.0, now - self._clock) * min(rate / len(self.admitted), speed)
        self._clock = now

    def _left(self, entry: _Admitted) -> float:
        return max(0.0, entry.duration - (self._virtual - entry.served))

    def _finishes(self, rate: float, speed: float, extra: float = 0.0) -> list[tuple[_Admitted, float, float]]:
        """``(entry, seconds to its predicted finish, the same with a request of ``extra``
        seconds shared beside it)`` for every admitted request (uncorrected model)."""
        entries = sorted(self.admitted.values(), key=self._left)
        left = [self._left(a) for a in entries]
        n, before, out = len(left), 0.0, []
        for i, (entry, r) in enumerate(zip(entries, left)):
            shared = (before + r * (n - i)) / rate  # the shorter ones, then r for itself and each longer one
            alone = r / speed
            out.append((entry, max(shared, alone), max(shared + min(extra, r) / rate, alone)))
            before += r
        return out

    def _ahead(self, key: str | None, now: float) -> list[float]:
        """Durations of the refused requests ahead of one with fingerprint ``key``: those first
        refused before it was (all of them, for one never refused). Forgets the gone ones."""
        for k in list(self.waiting):
            kept = [w for w in self.waiting[k] if w.due + GRACE_S > now]
            if kept:
                self.waiting[k] = kept
            else:
                del self.waiting[k]
        mine = self._returning(key, now)
        since = mine.first if mine is not None else math.inf
        return [w.duration for entries in self.waiting.values() for w in entries if w.first < since]

    def _returning(self, key: str | None, now: float) -> _Waiting | None:
        """The refusal a request with ``key`` arriving at ``now`` comes back from: the oldest under
        ``key`` already due (one not due yet is another client's with the same audio)."""
        for w in self.waiting.get(key, ()) if key is not None else ():
            if w.due <= now + RETURN_SLACK_S:
                return w
        return None

    def refusal(
        self, duration_s: float, budget_s: float | None, now: float | None = None, key: str | None = None
    ) -> float | None:
        """None if a request of ``duration_s`` with ``budget_s`` (fingerprint ``key``) may be
        admitted now, else the seconds until it may (its ``Retry-After``). Nothing is recorded."""
        now = time.monotonic() if now is None else now
        self._advance(now)
        rate, speed = self.rate.admit, self.rate.speed
        ahead = self._ahead(key, now)
        if budget_s is None or rate is None or speed is None or not (self.admitted or ahead):
            return None
        c, d = self.correction, duration_s
        left = [self._left(a) for a in self.admitted.values()] + ahead
        own = c * max((sum(min(r, d) for r in left) + d) / rate, d / speed)
        # An admitted request already predicted late (taken alone though it cannot make it, or a
        # prediction gone wrong) is not protected: refusing others would not save it.
        finishes = self._finishes(rate, speed, d)
        pushed = any(now + c * before <= entry.target < now + c * after for entry, before, after in finishes)
        if own <= HEADROOM * budget_s and not pushed:
            return None
        return self.retry_after(duration_s, budget_s, now, key)

    def retry_after(
        self, duration_s: float, budget_s: float, now: float | None = None, key: str | None = None
    ) -> float:
        """The model's seconds until a request of ``duration_s`` (fingerprint ``key``) would fit
        its budget: the first time, as the requests ahead of it (admitted, and refused ones
        first refused before it) are served, at which it would finish within ``HEADROOM`` of
        ``budget_s``."""
        now = time.monotonic() if now is None else now
        self._advance(now)
        rate = self.rate.retry
        if rate is None:
            return MIN_RETRY_AFTER_S
        rate /= self.correction
        ahead = sorted([self._left(a) for a in self.admitted.values()] + self._ahead(key, now))
        d, limit = duration_s, HEADROOM * budget_s

        def fits(k: int) -> bool:  # after the k shortest are done (each of the rest served ahead[k-1])
            base = ahead[k - 1] if k else 0.0
            return (sum(min(r - base, d) for r in ahead[k:]) + d) / rate <= limit

        lo, hi = 1, len(ahead)  # the first k >= 1 that fits (fits is monotone in k); none: all done
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid
            else:
                lo = mid + 1
        k = lo if ahead else 0
        # Under sharing, the k-th shortest is done after each of the n has been served its seconds.
        wait, prev = 0.0, 0.0
        for i, r in enumerate(ahead[:k]):
            wait += (r - prev) * (len(ahead) - i) / rate
            prev = r
        # Past one budget the prediction is too uncertain to make a client wait on it: it
        # comes back by then and is told again (an early 429 costs next to nothing). While one
        # request only has been measured (start-up's silence), not past that request's time:
        # the first real one soon tells more.
        cap = budget_s if self.rate.measured >= 2 else self.rate.first_request_s
        return max(MIN_RETRY_AFTER_S, min(wait, cap))

    def promise(
        self, duration_s: float, retry_after_s: float, now: float | None = None, key: str | None = None
    ) -> None:
        """Record a refused request (fingerprint ``key``) told to come back in ``retry_after_s``:
        a request with ``key`` refused before keeps its first place, with this new due time."""
        now = time.monotonic() if now is None else now
        if key is None:
            self._anonymous += 1
            key = f"\0anonymous-{self._anonymous}"
        mine = self._returning(key, now)
        if mine is not None:
            mine.due, mine.duration = now + retry_after_s, duration_s
        else:
            self.waiting.setdefault(key, []).append(_Waiting(now, duration_s, now + retry_after_s))

    def admit(
        self, rid: str, duration_s: float, budget_s: float | None, now: float | None = None, key: str | None = None
    ) -> None:
        """Count ``rid`` (fingerprint ``key``) as admitted (its budget from ``now``; None: no
        deadline); the oldest refusal under ``key`` is settled."""
        now = time.monotonic() if now is None else now
        self._advance(now)
        mine = self._returning(key, now)
        if mine is not None:
            self.waiting[key].remove(mine)
            if not self.waiting[key]:
                del self.waiting[key]
        target = math.inf if budget_s is None else now + HEADROOM * budget_s
        self.admitted[rid] = _Admitted(duration_s, target, self._virtual, now)
        rate, speed = self.rate.admit, self.rate.speed
        if rate and speed:  # every prediction as of now, the newcomer's included
            for entry, seconds, _ in self._finishes(rate, speed):
                entry.predicted = now + seconds

    def resize(self, rid: str, duration_s: float) -> None:
        """The exact duration of an admitted request, known once its audio is decoded."""
        entry = self.admitted.get(rid)
        if entry is not None:
            entry.duration = duration_s

    def release(self, rid: str, now: float | None = None, *, finished: bool = False) -> None:
        """``rid`` left: ``finished`` (its result, or its deadline, came) or not (it failed, or
        its client went away). A finished one's time against the model's prediction for it
        goes into ``correction``."""
        now = time.monotonic() if now is None else now
        self._advance(now)
        entry = self.admitted.pop(rid, None)
        if finished and entry is not None and entry.predicted is not None and entry.predicted > entry.since:
            self.errors.append((now - entry.since) / (entry.predicted - entry.since))
