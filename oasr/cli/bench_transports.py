"""Live streams through the server, timed from the clients' side (``oasr bench --workload streaming``).

The engine transport (``oasr.cli.bench_streaming.realtime_run``) times chunks inside the
process. The two server transports put an ``oasr serve`` application in a child process
(``serve_child``: the same ``create_app`` ``oasr serve`` runs, on the same engine settings,
optionally with one stream per forward) and play N clients against it from this process, each
sending one chunk of PCM16 audio every chunk period, starts staggered across the period:

* ``ws``: oasr's ``/v1/audio/stream``. A ``partial`` event carries ``end``, the audio decoded
  so far (a ``final``'s ``end`` is its last token's time, not that); its latency runs from the
  moment the client sent the last sample that decode read to the moment the event arrived.
  Partials come when the text changes, so the chunks timed are those whose decode changed the
  text (``chunks`` in the result; every chunk is decoded the same way).
* ``realtime``: OpenAI's ``/v1/realtime?intent=transcription``: ``session.update`` (a
  transcription session, ``audio/pcm`` at 24 kHz, no turn detection), then
  ``input_audio_buffer.append`` (base64 PCM16) per chunk, ``input_audio_buffer.commit`` at
  the end; ``conversation.item.input_audio_transcription.delta`` / ``.completed`` back.
  A delta carries no audio time, so each is placed by its text: the stream's transcript so
  far is looked up in a reference timeline (``reference_timeline``: the same samples streamed
  in-process, chunk by chunk, each partial's text and ``end``). A server that sends only text
  two successive partials agree on (oasr's route: no sent text is taken back) cannot send a
  chunk's text before the next chunk is decoded, so a delta is timed from the chunk at which
  the reference's partials first agreed on its text (``p95_ms``: the server's own delay, what
  load moves; N is kept on it) and also from the chunk whose partial first showed it
  (``first_seen_p95_ms``: what a user waits, about one chunk more). Deltas whose text the
  reference never had (a different decode) are counted in ``unplaced``, not timed.

A stream's final latency runs from its last chunk sent to ``done`` / ``.completed``. N is kept
when every stream was served and the p95 chunk latency stays under the chunk.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "REALTIME_RATE",
    "ClientResult",
    "ServerChild",
    "TransportUnavailable",
    "open_stream_clients",
    "pcm16",
    "percentiles",
    "reference_timeline",
    "realtime_clients",
    "ws_clients",
]

REALTIME_RATE = 24000  # the Realtime API's audio/pcm rate
CONNECT_TIMEOUT_S = 30.0


class TransportUnavailable(Exception):
    """The server cannot take this transport for this model (no such route, a model that
    does not stream): the transport is skipped with this message."""


class StreamFailed(Exception):
    """A stream was refused or cut by the server (the N that caused it is not kept)."""


@dataclass
class ClientResult:
    """N client streams played at real time against a server."""

    streams: int
    chunks: int  # chunks timed (those an event covered first)
    p50_ms: float
    p95_ms: float
    max_ms: float
    final_ms: float  # the slowest stream's last chunk sent -> its done / completed event
    wall_s: float
    failed: str | None = None  # the first refusal or error, if a stream was not served
    unplaced: int = 0  # realtime: deltas whose text the reference timeline never had
    first_seen_p95_ms: float | None = None  # realtime: timed from the partial that first showed the text

    def keeps_up(self, chunk_s: float) -> bool:
        return self.failed is None and self.chunks > 0 and self.p95_ms < chunk_s * 1000.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Timing:
    sent: list[float] = field(default_factory=list)  # perf_counter when chunk k was sent
    covered: list[tuple[float, float]] = field(default_factory=list)  # (received at, audio seconds covered)
    first_seen: list[tuple[float, float]] = field(default_factory=list)  # realtime: placed by first sight
    final_s: float | None = None
    unplaced: int = 0


def pcm16(samples: np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1] -> little-endian int16 (what the clients send; the server reads
    them back as ``x / 32768``)."""
    return np.clip(np.round(samples * 32768.0), -32768, 32767).astype("<i2")


def percentiles(latencies: list[float]) -> dict[str, float]:
    """p50 / p95 / max in ms (0 when nothing was timed)."""
    lat = sorted(latencies) or [0.0]
    return {
        "p50_ms": 1000 * statistics.median(lat),
        "p95_ms": 1000 * lat[min(len(lat) - 1, int(0.95 * len(lat)))],
        "max_ms": 1000 * lat[-1],
    }


