"""The ``--ray`` options of ``oasr serve`` and ``oasr transcribe`` and what they run.

``oasr serve --ray`` runs the same app as ``oasr serve`` as a Ray Serve deployment of engine
replicas (``oasr.serving.ray``); ``oasr transcribe --ray`` transcribes files, directories and
manifests with Ray Data actors (``oasr.serving.ray_batch``). Ray is imported only when a
``--ray`` command runs (``oasr --help`` loads neither Ray nor torch).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from oasr.cli.common import CliError, nonnegative_float, positive_int
from oasr.install import install_hint
from oasr.serving.common import parse_autoscale


def _autoscale(text: str) -> tuple[int, int]:
    try:
        return parse_autoscale(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _address(g) -> None:
    g.add_argument(
        "--address",
        default=None,
        metavar="ADDR",
        help="Ray cluster to join (host:port of the head, or auto for the one `ray start` made here); "
        "default: start a local Ray",
    )


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    """``oasr serve``'s Ray group: ``--ray``, replicas or autoscaling, resources per replica."""
    g = parser.add_argument_group("Ray Serve (scale-out; needs oasr's ray extra)")
    g.add_argument("--ray", action="store_true", help="serve as Ray Serve replicas behind Ray's HTTP proxy")
    count = g.add_mutually_exclusive_group()
    count.add_argument("--replicas", type=positive_int, default=1, metavar="N", help="engine replicas (default 1)")
    count.add_argument(
        "--autoscale", type=_autoscale, default=None, metavar="MIN:MAX", help="autoscale between MIN and MAX replicas"
    )
    g.add_argument(
        "--num-cpus-per-replica", type=nonnegative_float, default=1.0, metavar="C", help="CPUs per replica (default 1)"
    )
    g.add_argument(
        "--num-gpus-per-replica",
        type=nonnegative_float,
        default=0.0,
        metavar="G",
        help="GPUs per replica; fractions share a GPU (0.5: two replicas a GPU; default 0)",
    )
    _address(g)


def add_transcribe_options(parser: argparse.ArgumentParser) -> None:
    """``oasr transcribe``'s Ray group: ``--ray``, engine actors, resources per actor."""
    g = parser.add_argument_group("Ray Data (batch over many files; needs oasr's ray extra)")
    g.add_argument(
        "--ray",
        action="store_true",
        help="transcribe with Ray Data engine actors: FILEs may also be .jsonl manifests (an 'audio' key relative "
        "to the manifest); needs -o; inputs whose output exists are skipped; DIR/results.jsonl (+ .parquet) "
        "records every input",
    )
    g.add_argument("--actors", type=positive_int, default=1, metavar="N", help="engine actors (default 1)")
    g.add_argument(
        "--num-cpus-per-actor", type=nonnegative_float, default=1.0, metavar="C", help="CPUs per actor (default 1)"
    )
    g.add_argument(
        "--num-gpus-per-actor", type=nonnegative_float, default=0.0, metavar="G", help="GPUs per actor (default 0)"
    )
    _address(g)


def _require_ray() -> None:
    try:
        import ray  # noqa: F401
        import ray.data  # noqa: F401
        import ray.serve  # noqa: F401
    except ImportError as e:
        raise CliError(
            f"--ray needs its extra: {install_hint('ray', ['ray[serve,data]'])} ({e})", exit_code=2
        ) from None


