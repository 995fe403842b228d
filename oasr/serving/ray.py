"""``oasr serve --ray``: the OpenAI-compatible app as a Ray Serve deployment of engine replicas.

Each replica is one Ray actor holding one ``AsyncEngine`` (its own continuous batching) and
the unchanged FastAPI app of ``oasr.server.app.create_app`` (every route, format, SSE, the
limits and the API key of ``ServerSettings``); Ray Serve's HTTP proxy spreads requests over
the replicas. The life of a replica:

1. the constructor loads the model (``build_engine``) and decodes one second of silence
   (``warm_up``) -- a replica that cannot decode never takes traffic, and Ray retries it;
2. ``__serve_build_asgi_app__`` wraps the engine in ``create_app`` and adds the replica's
   id as the ``x-oasr-replica`` response header and as ``oasr_replica_info{replica}`` on
   ``/metrics`` (a scrape of ``/metrics`` through the proxy answers from one replica). For
   every replica at once, a thread copies the engine's figures every ``metrics_interval_s``
   into Ray Serve metrics (``ray_oasr_queue_depth``, ``ray_oasr_running_batch_rows``,
   ``ray_oasr_engine_requests_total{outcome}``, ... labelled ``deployment`` / ``replica``),
   which each node's Ray metrics port serves beside Ray's own ``ray_serve_*`` series;
3. ``check_health`` (called by the Serve controller every ``health_check_period_s``) fails
   once the engine's decode loop has died, so Ray replaces the replica; the requests still
   waiting on it are answered 503 at once by the app's drain, as in a single process;
4. a replica actor that dies (killed, OOM, node lost) is restarted by the Serve controller;
   the requests that were in flight on it get a 5xx from the proxy (never retried: an audio
   request is not known to be idempotent), the others carry on on the other replicas.

Admission (``oasr.engine.admission``) is each replica's, as in one process: a request its
engine cannot finish within its budget is answered 429 with ``Retry-After`` before any work.
Ray Serve's proxy hands a replica's answer to the client as it is (status, ``Retry-After``,
OpenAI's error body); what it must not do is hold requests in its own queue, where the
client's deadline runs and no replica has looked at them (the 429 would come late, or the
request be admitted with a budget the client has partly spent waiting). So the proxy sends a
replica up to ``max_queue`` requests at once (``max_ongoing_requests``, the replica's own
bound), choosing the less loaded of two replicas, and the replica decides at once. Its own
queue is only used once every replica holds ``max_queue`` requests; it too is bounded
(``max_queued_requests``) and answers 429 with ``Retry-After: 1`` past that, where this
Ray Serve has ``BackpressureConfig`` (its default is a plain-text 503).

Entry points: ``build_app(model=..., **options)`` (Python) and ``app_builder(args)`` (named
by ``serve run oasr.serving.ray:app_builder model=whisper-base num_replicas=2`` or a Serve
config file, ``examples/ray_serve.yaml``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
from typing import Any

from ray import serve
from ray.serve.config import AutoscalingConfig

from oasr.server.settings import ServerSettings
from oasr.serving.common import parse_autoscale

log = logging.getLogger("oasr.serving")

REPLICA_HEADER = "x-oasr-replica"
DEPLOYMENT_NAME = "OasrServer"
DEFAULT_APP_NAME = "oasr"

_SETTINGS_FIELDS = {f.name: f for f in dataclasses.fields(ServerSettings)}


class ReplicaHeader:
    """ASGI middleware: every HTTP response names the replica that answered it."""

    def __init__(self, app, replica: str) -> None:
        self.app = app
        self.value = replica.encode("latin-1")

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), (REPLICA_HEADER.encode(), self.value)]
            await send(message)

        await self.app(scope, receive, send_with_header)


class _ReplicaCollector:
    """``oasr_replica_info{replica,deployment,node}`` = 1 on the answering replica's ``/metrics``."""

    def __init__(self, replica: str, deployment: str) -> None:
        self.labels = [replica, deployment, os.uname().nodename]

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        info = GaugeMetricFamily(
            "oasr_replica_info",
            "The Ray Serve replica this scrape was answered by",
            labels=["replica", "deployment", "node"],
        )
        info.add_metric(self.labels, 1.0)
        yield info


