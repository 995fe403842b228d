"""``oasr bench --workload streaming``: how many live streams one engine keeps at real time.

N streams play a real recording (looped) at real speed, each fed one chunk of audio every
chunk period, their starts staggered across the period as independent callers' would be.
The engine steps whenever a chunk is ready, every ready stream in one batched forward. A
chunk's latency runs from the moment its last needed sample was fed to the end of the step
that encoded (and searched) it; the chunks of a stream's end (the reference's tail padding,
encoded once the input ends) are timed apart, as the last sample -> final result latency.
N is kept when the p95 latency stays under the chunk duration; the largest kept N is the
capacity. The same harness with one stream per forward
(``one_stream_loop``: sherpa-onnx's and NeMo's loop, each stream decoded on its own) is the
peer, measured in the same run.
"""

from __future__ import annotations

import math
import resource
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from oasr.cli.bench_transports import percentiles

__all__ = ["Player", "RealtimeResult", "capacity", "realtime_run", "sweep"]


@dataclass
class RealtimeResult:
    streams: int
    chunks: int
    p50_ms: float
    p95_ms: float
    max_ms: float
    wall_s: float
    busy_fraction: float
    mean_batch: float
    final_ms: float  # the slowest stream's last sample -> its final result (the tail flushed)
    cache_bytes_per_stream: float  # the most encoder cache in use during the run, per stream
    rss_mb: float

    def keeps_up(self, chunk_s: float) -> bool:
        return self.p95_ms < chunk_s * 1000.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Player:
    """The pieces N streams push at real speed: one ``chunk_s`` piece of ``signal`` each chunk
    period, starts staggered across the period; when each was pushed (seconds from ``t0``)."""

    def __init__(self, signal: np.ndarray, n: int, piece: int, chunk_s: float) -> None:
        self.signal = signal
        self.piece = piece
        self.chunk_s = chunk_s
        self.n_pushes = math.ceil(len(signal) / piece)
        self.offsets = [i * chunk_s / n for i in range(n)]
        self.pushed = [0] * n
        self.push_times: list[list[float]] = [[] for _ in range(n)]
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def due(self):
        """``(stream, samples, last)`` for every piece due now; each is noted as pushed once
        the caller asks for the next."""
        now = self.now()
        for i in range(len(self.pushed)):
            while self.pushed[i] < self.n_pushes and self.offsets[i] + self.pushed[i] * self.chunk_s <= now:
                a = self.pushed[i] * self.piece
                yield i, self.signal[a : a + self.piece], self.pushed[i] + 1 == self.n_pushes
                self.push_times[i].append(self.now())
                self.pushed[i] += 1

    def done(self, i: int | None = None) -> bool:
        """Whether stream ``i`` (every stream) has pushed all its pieces."""
        idx = range(len(self.pushed)) if i is None else [i]
        return all(self.pushed[j] == self.n_pushes for j in idx)

    def pushed_at(self, i: int, samples: int) -> float:
        """When stream ``i`` pushed the piece holding its sample ``samples - 1``."""
        return self.push_times[i][min(len(self.push_times[i]) - 1, max(0, math.ceil(samples / self.piece) - 1))]

    def wait(self) -> None:
        """Sleep until the next piece is due (at most 5 ms; 1 ms once all are pushed)."""
        nxt = min(
            (self.offsets[i] + p * self.chunk_s for i, p in enumerate(self.pushed) if p < self.n_pushes), default=None
        )
        time.sleep(0.001 if nxt is None else max(0.0, min(0.005, nxt - self.now())))