def _chunk_latencies(covered: list[tuple[float, float]], sent: list[float], piece: int, need) -> list[float]:
    """Each chunk's latency: its last needed sample sent -> the first event covering it."""
    out = []
    seen: set[int] = set()
    total = len(sent) * piece
    for got_at, end_s in covered:
        e = need(end_s)  # the samples the decode up to end_s read (its last frame's window)
        if end_s <= 0 or e > total:  # nothing decoded yet, or the tail padding (timed as the final)
            continue
        k = max(0, math.ceil(e / piece) - 1)
        if k not in seen:
            seen.add(k)
            out.append(got_at - sent[k])
    return out


def _result(n: int, timings: list[_Timing], piece: int, need, wall: float, failed: str | None) -> ClientResult:
    latencies = [x for t in timings for x in _chunk_latencies(t.covered, t.sent, piece, need)]
    first = [x for t in timings for x in _chunk_latencies(t.first_seen, t.sent, piece, need)]
    finals = [t.final_s for t in timings if t.final_s is not None]
    return ClientResult(
        streams=n,
        chunks=len(latencies),
        **percentiles(latencies),
        final_ms=1000 * max(finals, default=0.0),
        wall_s=wall,
        failed=failed,
        unplaced=sum(t.unplaced for t in timings),
        first_seen_p95_ms=percentiles(first)["p95_ms"] if first else None,
    )


async def _sleep_until(t: float) -> None:
    delay = t - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


def _refusal(e: Exception, route: str) -> Exception:
    """A failed WebSocket upgrade -> why (a missing route skips the transport)."""
    from websockets.exceptions import InvalidStatus

    if isinstance(e, InvalidStatus):
        status = e.response.status_code
        body = e.response.body.decode("utf-8", "replace")[:300] if e.response.body else ""
        if status in (403, 404):
            return TransportUnavailable(f"the server has no {route} (HTTP {status} on the upgrade)")
        if status == 400 and "streaming_unsupported" in body:
            return TransportUnavailable(f"the server does not stream this model: {body}")
        return StreamFailed(f"{route}: HTTP {status} {body}")
    return StreamFailed(f"{route}: {type(e).__name__}: {e}")


async def _connect(base_url: str, route: str, query: str, headers: dict | None):
    """A WebSocket to ``route`` on the server; a refused upgrade raised as ``_refusal`` says."""
    from websockets.asyncio.client import connect

    try:
        return await connect(
            base_url.replace("http", "ws", 1) + route + query,
            additional_headers=headers or {},
            max_size=None,
            open_timeout=CONNECT_TIMEOUT_S,
        )
    except Exception as e:
        raise _refusal(e, route) from None


async def _send_at_real_time(ws, messages, end, receive, start_at: float, chunk_s: float, t: _Timing) -> None:
    """Send message k at ``start_at + k * chunk_s`` (noting when in ``t.sent``), then ``end``,
    while ``receive`` (a coroutine) takes the events; its error, if any, is raised."""
    rx = asyncio.create_task(receive)
    for k, message in enumerate(messages):
        await _sleep_until(start_at + k * chunk_s)
        if rx.done():
            break
        await ws.send(message)
        t.sent.append(time.perf_counter())
    if not rx.done():
        await ws.send(end)
    await rx


async def _play(n: int, one, chunk_s: float) -> tuple[list[_Timing], float, str | None]:
    """Run ``one(i, start_at, timing)`` for N streams, starts staggered over a chunk."""
    timings = [_Timing() for _ in range(n)]
    t0 = time.perf_counter() + 0.2
    results = await asyncio.gather(
        *(one(i, t0 + i * chunk_s / n, timings[i]) for i in range(n)), return_exceptions=True
    )
    wall = time.perf_counter() - t0
    for r in results:
        if isinstance(r, TransportUnavailable):
            raise r
    failed = next((str(r) for r in results if isinstance(r, BaseException)), None)
    return timings, wall, failed