class _RayMetrics:
    """The engine's figures as Ray Serve metrics (tagged with the deployment and replica by Ray)."""

    GAUGES = {
        "admitted": ("oasr_queue_depth", "Requests admitted to the engine and not finished"),
        "running_requests": ("oasr_engine_running_requests", "Requests in the decode loop"),
        "running_rows": ("oasr_running_batch_rows", "Decode rows in the running batches"),
        "waiting_tasks": ("oasr_engine_waiting_tasks", "Decode tasks waiting to join a batch"),
        "decode_rate": ("oasr_decode_rate", "Audio seconds decoded per wall second (admission)"),
    }
    COUNTERS = {
        "audio_seconds": ("oasr_audio_seconds", "Seconds of audio admitted to the engine"),
        "steps": ("oasr_engine_steps", "Engine steps"),
        "joins_running": ("oasr_decode_joins_running", "Decode tasks that joined a running batch"),
        "refused_deadline": ("oasr_admission_refused_deadline", "Requests refused: not predicted within budget"),
        "refused_queue_full": ("oasr_admission_refused_queue_full", "Requests refused: max_queue reached"),
        "deadline_misses": ("oasr_deadline_misses", "Admitted requests cut at their deadline all the same"),
    }
    OUTCOMES = ("finished", "failed", "aborted")

    def __init__(self, engine) -> None:
        from ray.serve import metrics

        self.engine = engine
        self.gauges = {k: metrics.Gauge(name, description) for k, (name, description) in self.GAUGES.items()}
        self.counters = {k: metrics.Counter(name, description) for k, (name, description) in self.COUNTERS.items()}
        self.outcomes = metrics.Counter("oasr_engine_requests", "Engine requests by outcome", tag_keys=("outcome",))
        self.last: dict[str, float] = {}

    def publish(self) -> None:
        stats = self.engine.stats()
        for key, gauge in self.gauges.items():
            gauge.set(getattr(stats, key))
        for key, counter in self.counters.items():
            self._inc(counter, key, getattr(stats, key), None)
        for outcome in self.OUTCOMES:
            self._inc(self.outcomes, outcome, getattr(stats, outcome), {"outcome": outcome})

    def _inc(self, counter, key: str, total: float, tags: dict[str, str] | None) -> None:
        delta = total - self.last.get(key, 0.0)
        if delta > 0:
            counter.inc(delta, tags=tags)
        self.last[key] = total

    def run(self, stop: threading.Event, interval_s: float) -> None:
        while not stop.wait(interval_s):
            try:
                self.publish()
            except Exception:  # noqa: BLE001 - metrics must never take a replica down
                log.debug("publishing the engine's metrics to Ray failed", exc_info=True)


