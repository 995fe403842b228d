"""``oasr transcribe FILE...``: transcribe audio files in one batched pass.

Output goes to stdout, or with ``-o DIR`` to ``DIR/<stem>.<ext>`` per input (``.txt``
for text, the format's name otherwise; ``-f all`` writes every format). On stdout a single input prints just its
document; with several inputs, text prints one ``<path>: <transcript>`` line per
input and the other formats print each document under a ``==> <path> <==`` header
line, followed by a blank line (as ``head`` does). Stdout is written in input order.

A file that cannot be read or decoded is reported on stderr (``oasr transcribe:
<path>: <problem>``) and skipped; the others are still transcribed, and the exit
code is 1. No model available, or a model that does not load: its message and exit
code 2. ``-`` reads one input from stdin (named ``<stdin>`` in messages, ``stdin.<ext>``
with ``-o``).

``--vad`` cuts each input at speech with Silero VAD (the ``vad`` extra) into chunks of at
most 30 s that are decoded together as independent windows (``vad_filter``); the times in
every format are in the input's own timeline.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from oasr.cli.common import (
    CliError,
    Source,
    add_decode_options,
    add_engine_options,
    check_decode_kwargs,
    decode_kwargs,
    describe_error,
    load_engine,
    progress_bar,
    run_batch,
)
from oasr.cli.ray_flags import add_transcribe_options as add_ray_transcribe_options
from oasr.cli.ray_flags import run_ray_transcribe

NAME = "transcribe"


def register(subparsers: argparse._SubParsersAction) -> None:
    from oasr.formatting import FORMATS

    p = subparsers.add_parser(
        NAME,
        help="transcribe audio files",
        description="Transcribe (or translate) audio files with one model load and batched decoding.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="audio files (any format FFmpeg reads); - for stdin")
    p.add_argument(
        "-f",
        "--output-format",
        choices=(*FORMATS, "all"),
        default="text",
        help="output format (default: text); all writes every format (needs -o)",
    )
    p.add_argument(
        "-o", "--output-dir", type=Path, default=None, metavar="DIR", help="write DIR/<stem>.<ext> per input"
    )
    add_decode_options(p)
    add_engine_options(p)
    add_ray_transcribe_options(p)
    p.set_defaults(func=run, parser=p)


def _stem(label: str) -> str:
    return "stdin" if label == "-" else Path(label).stem


def _sources(files: list[str], parser: argparse.ArgumentParser) -> list[Source]:
    sources = []
    if files.count("-") > 1:
        parser.error("stdin (-) can be given only once")
    for f in files:
        if f == "-":
            sources.append(Source("<stdin>", sys.stdin.buffer.read()))
        else:
            sources.append(Source(f, f))
    return sources


def run(args: argparse.Namespace) -> int:
    if args.ray:
        return run_ray_transcribe(args)
    from oasr.formatting import EXTENSIONS, FORMATS, format_output

    parser: argparse.ArgumentParser = args.parser
    fmt = args.output_format
    formats = FORMATS if fmt == "all" else (fmt,)
    options = decode_kwargs(args)
    check_decode_kwargs(parser, options)

    targets: list[dict[str, Path]] | None = None  # per input: format -> file
    if args.output_dir is not None:
        targets = [{f: args.output_dir / f"{_stem(name)}.{EXTENSIONS[f]}" for f in formats} for name in args.files]
        seen: dict[Path, str] = {}
        for name, per_format in zip(args.files, targets):
            for t in per_format.values():
                if t in seen:
                    parser.error(f"{seen[t]} and {name} would both be written to {t}")
                seen[t] = name
        if args.output_dir.exists() and not args.output_dir.is_dir():
            parser.error(f"--output-dir {args.output_dir} is not a directory")
    elif fmt == "all":
        parser.error("-f all writes one file per format: give --output-dir")

    sources = _sources(args.files, parser)
    engine = load_engine(args)
    try:
        engine.make_options(**options)
    except (TypeError, ValueError) as e:
        parser.error(str(e))
    if targets is not None:
        try:
            args.output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CliError(f"cannot create --output-dir {args.output_dir}: {describe_error(e)}") from None

    several = len(sources) > 1
    pending: dict[int, str] = {}  # stdout documents waiting for the ones before them
    next_to_print = 0
    failed: set[int] = set()
    bar = progress_bar(len(sources), args.no_progress)

    def report(index: int, message: str) -> None:
        failed.add(index)
        bar.write(f"oasr {NAME}: {sources[index].label}: {message}", file=sys.stderr)

    def flush_stdout() -> None:
        nonlocal next_to_print
        while next_to_print in pending:
            doc = pending.pop(next_to_print)
            if doc:
                bar.write(doc, file=sys.stdout, end="")  # clears and redraws the bar around it
                sys.stdout.flush()
            next_to_print += 1

    def stdout_doc(index: int, doc: str) -> str:
        if not several:
            return doc
        label = sources[index].label
        if fmt == "text":
            return f"{label}: {doc}"
        return f"==> {label} <==\n{doc}\n"

    def on_result(index: int, output) -> None:
        bar.update(1)
        words = bool(options.get("word_timestamps"))
        if targets is not None:
            for f, path in targets[index].items():
                try:
                    path.write_text(format_output(output, f, words=words), encoding="utf-8")
                except OSError as e:
                    report(index, f"cannot write {path}: {describe_error(e)}")
            return
        pending[index] = stdout_doc(index, format_output(output, fmt, words=words))
        flush_stdout()

    def on_error(index: int, exc: BaseException) -> None:
        bar.update(1)
        report(index, describe_error(exc))
        pending[index] = ""
        flush_stdout()

    try:
        run_batch(engine, sources, options, on_result, on_error)
    finally:
        bar.close()
    if failed:
        print(
            f"oasr {NAME}: {len(failed)} of {len(sources)} input{'s' if len(sources) != 1 else ''} failed",
            file=sys.stderr,
        )
    return 1 if failed else 0