def ws_clients(
    base_url: str,
    samples: np.ndarray,
    sr: int,
    n: int,
    *,
    chunk_s: float,
    need,
    headers: dict | None = None,
    options=None,
) -> ClientResult:
    """N streams of ``samples`` (float, ``sr`` Hz) through ``/v1/audio/stream`` at real time;
    ``need(end_s)``: the samples the decode of the audio up to ``end_s`` reads."""

    route = "/v1/audio/stream"
    piece = int(round(chunk_s * sr))
    data = pcm16(samples)
    pieces = [data[a : a + piece].tobytes() for a in range(0, len(data), piece)]
    config = json.dumps({"sample_rate": sr, "sample_format": "pcm16", **(options or {})})

    async def one(i: int, start_at: float, t: _Timing) -> None:
        async with await _connect(base_url, route, "", headers) as ws:
            await ws.send(config)

            async def receive() -> None:
                async for message in ws:
                    event = json.loads(message)
                    kind = event.get("type")
                    if kind == "partial" and event.get("end") is not None:
                        t.covered.append((time.perf_counter(), float(event["end"])))
                    elif kind == "error":
                        if event.get("code") == "streaming_unsupported":
                            raise TransportUnavailable(f"the server does not stream this model: {event}")
                        raise StreamFailed(f"{route}: {event}")
                    elif kind == "done":
                        t.final_s = time.perf_counter() - t.sent[-1]
                        return
                raise StreamFailed(f"{route}: closed ({ws.close_code}) before done")

            await _send_at_real_time(ws, pieces, "done", receive(), start_at, chunk_s, t)

    timings, wall, failed = asyncio.run(_play(n, one, chunk_s))
    return _result(n, timings, piece, need, wall, failed)


def open_stream_clients(
    engine, samples: np.ndarray, sr: int, n: int, *, chunk_s: float, need, options=None
) -> ClientResult:
    """N streams of ``samples`` through ``engine.open_stream`` in-process, timed as the server
    transports time theirs (an event's ``end`` -> the chunk that completed it): the engine
    transport of a model whose streams do not go through the chunked core (a streaming policy
    over an offline model), whose steps run inside ``feed``."""
    piece = int(round(chunk_s * sr))
    pieces = [samples[a : a + piece] for a in range(0, len(samples), piece)]
    streams = [engine.open_stream(sample_rate=sr, **(options or {})) for _ in range(n)]
    timings = [_Timing() for _ in range(n)]
    offsets = [i * chunk_s / n for i in range(n)]

    def take(i: int, events) -> None:
        now = time.perf_counter()
        timings[i].covered += [(now, float(e.end)) for e in events if e.type == "partial" and e.end is not None]

    t0 = time.perf_counter()
    try:
        for k in range(len(pieces)):
            for i in range(n):  # offsets ascend with i
                delay = t0 + offsets[i] + k * chunk_s - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                timings[i].sent.append(time.perf_counter())
                take(i, streams[i].feed(pieces[k]))
                for j in range(n):  # the steps feed ran advanced the other streams too
                    take(j, streams[j].events())
        for i, stream in enumerate(streams):
            take(i, stream.finish())
            timings[i].final_s = time.perf_counter() - timings[i].sent[-1]
    finally:
        for stream in streams:
            stream.close()
    return _result(n, timings, piece, need, time.perf_counter() - t0, None)


def reference_timeline(engine, samples: np.ndarray, sr: int, chunk_s: float, options=None) -> list[tuple[float, str]]:
    """(audio seconds decoded, transcript so far) after each partial of ``samples`` streamed
    in-process chunk by chunk (``engine.open_stream``; partials only, a final's ``end`` being its
    last token's time): where a Realtime delta's text was reached."""
    piece = int(round(chunk_s * sr))
    stream = engine.open_stream(sample_rate=sr, **(options or {}))
    out: list[tuple[float, str]] = []
    try:
        for a in range(0, len(samples), piece):
            for e in stream.feed(samples[a : a + piece]):
                if e.type == "partial" and e.end is not None:
                    out.append((float(e.end), " ".join(e.text.split())))
        for e in stream.finish():
            if e.type == "partial" and e.end is not None:
                out.append((float(e.end), " ".join(e.text.split())))
    finally:
        stream.close()
    return out


def _place(timeline: list[tuple[float, str]], text: str) -> tuple[float, float] | None:
    """(audio seconds at which two successive reference partials first both had ``text``, at
    which one first had it), or None when none had it."""
    text = " ".join(text.split())
    first = None
    previous = None
    for end, ref in timeline:
        if ref.startswith(text):
            if first is None:
                first = end
            if previous is not None and previous.startswith(text):
                return end, first
        previous = ref
    return None if first is None else (timeline[-1][0], first)