def realtime_run(
    engine,
    audio: np.ndarray,
    n_streams: int,
    *,
    chunk_s: float,
    seconds: float,
    one_stream_loop: bool = False,
    options: dict | None = None,
) -> RealtimeResult:
    """Play ``n_streams`` streams of ``seconds`` of ``audio`` at real speed through ``engine``
    (an ``ASREngine`` whose ``max_streams`` >= n_streams) and time every chunk."""
    from oasr.engine.streaming.api import validate_stream_options

    core = engine._streaming()
    sr = core.sampling_rate
    framing = core.frontend.framing
    plan = core.plan
    piece = int(round(chunk_s * sr))
    total = int(seconds * sr)
    reps = math.ceil(total / max(1, len(audio)))
    signal = np.tile(audio.astype(np.float32), reps)[:total]
    opts, sopts = validate_stream_options(engine, {"partials": True, **(options or {})})
    core.max_batch = 1 if one_stream_loop else max(1, core.runtime.max_streams)
    sids = [core.open(opts, sopts) for _ in range(n_streams)]

    def need(k: int) -> int:  # samples chunk k reads (its window starts head_frames of padding early)
        last = max(0, k * plan.stride_frames + plan.window_frames - 1 - plan.head_frames)
        return last * framing.hop - framing.left_pad + framing.length

    final_at: dict[int, float] = {}  # stream -> seconds from its last sample to its last final
    peak_bytes = 0
    latencies: list[float] = []
    batches: list[int] = []
    busy = 0.0
    player = Player(signal, n_streams, piece, chunk_s)
    try:
        while True:
            for i, samples, last in player.due():
                core.push(sids[i], samples)
                if last:
                    core.finish(sids[i])
            if core.has_work():
                before = [core.chunks_encoded_of(sid) for sid in sids]
                s0 = time.perf_counter()
                core.step()
                busy += time.perf_counter() - s0
                end = player.now()
                peak_bytes = max(peak_bytes, core.runtime.bytes_in_use())
                n = 0
                for i, sid in enumerate(sids):
                    after = core.chunks_encoded_of(sid)
                    for k in range(before[i], after):
                        n += 1
                        if need(k) > total:  # the end-of-stream flush (tail padding): timed as final_ms
                            continue
                        latencies.append(end - player.pushed_at(i, need(k)))
                    if player.done(i) and i not in final_at and sid not in core.streams:
                        final_at[i] = end - player.push_times[i][-1]
                if n:
                    batches.append(n)
                continue
            if player.done() and not core.streams:
                break
            player.wait()
        wall = player.now()
    finally:
        for sid in sids:
            core.close(sid)
            core.pop_result(sid)
    return RealtimeResult(
        streams=n_streams,
        chunks=len(latencies),
        **percentiles(latencies),
        wall_s=wall,
        busy_fraction=busy / wall if wall else 0.0,
        mean_batch=statistics.mean(batches) if batches else 0.0,
        final_ms=1000 * max(final_at.values(), default=0.0),
        cache_bytes_per_stream=peak_bytes / n_streams,
        rss_mb=_rss_mb(),
    )


def sweep(run_n, counts: list[int], chunk_s: float, label: str, log=None) -> tuple[int, list]:
    """``run_n(n)`` for each N of ``counts`` in order, stopping after the first that falls behind;
    (the largest N that kept up, every run)."""
    runs = []
    best = 0
    for n in counts:
        r = run_n(n)
        runs.append(r)
        if log is not None:
            line = (
                f"{label} {n:4d} streams: p50 {r.p50_ms:7.1f} ms p95 {r.p95_ms:7.1f} ms max {r.max_ms:7.1f} ms "
                f"({r.chunks} chunks), final {r.final_ms:6.1f} ms"
            )
            if isinstance(r, RealtimeResult):
                line += f", busy {100 * r.busy_fraction:5.1f} %, mean batch {r.mean_batch:5.1f}"
            log(line + (f"; FAILED: {r.failed}" if getattr(r, "failed", None) else ""))
        if not r.keeps_up(chunk_s):
            break
        best = n
    return best, runs


