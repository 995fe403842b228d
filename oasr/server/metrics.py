"""Prometheus metrics of one server, in a registry of its own (``GET /metrics``).

Request-side metrics (labels: ``endpoint`` = transcriptions / translations):

* ``oasr_requests_total{endpoint,status}``: audio requests answered, by HTTP status
  (401 / 413 refused before the route are counted too; 499 = the client went away).
* ``oasr_request_latency_seconds{endpoint}``: from the first byte of the request to
  the last byte of the response (for streams: the end of the stream).
* ``oasr_requests_in_flight``: audio requests being handled now.
* ``oasr_requests_cancelled_total``: requests whose client disconnected before the
  answer; their engine work was aborted.

Engine-side metrics, read from ``AsyncEngine.stats()`` at scrape time:

* ``oasr_queue_depth``: requests admitted to the engine and not finished (decoding
  audio, waiting or running); ``--max-queue`` bounds it.
* ``oasr_engine_preparing`` / ``oasr_engine_running_requests``: parts of the above.
* ``oasr_running_batch_rows``: decode rows in the running batches now.
* ``oasr_engine_waiting_tasks``: decode tasks waiting to join a running batch.
* ``oasr_decode_joins_running_total``: decode tasks that joined a decode batch
  already running (continuous batching at work).
* ``oasr_audio_seconds_total``: seconds of audio admitted to the engine.
* ``oasr_engine_steps_total``; ``oasr_engine_requests_total{outcome}`` (finished,
  failed, aborted).
* Admission (``oasr.engine.admission``): ``oasr_admission_refused_total{reason}``: requests
  answered 429 before any work was spent on them (``deadline``: not predicted to finish
  within their budget; ``queue_full``: ``--max-queue`` reached);
  ``oasr_deadline_misses_total``: admitted requests cut at their deadline all the same (504:
  the prediction was badly wrong); ``oasr_engine_prepared_total``: requests whose audio
  was decoded; ``oasr_decode_rate``: audio seconds decoded per wall second, as admission
  measures it (0 before the first measurement); ``oasr_admitted_audio_seconds``: audio
  admitted and not finished; ``oasr_admission_correction``: the factor admission multiplies
  its predictions by, from how late recent requests finished against them (1: on time).

Live streams (``/v1/audio/stream``):

* ``oasr_stream_connections``: WebSocket sessions open now (``--max-streams`` bounds it).
* ``oasr_stream_sessions_total{code}``: sessions ended, by the close code the server sent
  (1000 normal, 1003 / 1007 / 1008 / 1011 / 1013: see ``oasr.server.streaming``), by how
  the client's side ended it (0: the client closed the WebSocket; 1006: the connection
  dropped without a close frame; 1002 / 1007 / 1009: the WebSocket layer failed it, see
  ``oasr.server.streaming.disconnect_label``) or by the HTTP status that refused the
  upgrade (429, 503).
* from ``StreamingCore.stats()`` at scrape time: ``oasr_streams_active`` (streams holding
  an encoder cache slot), ``oasr_streams_capacity``, ``oasr_stream_cache_bytes`` (the
  encoder caches' memory), ``oasr_stream_chunks_total``, ``oasr_stream_steps_total``;
  ``oasr_stream_loop_up`` (0 once the streaming loop died: ``/health`` answers 503) and
  ``oasr_stream_loop_faults_total`` (steps that failed outside a stream's own guard: their
  streams got ``engine_error``, the loop went on).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0)


class _EngineCollector:
    def __init__(self, engine_ref) -> None:
        self._engine_ref = engine_ref  # a callable returning the engine (or None before startup)

    def collect(self):
        engine = self._engine_ref()
        if engine is None:
            return
        s = engine.stats()
        yield GaugeMetricFamily("oasr_queue_depth", "Requests admitted to the engine and not finished", s.admitted)
        yield GaugeMetricFamily("oasr_engine_preparing", "Requests whose audio is being decoded", s.preparing)
        yield GaugeMetricFamily("oasr_engine_running_requests", "Requests in the decode loop", s.running_requests)
        yield GaugeMetricFamily("oasr_running_batch_rows", "Decode rows in the running batches", s.running_rows)
        yield GaugeMetricFamily("oasr_engine_waiting_tasks", "Decode tasks waiting to join a batch", s.waiting_tasks)
        yield CounterMetricFamily(
            "oasr_decode_joins_running", "Decode tasks that joined an already running decode batch", s.joins_running
        )
        yield CounterMetricFamily("oasr_audio_seconds", "Seconds of audio admitted to the engine", s.audio_seconds)
        yield CounterMetricFamily("oasr_engine_steps", "Engine steps", s.steps)
        outcomes = CounterMetricFamily("oasr_engine_requests", "Engine requests by outcome", labels=["outcome"])
        outcomes.add_metric(["finished"], s.finished)
        outcomes.add_metric(["failed"], s.failed)
        outcomes.add_metric(["aborted"], s.aborted)
        yield outcomes
        refused = CounterMetricFamily(
            "oasr_admission_refused", "Requests refused before any work was spent on them", labels=["reason"]
        )
        refused.add_metric(["deadline"], s.refused_deadline)
        refused.add_metric(["queue_full"], s.refused_queue_full)
        yield refused
        yield CounterMetricFamily(
            "oasr_deadline_misses", "Admitted requests cut at their deadline all the same", s.deadline_misses
        )
        yield CounterMetricFamily("oasr_engine_prepared", "Requests whose audio was decoded", s.prepared)
        yield GaugeMetricFamily("oasr_decode_rate", "Audio seconds decoded per wall second (admission)", s.decode_rate)
        yield GaugeMetricFamily(
            "oasr_admitted_audio_seconds", "Audio seconds admitted and not finished", s.backlog_seconds
        )
        yield GaugeMetricFamily(
            "oasr_admission_correction", "Factor on admission's predictions (recent errors)", s.prediction_correction
        )
        yield from _streaming_metrics(engine)


def _streaming_metrics(engine):
    loop = getattr(engine, "streaming", None)
    if loop is not None:
        s = loop.core.stats()
        up, faults = loop.alive, loop.faults
    else:  # no stream opened yet: nothing allocated
        capacity = getattr(getattr(engine, "config", None), "max_streams", 0)
        s = dict.fromkeys(("streams_active", "stream_chunks_encoded", "stream_steps", "stream_cache_bytes"), 0)
        s["streams_capacity"] = capacity
        up, faults = True, 0
    yield GaugeMetricFamily("oasr_stream_loop_up", "1 while the streaming loop runs (or has not started)", int(up))
    yield CounterMetricFamily("oasr_stream_loop_faults", "Streaming steps that failed outside a stream's guard", faults)
    yield GaugeMetricFamily("oasr_streams_active", "Live streams holding an encoder cache slot", s["streams_active"])
    yield GaugeMetricFamily("oasr_streams_capacity", "Encoder cache slots for live streams", s["streams_capacity"])
    yield GaugeMetricFamily("oasr_stream_cache_bytes", "Memory of the streams' encoder caches", s["stream_cache_bytes"])
    yield CounterMetricFamily("oasr_stream_chunks", "Stream chunks encoded", s["stream_chunks_encoded"])
    yield CounterMetricFamily("oasr_stream_steps", "Batched streaming steps", s["stream_steps"])


class ServerMetrics:
    """The server's metrics and their registry."""

    def __init__(self, engine_ref) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "oasr_requests", "Audio requests answered, by HTTP status", ["endpoint", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "oasr_request_latency_seconds",
            "Audio request latency (request start to response end)",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge("oasr_requests_in_flight", "Audio requests being handled", registry=self.registry)
        self.cancelled = Counter(
            "oasr_requests_cancelled", "Requests aborted because the client disconnected", registry=self.registry
        )
        self.stream_connections = Gauge(
            "oasr_stream_connections", "WebSocket stream sessions open", registry=self.registry
        )
        self.stream_sessions = Counter(
            "oasr_stream_sessions",
            "WebSocket stream sessions ended, by close code (0: client gone) or refusing HTTP status",
            ["code"],
            registry=self.registry,
        )
        self.registry.register(_EngineCollector(engine_ref))