def realtime_clients(
    base_url: str,
    samples: np.ndarray,
    n: int,
    *,
    chunk_s: float,
    timeline: list[tuple[float, str]],
    need,
    model: str | None,
    headers: dict | None = None,
) -> ClientResult:
    """N Realtime transcription sessions of ``samples`` (float, 24 kHz) at real time."""

    route = "/v1/realtime"
    sr = REALTIME_RATE
    piece = int(round(chunk_s * sr))
    data = pcm16(samples)
    appends = [
        json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(data[a : a + piece]).decode()})
        for a in range(0, len(data), piece)
    ]
    transcription = {"model": model} if model else {}
    update = json.dumps(
        {
            "type": "session.update",
            "session": {
                "type": "transcription",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": sr},
                        "transcription": transcription,
                        "turn_detection": None,
                    }
                },
            },
        }
    )

    async def one(i: int, start_at: float, t: _Timing) -> None:
        async with await _connect(base_url, route, "?intent=transcription", headers) as ws:
            await ws.send(update)
            while True:  # session.created, then session.updated (or an error naming what it refused)
                event = json.loads(await asyncio.wait_for(ws.recv(), CONNECT_TIMEOUT_S))
                if event.get("type") == "error":
                    raise StreamFailed(f"{route}: session.update refused: {event.get('error', event)}")
                if event.get("type") in ("session.updated", "transcription_session.updated"):
                    break
            text = ""

            async def receive() -> None:
                nonlocal text
                async for message in ws:
                    event = json.loads(message)
                    kind = event.get("type")
                    now = time.perf_counter()
                    if kind == "conversation.item.input_audio_transcription.delta":
                        text += event.get("delta") or ""
                        placed = _place(timeline, text)
                        if placed is None:
                            t.unplaced += 1
                        else:
                            t.covered.append((now, placed[0]))
                            t.first_seen.append((now, placed[1]))
                    elif kind == "conversation.item.input_audio_transcription.completed":
                        t.final_s = now - t.sent[-1]
                        return
                    elif kind in ("error", "conversation.item.input_audio_transcription.failed"):
                        raise StreamFailed(f"{route}: {event}")
                raise StreamFailed(f"{route}: closed ({ws.close_code}) before the transcription completed")

            commit = json.dumps({"type": "input_audio_buffer.commit"})
            await _send_at_real_time(ws, appends, commit, receive(), start_at, chunk_s, t)

    timings, wall, failed = asyncio.run(_play(n, one, chunk_s))
    return _result(n, timings, piece, need, wall, failed)


class ServerChild:
    """The ``oasr serve`` application on ``model`` in a child process (``serve_child``), until
    ``stop``. ``one_stream_loop``: its streaming loop forwards one stream at a time."""

    def __init__(self, spec: dict[str, Any], *, start_timeout_s: float = 300.0) -> None:
        import socket

        import httpx

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.log = Path(tempfile.mkstemp(prefix="oasr-bench-serve-", suffix=".log")[1])
        root = str(Path(__file__).resolve().parents[2])  # this checkout's oasr, wherever the bench runs
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        with open(self.log, "wb") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "oasr.cli.bench_transports", json.dumps({**spec, "port": port})],
                stdout=f,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=root,
            )
        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the benchmark server exited:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    models = httpx.get(self.url + "/v1/models", timeout=5).json()
                    self.model_name = models["data"][0]["id"]
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the benchmark server did not start:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.unlink(missing_ok=True)

    def __enter__(self) -> ServerChild:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve_child(spec: dict[str, Any]) -> int:
    """Serve ``spec["model"]`` as ``oasr serve`` does (``create_app`` on an ``AsyncEngine``,
    ``run_server`` on a bound socket); ``spec["one_stream_loop"]``: one stream per forward."""
    from oasr.engine.streaming.api import StreamingLoop
    from oasr.server.app import build_engine, create_app
    from oasr.server.lifecycle import bind_socket, run_server
    from oasr.server.settings import ServerSettings

    extra = {"architecture": spec["architecture"]} if spec.get("architecture") else {}
    settings = ServerSettings(
        model=spec["model"],
        host="127.0.0.1",
        port=spec["port"],
        num_threads=spec.get("threads") or 0,
        max_streams=spec["max_streams"],
        stream_chunk_ms=spec.get("chunk_ms"),
        stream_left_chunks=spec.get("left_chunks"),
        request_options=spec.get("options") or {},
        log_level="warning",
        extra_engine_config=extra,
    )
    with bind_socket(settings.host, settings.port) as sock:
        engine = build_engine(settings)
        try:
            if spec.get("one_stream_loop"):
                try:
                    engine._streams = StreamingLoop(engine)
                    engine._streams.core.max_batch = 1
                except (ValueError, TypeError):
                    pass  # the model does not stream: the routes refuse it, as oasr serve's do
            return run_server(create_app(settings, engine), settings, sock, graceful_s=1.0, engine=engine)
        finally:
            engine.shutdown()


if __name__ == "__main__":  # the server child of ServerChild
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # this file's folder (oasr/cli) is no place to import other packages from
    sys.exit(serve_child(json.loads(sys.argv[1])))