@serve.ingress()
class OasrServer:
    """One engine replica (see the module notes); built by ``build_app``, not directly."""

    async def __init__(self, settings: ServerSettings, metrics_interval_s: float = 5.0) -> None:
        from oasr.server.app import build_engine
        from oasr.server.lifecycle import warm_up

        settings = dataclasses.replace(settings, device=_local_device(settings.device))
        self.settings = settings
        context = serve.get_replica_context()
        self.replica_id = context.replica_tag
        self.deployment = context.deployment
        self.engine = await asyncio.to_thread(build_engine, settings)
        try:
            self.engine.make_options(task="transcribe", **settings.decode_options())
            await warm_up(self.engine, settings)
        except BaseException:
            self.engine.shutdown()
            raise
        self._stop = threading.Event()
        if metrics_interval_s > 0:
            publisher = _RayMetrics(self.engine)
            threading.Thread(
                target=publisher.run, args=(self._stop, metrics_interval_s), name="oasr-ray-metrics", daemon=True
            ).start()
        log.info("oasr replica %s: %s loaded on %s", self.replica_id, settings.model_names[0], settings.device)

    def __serve_build_asgi_app__(self):
        from oasr.server.app import create_app

        app = create_app(self.settings, self.engine)
        drain = app.state.drain
        self.engine.add_death_callback(lambda exc: drain.fire_after(0.0))
        app.state.metrics.registry.register(_ReplicaCollector(self.replica_id, self.deployment))
        app.add_middleware(ReplicaHeader, replica=self.replica_id)
        return app

    def check_health(self) -> None:
        """Raise once the engine's decode loop is gone (Ray then replaces this replica)."""
        if not self.engine.is_running:
            raise RuntimeError(f"oasr replica {self.replica_id}: the engine stopped ({self.engine.death!r})")

    def __del__(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()


def _local_device(device: str) -> str:
    """``auto`` resolved on the replica's own node (the driver may have no GPU)."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def build_app(
    model: str | os.PathLike | None = None,
    *,
    num_replicas: int = 1,
    autoscaling: str | tuple[int, int] | dict[str, Any] | None = None,
    num_cpus: float = 1.0,
    num_gpus: float = 0.0,
    max_ongoing_requests: int | None = None,
    ray_actor_options: dict[str, Any] | None = None,
    health_check_period_s: float = 10.0,
    graceful_shutdown_timeout_s: float = 20.0,
    max_constructor_retry_count: int = 3,
    metrics_interval_s: float = 5.0,
    settings: ServerSettings | None = None,
    **engine_options: Any,
) -> serve.Application:
    """The oasr server as a Ray Serve application (``serve.run(build_app(...))``).

    Args:
        model: what each replica loads (a directory on every node, a bundled name, a Hub id;
            None: the default bundled model).
        num_replicas: engine replicas (ignored when ``autoscaling`` is given).
        autoscaling: ``"MIN:MAX"``, ``(min, max)`` or a Ray ``AutoscalingConfig`` dict; the
            target is ``max_batch_size`` requests per replica (a full decode batch) unless the
            dict says.
        num_cpus, num_gpus: Ray resources per replica (fractions allowed: ``num_gpus=0.5``
            puts two replicas on one GPU).
        max_ongoing_requests: requests the proxy sends one replica at once (default the
            replica's ``max_queue``: every request reaches a replica's admission at once; see
            the module notes). The proxy queues at most as many more.
        ray_actor_options: more Ray actor options (``runtime_env``, ``resources``, ...);
            ``num_cpus`` / ``num_gpus`` above win.
        health_check_period_s, graceful_shutdown_timeout_s: Ray Serve's, per replica.
        metrics_interval_s: how often each replica copies its engine's figures into Ray's
            metrics (0: never).
        max_constructor_retry_count: replica starts that may fail (a model that does not load)
            before the deployment is declared failed (Ray's default, 20, hides a typo for minutes).
        settings: a whole ``ServerSettings`` (then ``model`` and ``engine_options`` must not
            be given).
        **engine_options: ``ServerSettings`` fields (``api_key``, ``max_queue``,
            ``max_upload_mb``, ``request_timeout_s``, ``device``, ``num_threads``,
            ``max_batch_size``, the decoding defaults, ...) and ``EngineConfig`` fields
            (``quantize``, ``decode_type``, ...).

    Raises:
        TypeError: an option that is neither a settings nor an engine field (named).
        ValueError: a bad replica / resource count.
    """
    if settings is None:
        settings = make_settings(model, **engine_options)
    elif model is not None or engine_options:
        raise TypeError("build_app: give either settings= or model= and options, not both")
    if num_cpus < 0 or num_gpus < 0:
        raise ValueError(f"num_cpus / num_gpus must be >= 0, got {num_cpus} / {num_gpus}")
    ongoing = max_ongoing_requests or settings.max_queue
    actor_options = {**(ray_actor_options or {}), "num_cpus": num_cpus, "num_gpus": num_gpus}
    options: dict[str, Any] = {
        "name": DEPLOYMENT_NAME,
        "ray_actor_options": actor_options,
        "max_ongoing_requests": ongoing,
        "max_queued_requests": ongoing,
        "health_check_period_s": health_check_period_s,
        "graceful_shutdown_timeout_s": graceful_shutdown_timeout_s,
        "max_constructor_retry_count": max_constructor_retry_count,
    }
    backpressure = _backpressure_429()
    if backpressure is not None:
        options["backpressure_config"] = backpressure
    if autoscaling is not None:
        options["autoscaling_config"] = _autoscaling_config(autoscaling, settings.max_batch_size)
        options["num_replicas"] = "auto"
    else:
        if int(num_replicas) < 1:
            raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
        options["num_replicas"] = int(num_replicas)
    deployment = serve.deployment(OasrServer).options(**options)
    return deployment.bind(settings, metrics_interval_s=float(metrics_interval_s))


def _backpressure_429():
    """Ray Serve's answer past its own queue as 429 with ``Retry-After: 1``, like a replica's
    (None where this Ray Serve cannot say so: it answers 503)."""
    try:
        from ray.serve.config import BackpressureConfig
    except ImportError:
        return None
    return BackpressureConfig(status_code=429, retry_after_s=1.0)


def _autoscaling_config(autoscaling, target: int) -> dict[str, Any]:
    if isinstance(autoscaling, dict):
        config = dict(autoscaling)
    else:
        lo, hi = parse_autoscale(autoscaling) if isinstance(autoscaling, str) else map(int, autoscaling)
        config = {"min_replicas": lo, "max_replicas": hi}
    config.setdefault("target_ongoing_requests", max(1, target))
    AutoscalingConfig(**config)  # validated here, with Ray's message, rather than on the cluster
    return config


def make_settings(model: str | os.PathLike | None = None, **options: Any) -> ServerSettings:
    """``ServerSettings`` from keyword options; ``EngineConfig`` fields go to ``extra_engine_config``.

    Raises:
        TypeError: an unknown option (named).
    """
    from oasr.engine.config import EngineConfig

    engine_fields = {f.name for f in dataclasses.fields(EngineConfig)}
    fields: dict[str, Any] = {"model": os.fspath(model) if model is not None else None}
    extra: dict[str, Any] = dict(options.pop("extra_engine_config", None) or {})
    for key, value in options.items():
        if key in _SETTINGS_FIELDS:
            fields[key] = value
        elif key in engine_fields:
            extra[key] = value
        else:
            raise TypeError(f"unknown oasr serving option {key!r} (not a ServerSettings or EngineConfig field)")
    if isinstance(fields.get("served_model_names"), (list, str)):
        names = fields["served_model_names"]
        fields["served_model_names"] = tuple([names] if isinstance(names, str) else names)
    return ServerSettings(**fields, extra_engine_config=extra)


def app_builder(args: dict[str, Any]) -> serve.Application:
    """The builder ``serve run`` / a Serve config file name (``oasr.serving.ray:app_builder``).

    ``args`` are ``build_app``'s keyword arguments; values given as strings on the ``serve
    run`` command line (``num_replicas=2``) are converted to the option's type.
    """
    return build_app(**{key: _coerce(key, value) for key, value in dict(args).items()})


_NUMERIC = {"num_replicas": int, "num_cpus": float, "num_gpus": float, "max_ongoing_requests": int}
_NUMERIC |= {"max_constructor_retry_count": int, "metrics_interval_s": float}
_NUMERIC |= {"health_check_period_s": float, "graceful_shutdown_timeout_s": float}


def _coerce(key: str, value: Any) -> Any:
    """A ``serve run key=value`` string as the option's type (read off the settings field's annotation)."""
    if not isinstance(value, str):
        return value
    kind = _NUMERIC.get(key)
    if kind is None and key in _SETTINGS_FIELDS:
        annotation = str(_SETTINGS_FIELDS[key].type)
        kind = next((t for t in (bool, int, float) if t.__name__ in annotation.split(" | ")), None)
    if kind is bool:
        return value.strip().lower() in ("1", "true", "yes", "on")
    try:
        return kind(value) if kind is not None else value
    except ValueError:
        raise ValueError(f"{key}={value!r}: expected {kind.__name__}") from None