def capacity(
    engine,
    audio: np.ndarray,
    *,
    chunk_s: float,
    seconds: float,
    counts: list[int],
    one_stream_loop: bool = False,
    options: dict | None = None,
    log=None,
) -> tuple[int, list[RealtimeResult]]:
    """Run ``counts`` in order, stopping after the first N that falls behind; (the largest N
    that kept up, every run). One stream of 2 s decoded as fast as it goes first warms the
    engine up (first-call allocations), untimed."""
    warm = engine.open_stream(**(options or {}))
    warm.feed(np.resize(audio.astype(np.float32), int(2.0 * engine._streaming().sampling_rate)))
    warm.finish()
    return sweep(
        lambda n: realtime_run(
            engine, audio, n, chunk_s=chunk_s, seconds=seconds, one_stream_loop=one_stream_loop, options=options
        ),
        counts,
        chunk_s,
        "engine, one-stream loop" if one_stream_loop else "engine, batched",
        log,
    )


TRANSPORTS = ("engine", "ws", "realtime")
POLICY_CHUNK_MS = 1000.0  # the audio a client sends at a time to a model outside the chunked core
PEERS = {False: "batched", True: "one_stream_loop"}


def run_streaming(args, audio_dir: Path | None) -> int:
    """``oasr bench --workload streaming``: for each ``--model``, the live streams kept at real
    time through each of ``--transports``, batched and as a one-stream loop; printed, and
    written as JSON with ``--json`` and a table with ``--markdown``. A model or transport
    that cannot stream is reported as skipped, with the reason. ``audio_dir`` (the benchmark
    audio found, or None) holds the clip used without ``--short-clip``."""
    import json
    import os
    import platform
    import sys

    from oasr.audio import load_audio

    models = args.model if isinstance(args.model, list) else [args.model]
    transports = list(dict.fromkeys(args.transports))
    counts = sorted(set(args.stream_counts))
    clip = args.short_clip or _default_clip(audio_dir)
    log = lambda m: print(f"oasr bench streaming: {m}", file=sys.stderr, flush=True)  # noqa: E731
    load = os.getloadavg()
    log(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; transports {' '.join(transports)}; clip {clip}")
    report: dict[str, Any] = {
        "settings": {
            "transports": transports,
            "stream_counts": counts,
            "seconds_per_stream": args.stream_seconds,
            "threads": args.threads or os.cpu_count(),
            "clip": os.path.basename(clip),
            "beam_size": args.beam_size,
        },
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_average_at_start": load},
        "models": {},
    }
    for model in models:
        report["models"][str(model)] = _bench_model(args, model, clip, load_audio, counts, transports, log)
    report["machine"]["load_average_at_end"] = os.getloadavg()
    table = markdown_table(report)
    print(table)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.markdown is not None:
        args.markdown.write_text(table, encoding="utf-8")
    return 0


def _bench_model(args, model: str, clip: str, load_audio, counts: list[int], transports: list[str], log) -> dict:
    """One model's capacities through each transport (see ``run_streaming``)."""
    from oasr.cli.bench_transports import TransportUnavailable
    from oasr.engine.engine import ASREngine

    engine = ASREngine(
        model,
        num_threads=args.threads,
        max_streams=max(counts),
        stream_chunk_ms=args.chunk_ms,
        stream_left_chunks=args.left_chunks,
        architecture=getattr(args, "architecture", None),
    )
    out: dict[str, Any] = {"architecture": engine.loaded.architecture, "format": engine.loaded.format}
    options = {"beam_size": args.beam_size} if args.beam_size and args.beam_size > 1 else {}
    try:
        engine.open_stream(sample_rate=engine.sampling_rate).close()
    except (ValueError, TypeError) as e:
        out["skipped"] = f"the engine does not stream it: {e}"
        log(f"{model}: skipped, {out['skipped']}")
        return out
    core = _chunked_core(engine)  # None: a streaming policy over an offline model (timed through open_stream)
    if core is not None:
        chunk_s = core.plan.stride_frames * core.frontend.frame_shift_s
        out.update(runtime=core.runtime.kind, decode_type=core.decode_type)
    else:
        chunk_s = (args.chunk_ms or POLICY_CHUNK_MS) / 1000.0
        out.update(runtime="open_stream")
    sr = engine.sampling_rate
    audio = load_audio(clip, sr)
    signal = np.resize(audio.astype(np.float32), int(args.stream_seconds * sr))
    out["chunk_ms"] = round(1000 * chunk_s, 3)
    log(f"{model} ({out['architecture']}): chunk {1000 * chunk_s:.0f} ms, {out['runtime']} runtime")
    for transport in transports:
        res: dict[str, Any] = {}
        out[transport] = res
        for loop, name in PEERS.items():
            label = f"{transport}, {name.replace('_', '-')}"
            try:
                if transport == "engine" and core is None:
                    best, runs = _policy_sweep(engine, signal, sr, chunk_s, counts, loop, options, label, log)
                elif transport == "engine":
                    best, runs = capacity(
                        engine,
                        audio,
                        chunk_s=chunk_s,
                        seconds=args.stream_seconds,
                        counts=counts,
                        one_stream_loop=loop,
                        options=options,
                        log=log,
                    )
                else:
                    spec = {
                        "model": str(model),
                        "threads": args.threads,
                        "max_streams": max(counts),
                        "chunk_ms": args.chunk_ms,
                        "left_chunks": args.left_chunks,
                        "architecture": getattr(args, "architecture", None),
                        "options": options,
                        "one_stream_loop": loop,
                    }
                    best, runs = _server_sweep(transport, spec, engine, clip, signal, sr, chunk_s, counts, label, log)
            except TransportUnavailable as e:
                log(f"{label}: skipped, {e}")
                if not loop:  # the transport itself is not there for this model
                    res["skipped"] = str(e)
                    break
                res[name] = {"skipped": str(e)}
                continue
            res[name] = {"capacity": best, "runs": [r.to_dict() for r in runs]}
        if "skipped" not in res:
            b, p = res["batched"]["capacity"], res["one_stream_loop"].get("capacity")
            res["capacity_ratio"] = b / p if p else None
    return out


def _chunked_core(engine):
    """The engine's ``StreamingCore`` (chunks of a streaming encoder), or None when its streams
    are scheduled otherwise (a policy over an offline model) or it cannot stream."""
    from oasr.engine.streaming.core import StreamingCore

    try:
        core = engine._streaming()
    except (ValueError, TypeError):
        return None
    return core if isinstance(core, StreamingCore) else None


def _policy_sweep(engine, signal, sr, chunk_s, counts, loop, options, label, log) -> tuple[int, list]:
    """The engine transport of a model streamed outside the chunked core (``open_stream_clients``)."""
    from oasr.cli.bench_transports import TransportUnavailable, open_stream_clients

    if loop:
        raise TransportUnavailable("one stream per forward: this model's streams are not batched by the chunked core")
    timing = need(engine, sr)
    return sweep(
        lambda n: open_stream_clients(engine, signal, sr, n, chunk_s=chunk_s, need=timing, options=options),
        counts,
        chunk_s,
        label,
        log,
    )


def need(engine, rate: int):
    """``end_s -> samples``: how much audio at ``rate`` Hz the engine's decode of the stream up to
    ``end_s`` seconds read, for the clients' latencies: the chunks encoded by then
    (``end_s / chunk``) and the last sample their windows read (as ``realtime_run`` times them)."""
    core = _chunked_core(engine)
    if core is None:  # a policy's events: end is where the audio it read ends
        return lambda end_s: math.ceil(end_s * rate)
    framing = core.frontend.framing
    plan = core.plan
    chunk_s = plan.stride_frames * core.frontend.frame_shift_s
    scale = rate / core.sampling_rate

    def samples(end_s: float) -> int:
        k = max(1, round(end_s / chunk_s))  # chunks encoded when the decode reached end_s
        last = max(0, (k - 1) * plan.stride_frames + plan.window_frames - 1 - plan.head_frames)
        return math.ceil((last * framing.hop - framing.left_pad + framing.length) * scale)

    return samples


def _server_sweep(transport, spec, engine, clip, signal, sr, chunk_s, counts, label, log) -> tuple[int, list]:
    """``sweep`` through an ``oasr serve`` child (``spec``) with ``ws`` or ``realtime`` clients."""
    from oasr.audio import load_audio
    from oasr.cli.bench_transports import (
        REALTIME_RATE,
        ServerChild,
        pcm16,
        realtime_clients,
        reference_timeline,
        ws_clients,
    )

    options = spec["options"]
    with ServerChild(spec) as server:
        if transport == "ws":

            def run_n(n: int):
                return ws_clients(server.url, signal, sr, n, chunk_s=chunk_s, need=need(engine, sr), options=options)
        else:
            rt = np.resize(load_audio(clip, REALTIME_RATE), len(signal) * REALTIME_RATE // sr)
            rt = (pcm16(rt) / 32768.0).astype(np.float32)  # what the server reads back
            timeline = reference_timeline(engine, rt, REALTIME_RATE, chunk_s, options)

            def run_n(n: int):
                return realtime_clients(
                    server.url,
                    rt,
                    n,
                    chunk_s=chunk_s,
                    timeline=timeline,
                    need=need(engine, REALTIME_RATE),
                    model=server.model_name,
                )

        run_n(1)  # warm-up, untimed (the server's first stream allocates)
        return sweep(run_n, counts, chunk_s, label, log)


def markdown_table(report: dict) -> str:
    """Streams kept at real time, one row per model and transport."""
    lines = [
        "| model | architecture | chunk ms | transport | batched | one-stream loop | ratio "
        "| p95 ms at the batched capacity (1 stream if none kept) |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for model, m in report["models"].items():
        name = Path(model).name
        if "skipped" in m:
            lines.append(f"| {name} | {m['architecture']} | | | skipped: {m['skipped']} | | | |")
            continue
        for transport in report["settings"]["transports"]:
            t = m[transport]
            if "skipped" in t:
                head = f"| {name} | {m['architecture']} | {m['chunk_ms']:g} | {transport}"
                lines.append(f"{head} | skipped: {t['skipped']} | | | |")
                continue
            b, p = t["batched"], t["one_stream_loop"]
            kept = [r for r in b["runs"] if r["streams"] == max(1, b["capacity"])]
            p95 = f"{kept[0]['p95_ms']:.0f}" if kept else ""
            if kept and kept[0]["chunks"] == 0:
                p95 = "no chunk timed: no text came before the input ended"
            if kept and kept[0].get("first_seen_p95_ms") is not None:
                p95 += f" ({kept[0]['first_seen_p95_ms']:.0f} from first sight)"
            ratio = f"{t['capacity_ratio']:.2f}" if t.get("capacity_ratio") else ""
            loop = p.get("capacity", f"skipped: {p.get('skipped')}")
            lines.append(
                f"| {name} | {m['architecture']} | {m['chunk_ms']:g} | {transport} | {b['capacity']} | {loop} "
                f"| {ratio} | {p95} |"
            )
    return "\n".join(lines) + "\n"


def _default_clip(audio_dir: Path | None) -> str:
    from oasr.cli.common import CliError

    if audio_dir is None:
        raise CliError("--workload streaming: give --short-clip PATH (no benchmark audio found)", 2)
    for name in ("jfk.wav",):
        if (Path(audio_dir) / name).is_file():
            return str(Path(audio_dir) / name)
    wavs = sorted(Path(audio_dir).glob("*.wav"))
    if not wavs:
        raise CliError(f"--workload streaming: no .wav in {audio_dir}", 2)
    return str(wavs[0])
