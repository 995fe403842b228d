"""``oasr serve``: the OpenAI-compatible HTTP API (``/v1/audio/transcriptions``,
``/v1/audio/translations``, ``/v1/models``, ``/health``, ``/metrics``) over one model
with continuous batching, live transcription over a WebSocket (``/v1/audio/stream``,
``oasr.server.streaming``) for models that stream, and a browser page using both at ``/``
(``oasr.server.ui``; ``--no-ui``: off).

Start-up binds the port first (taken: exit 2 with a message, before any model load),
then loads the model (a model that does not load exits with code 2 and its message, as
the other subcommands), then decodes one second of silence (fails: exit 2, the server
does not start; its time is the engine's first measure of its decode rate, for admission:
``oasr.engine.admission``); only then does it listen, so ``/health`` says ok only for an
engine that has decoded. Stop with Ctrl-C or SIGTERM: the server stops accepting, lets running
requests finish for up to ``--graceful-shutdown`` seconds, answers the rest 503, then
shuts the engine down. Once it listens and ``/health`` says ok, it prints one line to stderr
(``oasr serve: ready at http://127.0.0.1:8000 (models: ...; API key: off; device: cpu)``).
If the engine's decode loop dies, waiting requests get 503,
``/health`` says 503 and the process exits with code 3 so that a supervisor restarts it
(see ``oasr.server.lifecycle``).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import sys

from oasr.cli.common import (
    CliError,
    add_model_engine_options,
    add_model_flags,
    add_search_flags,
    engine_extras,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    resolve_device,
    temperatures,
)
from oasr.cli.ray_flags import add_serve_options as add_ray_serve_options
from oasr.cli.ray_flags import run_ray_serve
from oasr.install import install_hint

NAME = "serve"


def _port(text: str) -> int:
    value = nonnegative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be <= 65535, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    from oasr.server.settings import (
        DEFAULT_MAX_MESSAGE_KB,
        DEFAULT_MAX_QUEUE,
        DEFAULT_MAX_STREAMS,
        DEFAULT_MAX_UPLOAD_MB,
        DEFAULT_STREAM_IDLE_S,
        DEFAULT_UPLOAD_IDLE_S,
        DEFAULT_WS_PING_S,
        TIMEOUT_BASE_S,
        TIMEOUT_PER_AUDIO_S,
    )

    p = subparsers.add_parser(
        NAME,
        help="serve the OpenAI-compatible speech-to-text HTTP API",
        description="Serve OpenAI's /v1/audio/transcriptions and /v1/audio/translations (plus /v1/models, "
        "/health and /metrics) over one model, batching concurrent requests continuously.",
    )
    g = p.add_argument_group("model and engine")
    add_model_flags(g)
    g.add_argument(
        "--served-model-name",
        nargs="+",
        action="extend",
        default=None,
        metavar="NAME",
        help="name(s) the 'model' form field must match and /v1/models lists (default: --model as given)",
    )
    g.add_argument(
        "--max-batch-size",
        "--batch-size",
        dest="max_batch_size",
        type=positive_int,
        default=8,
        metavar="N",
        help="encoder windows / decode rows per batch (default 8)",
    )
    add_search_flags(g, every_request=True)
    g.add_argument(
        "--temperature",
        type=temperatures,
        default=None,
        metavar="T[,T...]",
        help="Whisper / speech-LLM: what a request's temperature 0 (OpenAI's default, 'automatic') decodes with: "
        "Whisper's fallback sequence (default 0,0.2,0.4,0.6,0.8,1.0), or one temperature; 0 alone turns the "
        "fallback off, so that a stream's text follows the tokens as they are decoded",
    )
    g.add_argument(
        "-l",
        "--language",
        default=None,
        metavar="L",
        help="the language of requests that send none: a code, name or locale as for 'oasr transcribe "
        "--language' (a request's own, 'auto' included, wins; one the model lacks: exit 2 at start, 400 "
        "invalid_language per request); default: detect",
    )

    add_model_engine_options(g)
    g.add_argument(
        "--diarize-model",
        default=None,
        metavar="DIR",
        help="a diarization model (directory or .nemo archive, as oasr diarize reads): response_format="
        "diarized_json, known speakers, and speakers in verbose_json / srt / vtt transcriptions",
    )

    s = p.add_argument_group("server")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=_port, default=8000, help="port to bind (default 8000; 0 picks a free one)")
    s.add_argument(
        "--api-key",
        default=os.environ.get("OASR_API_KEY") or None,
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' on /v1/* (default: $OASR_API_KEY; none: open)",
    )
    s.add_argument(
        "--no-ui",
        dest="ui",
        action="store_false",
        help="do not serve the browser page at / (microphone and file transcription; default: served)",
    )
    s.add_argument(
        "--realtime-live",
        action="store_true",
        help="/v1/realtime with an offline model (Whisper ...): send deltas while the user speaks, confirmed by "
        "local agreement (Whisper live), instead of transcribing each turn once it ends (default: per turn)",
    )
    s.add_argument(
        "--max-upload-mb",
        type=positive_float,
        default=DEFAULT_MAX_UPLOAD_MB,
        metavar="MB",
        help=f"largest request body in MiB; larger ones get 413 (default {DEFAULT_MAX_UPLOAD_MB:g})",
    )
    s.add_argument(
        "--max-queue",
        type=positive_int,
        default=DEFAULT_MAX_QUEUE,
        metavar="N",
        help=f"requests in the engine at once (a bound beside admission); more get 429 (default {DEFAULT_MAX_QUEUE})",
    )
    s.add_argument(
        "--request-timeout",
        type=positive_float,
        default=None,
        metavar="S",
        help="a request's budget: the client's deadline, in seconds from the end of its upload "
        f"(default: {TIMEOUT_BASE_S:g} s plus {TIMEOUT_PER_AUDIO_S:g} s per second of audio). Admission is honest: "
        "a request the server does not predict to finish within it (from its measured decode rate and the "
        "requests it holds) gets 429 with Retry-After at once, before any work; one admitted gets 504 at its "
        "deadline only if the prediction was badly wrong (counted in oasr_deadline_misses_total)",
    )
    s.add_argument(
        "--upload-idle-timeout",
        type=positive_float,
        default=DEFAULT_UPLOAD_IDLE_S,
        metavar="S",
        help=f"an upload that sends nothing for this long is closed with 408 (default {DEFAULT_UPLOAD_IDLE_S:g})",
    )
    s.add_argument(
        "--min-duration",
        type=nonnegative_float,
        default=0.1,
        metavar="S",
        help="shorter audio gets 400 (default 0.1)",
    )
    s.add_argument(
        "--graceful-shutdown",
        type=nonnegative_float,
        default=10.0,
        metavar="S",
        help="seconds running requests may take to finish on shutdown (default 10)",
    )
    s.add_argument(
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug"),
        default="info",
        help="uvicorn's log level (default info)",
    )
    w = p.add_argument_group("live streams (/v1/audio/stream)")
    add_stream_flags(w, prefix="stream-")
    w.add_argument(
        "--max-streams",
        type=positive_int,
        default=DEFAULT_MAX_STREAMS,
        metavar="N",
        help=f"streams open at once (encoder cache slots); more are refused with 429 (default {DEFAULT_MAX_STREAMS})",
    )
    w.add_argument(
        "--stream-cache-mb",
        type=positive_float,
        default=1024.0,
        metavar="MB",
        help="the most memory the streams' attention cache takes; a stream it cannot hold is refused "
        "(1013) or, with unlimited history, stopped when it outgrows it (default 1024)",
    )
    w.add_argument(
        "--stream-idle-timeout",
        type=positive_float,
        default=DEFAULT_STREAM_IDLE_S,
        metavar="S",
        help=f"a stream that sends nothing for this long is closed (1008; default {DEFAULT_STREAM_IDLE_S:g})",
    )
    w.add_argument(
        "--max-message-kb",
        type=positive_float,
        default=DEFAULT_MAX_MESSAGE_KB,
        metavar="KB",
        help="largest WebSocket message in KiB; a larger one closes the stream "
        f"(1009; default {DEFAULT_MAX_MESSAGE_KB:g})",
    )
    w.add_argument(
        "--ws-ping-interval",
        type=nonnegative_float,
        default=DEFAULT_WS_PING_S,
        metavar="S",
        help=f"ping each WebSocket this often (0: never; default {DEFAULT_WS_PING_S:g})",
    )
    w.add_argument(
        "--ws-ping-timeout",
        type=positive_float,
        default=DEFAULT_WS_PING_S,
        metavar="S",
        help="close a WebSocket (1011) when neither its pong nor any other data came this long after a ping: "
        f"a client sending faster than real time is never cut while its audio flows (default {DEFAULT_WS_PING_S:g})",
    )
    add_ray_serve_options(p)
    p.set_defaults(func=run, parser=p)


def add_stream_flags(g: argparse._ArgumentGroup, prefix: str = "") -> None:
    """``--[stream-]chunk-ms`` and ``--[stream-]left-chunks`` (``EngineConfig.stream_chunk_ms`` /
    ``stream_left_chunks``), shared by ``oasr serve`` (prefixed) and ``oasr stream``."""
    g.add_argument(
        f"--{prefix}chunk-ms",
        dest="stream_chunk_ms",
        type=positive_float,
        default=None,
        metavar="MS",
        help="encoder chunk in ms of audio, mapped per family (WeNet: 40-ms units, causal Zipformer: 20-ms "
        "units) and refused where it does not divide (default: the family's)",
    )
    g.add_argument(
        f"--{prefix}left-chunks",
        dest="stream_left_chunks",
        type=positive_int,
        default=None,
        metavar="N",
        help="chunks of attention history a stream keeps (default: all of it; refused by encoders whose "
        "history the weights fix)",
    )


def fix_malloc_mmap_threshold(threshold: int = 128 * 1024) -> bool:
    """Fix glibc's mmap threshold (Linux; unless ``MALLOC_MMAP_THRESHOLD_`` is set).

    glibc raises the threshold (up to 32 MiB) each time a large mmapped block is
    freed, after which the large transient buffers of audio decoding, features and
    activations come from the heap, fragment it and keep the peak RSS high. Fixed at
    128 KiB they are mmapped and go back to the OS when freed: a 200 MiB upload then
    raises the server's peak RSS by ~35 MB instead of ~100 MB, at no measurable speed
    cost. Returns whether it was applied.
    """
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-3, threshold))  # -3: M_MMAP_THRESHOLD
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False


SERVE_DECODE_FLAGS = (
    "beam_size",
    "best_of",
    "max_sym_per_frame",
    "blank_penalty",
    "search",
    "max_new_tokens",
    "repetition_penalty",
    "temperature",
    "language",
)
"""``oasr serve`` flags that set a decoding option for every request (unset: the strategy's default)."""


def settings_from_args(args: argparse.Namespace):
    from oasr.server.settings import DEFAULT_MAX_AUDIO_S, ServerSettings

    return ServerSettings(
        model=args.model,
        served_model_names=tuple(args.served_model_name or ()),
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        ui=args.ui,
        realtime_live=args.realtime_live,
        max_upload_mb=args.max_upload_mb,
        max_queue=args.max_queue,
        request_timeout_s=args.request_timeout,
        upload_idle_s=args.upload_idle_timeout,
        max_audio_s=args.max_audio_seconds if args.max_audio_seconds is not None else DEFAULT_MAX_AUDIO_S,
        min_duration_s=args.min_duration,
        max_streams=args.max_streams,
        stream_cache_mb=args.stream_cache_mb,
        stream_chunk_ms=args.stream_chunk_ms,
        stream_left_chunks=args.stream_left_chunks,
        stream_idle_s=args.stream_idle_timeout,
        max_message_kb=args.max_message_kb,
        ws_ping_interval_s=args.ws_ping_interval or None,
        ws_ping_timeout_s=args.ws_ping_timeout,
        request_options={name: getattr(args, name) for name in SERVE_DECODE_FLAGS if getattr(args, name) is not None},
        device=resolve_device(args.device),
        dtype=args.dtype,
        num_threads=args.threads,
        max_batch_size=args.max_batch_size,
        log_level=args.log_level,
        extra_engine_config=engine_extras(args),
    )


def run(args: argparse.Namespace) -> int:
    if args.ray:
        return run_ray_serve(args, settings_from_args)
    try:
        import uvicorn  # noqa: F401 - checked here so that a missing extra is one clear message

        from oasr.server.app import build_engine, create_app
        from oasr.server.lifecycle import EXIT_ENGINE_DIED, bind_socket, check_streaming, run_server, warm_up
        from oasr.server.routes import health_error
        from oasr.server.settings import ready_line
    except ImportError as e:
        raise CliError(f"the server needs its extra: {install_hint('server')} ({e})", exit_code=2) from None
    from oasr.models.loaders import ModelNotFoundError

    try:
        settings = settings_from_args(args)
    except ValueError as e:  # a decoding flag that TranscribeOptions refuses (--search alsd)
        raise CliError(str(e), exit_code=2) from None
    fix_malloc_mmap_threshold()
    try:
        sock = bind_socket(settings.host, settings.port)
    except OSError as e:
        raise CliError(str(e), exit_code=2) from None
    with sock:
        try:
            engine = build_engine(settings)
        except ModelNotFoundError as e:
            raise CliError(str(e), exit_code=2) from None
        except (ValueError, OSError, RuntimeError) as e:
            raise CliError(f"could not load model {args.model or '(default)'}: {e}", exit_code=2) from None
        except Exception as e:  # a format library's own error (a truncated safetensors file ...)
            raise CliError(
                f"could not load model {args.model or '(default)'}: {type(e).__name__}: {e}", exit_code=2
            ) from None
        try:
            try:  # options the model cannot honour (a beam on a recurrent transducer): one line, exit 2
                engine.make_options(task="transcribe", **settings.decode_options())
            except (TypeError, ValueError) as e:
                what = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in settings.decode_options().items())
                raise CliError(f"{what}: {e}; not starting", exit_code=2) from None
            try:
                asyncio.run(warm_up(engine, settings))
            except RuntimeError as e:
                raise CliError(f"model {args.model or '(default)'} loaded but {e}; not starting", exit_code=2) from None
            if args.stream_chunk_ms is not None or args.stream_left_chunks is not None:
                try:  # streaming asked for: a chunk the model cannot serve is refused now, not per stream
                    asyncio.run(check_streaming(engine))
                except (TypeError, ValueError) as e:
                    raise CliError(f"live streams: {e}; not starting", exit_code=2) from None
            app = create_app(settings, engine)
            line = ready_line(settings, sock.getsockname()[1], engine.config.device)
            code = run_server(
                app,
                settings,
                sock,
                graceful_s=args.graceful_shutdown,
                engine=engine,
                on_ready=lambda: health_error(engine) is None and print(line, file=sys.stderr, flush=True),
            )
        finally:
            engine.shutdown()
    if code == EXIT_ENGINE_DIED:
        print(f"oasr {NAME}: the engine stopped ({engine.death!r}); exiting for a restart", file=sys.stderr)
    elif code:
        print(f"oasr {NAME}: the server did not start (see the messages above)", file=sys.stderr)
    return code