def run_ray_serve(args: argparse.Namespace, settings_from_args: Callable[[argparse.Namespace], Any]) -> int:
    """``oasr serve --ray``: deploy, print where it listens, serve until Ctrl-C / SIGTERM.
    ``settings_from_args`` is ``oasr serve``'s (passed in: this module sits below the commands)."""
    import dataclasses

    from oasr.server.settings import ready_line

    _require_ray()
    if args.port == 0:
        raise CliError("--ray needs a fixed --port (Ray Serve's proxy binds it on every node)", exit_code=2)
    # the device is resolved on each replica's node ("auto": its GPU if it has one)
    settings = settings_from_args(argparse.Namespace(**{**vars(args), "device": "cpu"}))
    settings = dataclasses.replace(settings, device=args.device)

    from ray import serve

    from oasr.serving.ray import DEFAULT_APP_NAME, build_app
    from oasr.serving.ray_batch import init_ray

    app = build_app(
        settings=settings,
        num_replicas=args.replicas,
        autoscaling=args.autoscale,
        num_cpus=args.num_cpus_per_replica,
        num_gpus=args.num_gpus_per_replica,
        graceful_shutdown_timeout_s=args.graceful_shutdown,
    )
    init_ray(args.address)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": settings.host, "port": settings.port})
        try:
            serve.run(app, name=DEFAULT_APP_NAME, route_prefix="/")
        except Exception as e:  # a replica that never started (model not found, ...): Ray's message
            raise CliError(f"the Ray Serve deployment did not start: {type(e).__name__}: {e}", exit_code=2) from None
        how = (
            f"{args.autoscale[0]}-{args.autoscale[1]} replicas (autoscaled)"
            if args.autoscale
            else f"{args.replicas} replica{'s' if args.replicas != 1 else ''}"
        )
        print(ready_line(settings, settings.port, args.device, f"; {how} on Ray Serve"), file=sys.stderr, flush=True)
        try:
            while not stop.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        try:
            serve.delete(DEFAULT_APP_NAME)
        except Exception:  # noqa: BLE001 - never deployed, or Ray already gone
            pass
        if not args.address:
            serve.shutdown()
    return 0


def run_ray_transcribe(
    args: argparse.Namespace, subtitle_layout: Callable[[argparse.Namespace, argparse.ArgumentParser, dict], Any]
) -> int:
    """``oasr transcribe --ray``: the run of ``oasr.serving.ray_batch.transcribe_dataset``.
    ``subtitle_layout`` is ``oasr transcribe``'s (passed in: this module sits below the commands)."""
    from oasr.cli.common import decode_kwargs, engine_extras
    from oasr.formatting import output_formats

    parser: argparse.ArgumentParser = args.parser
    if args.output_dir is None:
        parser.error("--ray writes one file per input: give --output-dir")
    if "-" in args.files:
        parser.error("--ray reads files, directories and manifests, not stdin (-)")
    options = decode_kwargs(args)
    layout = subtitle_layout(args, parser, options)
    if args.min_duration < 0:
        parser.error(f"argument --min-duration: must be >= 0, got {args.min_duration:g}")
    _require_ray()
    from oasr.serving.ray_batch import transcribe_dataset

    formats = output_formats(args.output_format)
    engine_options = {
        "device": args.device,
        "dtype": args.dtype,
        "num_threads": args.threads,
        "max_batch_size": args.batch_size,
        **engine_extras(args),
    }
    try:
        summary = transcribe_dataset(
            args.files,
            args.output_dir,
            model=args.model,
            formats=formats,
            recursive=args.recursive,
            layout=layout,
            min_duration_s=args.min_duration,
            engine_options=engine_options,
            decode_options=options,
            address=args.address,
            num_actors=args.actors,
            num_cpus=args.num_cpus_per_actor,
            num_gpus=args.num_gpus_per_actor,
            batch_size=4 * args.batch_size,
            progress=not args.no_progress,
        )
    except (ValueError, FileNotFoundError) as e:
        raise CliError(str(e), exit_code=2) from None
    except Exception as e:  # the actors did not start (a model that does not load ...): Ray's message
        raise CliError(f"the Ray Data run failed: {type(e).__name__}: {e}", exit_code=2) from None
    done = f"{summary.done} transcribed, {summary.skipped} already done (skipped), {len(summary.failed)} failed"
    print(f"oasr transcribe: {summary.total} inputs: {done}; results in {summary.results}", file=sys.stderr)
    return 1 if summary.failed else 0
