"""``oasr stream FILE...``: decode audio files as live streams (``ASREngine.open_stream``).

Each input is read and fed to a stream of its own, one after another, in pieces of
``--chunk-ms`` (160 ms when not given): as fast as the engine takes them, or with
``--realtime`` at the speed of a live source (each piece handed over once its audio would
have been recorded). ``--chunk-ms`` is also the encoder's chunk (``EngineConfig.stream_chunk_ms``,
mapped per family and refused, exit 2, where it does not divide); the attention history is
unlimited unless ``--left-chunks N``.

Live output, on stderr: the current partial text, rewritten in place, on a terminal, and
each final as ``[MM:SS.mmm --> MM:SS.mmm] text`` (prefixed by the file with several
inputs; not with ``--quiet``). Text to a terminal shows the live view on stdout as the output
(the transcript is not printed again). The finished result of each input goes to stdout, or with
``-o DIR`` to ``DIR/<stem>.<ext>``, in the format ``-f`` names, as ``oasr transcribe`` writes
it (same names, same writers).

Endpointing is off unless ``--endpoint``: a file is then one segment, comparable with a
whole-stream decode of the reference. With it, each endpoint closes a segment, and each
segment's final is one more segment of the result (``-f verbose_json``, ``srt``, ...).

An offline model (Whisper) streams by local agreement (``oasr.engine.streaming.local_agreement``):
its buffer is transcribed again every ``--min-chunk-s`` seconds of audio and each final is a
piece of confirmed words (a segment of the result); ``--buffer-trimming-s`` bounds the buffer.
``--chunk-ms`` / ``--left-chunks`` are encoder-streaming settings and refused there.

Decoding options are ``oasr transcribe``'s (``--decode-type``, ``--beam-size``,
``--ctc-weight``, ``--word-timestamps``, ...); those a live stream cannot honour (``--vad``,
``--task translate``) are refused. A file that cannot be read, or whose stream fails, is
reported on stderr and skipped (exit code 1).

A diarization model that streams (Nemotron 3 Diarization) as ``-m`` gives speaker turns instead
(``oasr.cli.stream_diarize``: turns as they open and close, RTTM or JSON per file).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time

from oasr.cli.common import (
    add_output_flags,
    add_transcription_options,
    decode_kwargs,
    load_engine,
    plan_files,
    positive_float,
)
from oasr.cli.serve import add_stream_flags
from oasr.serving.common import describe_error

NAME = "stream"

FEED_MS = 160.0
"""Piece of audio fed at a time when ``--chunk-ms`` is not given."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        NAME,
        help="decode audio files as live streams (partials and finals as they come)",
        description="Feed audio files to a streaming model as live sources, printing partial results in place "
        "and final segments with their times; the result of each file is written as oasr transcribe writes it.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="audio files (any format FFmpeg reads); - for stdin")
    add_output_flags(
        p,
        "format of each file's final result (default: text; txt is text); all writes openai-whisper's set, "
        "txt vtt srt tsv json (needs -o)",
        "write DIR/<stem>.<ext> per input",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no partials and no finals on stderr (errors only)")
    s = p.add_argument_group("streaming")
    add_stream_flags(s)
    s.add_argument(
        "--realtime",
        action="store_true",
        help="feed each file at the speed of a live source (default: as fast as it can)",
    )
    s.add_argument(
        "--endpoint",
        action="store_true",
        help="cut the stream into segments where an endpoint rule fires (default: one segment per file)",
    )
    s.add_argument(
        "--min-chunk-s",
        type=positive_float,
        default=None,
        metavar="S",
        help="offline models (Whisper), streamed by local agreement: seconds of new audio between decodes "
        "of the buffer (default: 1.0, whisper_streaming's)",
    )
    s.add_argument(
        "--buffer-trimming-s",
        type=positive_float,
        default=None,
        metavar="S",
        help="offline models: trim the audio buffer at a confirmed segment end once it is longer than this "
        "(default: 15, whisper_streaming's)",
    )
    s.add_argument(
        "--streaming-mode",
        default=None,
        metavar="NAME",
        help="diarization models: one of the checkpoint's streaming modes (Nemotron 3 Diarization: low_latency, "
        "very_low_latency, ultra_low_latency; default: the checkpoint's)",
    )
    add_transcription_options(p)
    p.set_defaults(func=run, parser=p)


class LiveDisplay:
    """Partials rewritten in place on a terminal, finals as lines (stderr, or ``out``)."""

    def __init__(self, quiet: bool, out=None) -> None:
        self.out = out or sys.stderr
        self.quiet = quiet
        self.in_place = not quiet and self.out.isatty()
        self.shown = False  # a partial is on the current line

    def partial(self, label: str | None, text: str) -> None:
        if not self.in_place:
            return
        width = shutil.get_terminal_size((80, 24)).columns - 1
        line = f"{label}: {text}" if label else text
        if len(line) > width:
            line = "..." + line[-(width - 3) :]
        self.out.write("\r\x1b[K" + line)
        self.out.flush()
        self.shown = True

    def line(self, text: str) -> None:
        self.clear()
        print(text, file=self.out, flush=True)

    def final(self, label: str | None, segment) -> None:
        from oasr.cli.transcribe import segment_line

        if not self.quiet:
            self.line(segment_line(segment, label))

    def clear(self) -> None:
        if self.shown:
            self.out.write("\r\x1b[K")
            self.out.flush()
            self.shown = False


def _read(item: str, sampling_rate: int):
    from oasr.audio.io import load_audio

    source = sys.stdin.buffer.read() if item == "-" else item
    return load_audio(source, sampling_rate)


def stream_file(engine, samples, options: dict, piece: int, realtime: bool, on_event) -> tuple[object, str | None]:
    """Feed ``samples`` (float32 at the model's rate) to a new stream; ``on_event(event)`` for
    each event as it comes.

    Returns:
        (the stream's whole ``RequestOutput``, None) or (None, the error message).
    """
    from oasr.engine.streaming.core import StreamError

    rate = engine.sampling_rate
    stream = engine.open_stream(sample_rate=rate, **options)
    error: str | None = None

    def take(events) -> None:
        nonlocal error
        for event in events:
            on_event(event)
            if event.type == "error":
                error = f"{event.code}: {event.message}"

    started = time.monotonic()
    with stream:
        for a in range(0, len(samples), piece):
            b = min(a + piece, len(samples))
            if realtime:
                time.sleep(max(0.0, started + b / rate - time.monotonic()))
            try:
                take(stream.feed(samples[a:b]))
            except StreamError as e:
                return None, f"{e.code}: {e}"
            if stream.done:
                break
        if not stream.done:
            take(stream.finish())
        return (None, error) if error else (stream.output, None)


def run(args: argparse.Namespace) -> int:
    from oasr.cli.stream_diarize import is_diarizer, run_diarizer_stream
    from oasr.cli.transcribe import _isatty, stdout_document
    from oasr.engine.outputs import Segment
    from oasr.formatting import SubtitleLayout, format_output

    if is_diarizer(args.model):
        return run_diarizer_stream(args, feed_ms=FEED_MS, display=LiveDisplay(args.quiet), read=_read)
    parser: argparse.ArgumentParser = args.parser
    if args.streaming_mode is not None:
        parser.error("--streaming-mode is for diarization models")
    options = decode_kwargs(args)
    plan = plan_files(args, recursive=False)
    files, targets, fmt = plan.files, plan.targets, plan.formats[0]

    engine = load_engine(
        args, stream_chunk_ms=args.stream_chunk_ms, stream_left_chunks=args.stream_left_chunks, max_streams=1
    )
    options["endpoint"] = args.endpoint
    for name in ("min_chunk_s", "buffer_trimming_s"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    try:  # options, chunk and history the model refuses: a usage error before any input is read
        engine.open_stream(sample_rate=engine.sampling_rate, **options).close()
    except (TypeError, ValueError) as e:
        parser.error(str(e))
    plan.create_output_dir()

    piece_ms = args.stream_chunk_ms or FEED_MS
    piece = max(1, int(round(engine.sampling_rate * piece_ms / 1000.0)))
    # Text to a terminal: the live view is the output there (the transcript is shown once).
    live_is_output = targets is None and fmt == "text" and not args.quiet and _isatty(sys.stdout)
    display = LiveDisplay(args.quiet, sys.stdout if live_is_output else None)
    words = bool(options.get("word_timestamps"))
    layout = SubtitleLayout()
    several = len(files) > 1
    failed: set[int] = set()

    def report(index: int, label: str, message: str) -> None:
        failed.add(index)
        display.line(f"oasr {NAME}: {label}: {message}")

    for index, item in enumerate(files):
        label = "<stdin>" if item == "-" else item
        shown = label if several else None
        try:
            samples = _read(item, engine.sampling_rate)
        except (OSError, ValueError) as e:
            report(index, label, describe_error(e))
            continue

        finals: list[str] = []

        def on_event(event, shown=shown, finals=finals) -> None:
            if event.type == "partial":
                display.partial(shown, event.text)
            elif event.type == "final":
                finals.append(event.text)
                display.final(shown, Segment(id=0, seek=0, start=event.start, end=event.end, text=event.text))

        output, error = stream_file(engine, samples, options, piece, args.realtime, on_event)
        display.clear()
        if output is None:
            report(index, label, error or "the stream failed")
            continue
        if targets is None:
            if not (live_is_output and any(text.strip() for text in finals)):
                sys.stdout.write(stdout_document(output, fmt, label, several, words, layout))
            sys.stdout.flush()
            continue
        for f, path in targets[index].items():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(format_output(output, f, words=words, layout=layout), encoding="utf-8")
            except OSError as e:
                report(index, label, f"cannot write {path}: {describe_error(e)}")
    if failed:
        plural = "s" if len(files) != 1 else ""
        print(f"oasr {NAME}: {len(failed)} of {len(files)} input{plural} failed", file=sys.stderr)
    return 1 if failed else 0
