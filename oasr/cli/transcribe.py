"""``oasr transcribe FILE...``: transcribe audio files in one batched pass.

Inputs: files, directories (their audio files by extension, ``--recursive`` for
subdirectories too) and glob patterns (``'talks/*.mp3'``, expanded here when the shell
did not); a file named twice is transcribed once. ``-`` reads one input from stdin
(named ``<stdin>`` in messages, ``stdin.<ext>`` with ``-o``).

Output goes to stdout, or with ``-o DIR`` to ``DIR/<stem>.<ext>`` per input (``.txt``
for text, the format's name otherwise). ``-f txt`` is ``-f text``; ``-f all`` writes
openai-whisper's set, ``.txt .vtt .srt .tsv .json`` (each as its own ``-f`` writes it;
``verbose_json`` is asked for by name). Inputs that would
share a name keep their whole file name (``a.wav`` and ``a.mp3`` -> ``a.wav.srt``,
``a.mp3.srt``), and inputs that share that too (``x/a.wav``, ``y/a.wav``) are written
under their directories relative to the inputs' common parent (``DIR/x/a.wav.srt``). On
stdout a single input prints just its document; with several inputs, json and
verbose_json are JSON Lines (one object a line, ``"file"`` first: the input as given),
text prints one ``<path>: <transcript>`` line per input (as ``grep`` names files), and
srt, vtt and tsv print each document under a ``==> <path> <==`` header line, followed by a
blank line (as ``head`` does). Stdout is written in input order and holds nothing but the
chosen format.

Live output: each segment as it is decoded (``[00:12.340 --> 00:15.000] text`` as
openai-whisper and whisper.cpp print them; prefixed by the file with several inputs), and
a progress bar in seconds of audio on a terminal (not with ``--no-progress`` or
``--quiet``). The transcript is shown once: text going to a terminal (no ``-o``) is the
live segments themselves, on stdout, and is not printed again (``--quiet``: the plain
text at the end instead); another format going to a terminal is its document, with the
segments on stderr only with ``--verbose``; output to a file, a pipe or ``-o`` has the
segments on stderr when that is a terminal or with ``--verbose``, never with ``--quiet``.

Subtitles: with ``--word-timestamps``, SRT and WebVTT cues span their words' times, and
``--max-line-width``, ``--max-line-count``, ``--max-words-per-line`` and
``--highlight-words`` lay them out as openai-whisper's writers do
(``oasr.formatting.SubtitleLayout``). No cue ends past the end of the audio.

A transcript that a token budget cut (``RequestOutput.finish_reason == "length"``: a
speech-LLM's ``--max-new-tokens``, a Whisper window that reached its length limit) is written
as usual, with a warning on stderr; the exit code stays 0.

A file that cannot be read or decoded, or that is shorter than ``--min-duration`` (0.1 s,
the server's ``--min-duration`` default, so both refuse the same audio), is reported
on stderr (``oasr transcribe: <path>: <problem>``) and skipped; the others are still
transcribed, and the exit code is 1. No model available, or a model that does not load:
its message and exit code 2.

``--vad`` cuts each input at speech with Silero VAD (the ``vad`` extra) into chunks of at
most 30 s that are decoded together as independent windows (``vad_filter``); the times in
every format are in the input's own timeline.
"""

from __future__ import annotations

import argparse
import os
import sys

from oasr.cli.common import (
    CUT_WARNING,
    add_output_flags,
    add_speaker_count_flags,
    add_transcription_options,
    decode_kwargs,
    load_engine,
    plan_files,
    positive_int,
)
from oasr.cli.ray_flags import add_transcribe_options as add_ray_transcribe_options
from oasr.cli.ray_flags import run_ray_transcribe
from oasr.serving.common import Source, describe_error
from oasr.serving.common import problem as _problem

NAME = "transcribe"

MIN_DURATION_S = 0.1
"""``--min-duration``'s default: the server's (``ServerSettings.min_duration_s``)."""

_SUBTITLE_OPTIONS = ("max_line_width", "max_line_count", "max_words_per_line", "highlight_words")


def register(subparsers: argparse._SubParsersAction) -> None:

    p = subparsers.add_parser(
        NAME,
        help="transcribe audio files",
        description="Transcribe (or translate) audio files with one model load and batched decoding.",
        epilog="Segments are printed as they are decoded: text to a terminal is the segments themselves (not "
        "printed again); otherwise they go to stderr (on a terminal, or with --verbose) and stdout holds only "
        'the chosen format (several inputs in json / verbose_json: JSON Lines with each input\'s "file"). '
        "With -o, outputs are DIR/<stem>.<ext>; inputs that share a "
        "stem keep their whole name (a.wav.srt, a.mp3.srt), and inputs that share that too go under their "
        "directories relative to the inputs' common parent.",
    )
    p.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="audio files (any format FFmpeg reads), directories (audio files in them) or glob patterns; - for stdin",
    )
    add_output_flags(
        p,
        "output format (default: text; txt is text); tsv is openai-whisper's (integer ms); all writes "
        "openai-whisper's set, txt vtt srt tsv json (needs -o)",
        "write DIR/<stem>.<ext> per input (naming rules below)",
    )
    p.add_argument("-r", "--recursive", action="store_true", help="directories: search their subdirectories too")
    p.add_argument(
        "--min-duration",
        type=float,
        default=MIN_DURATION_S,
        metavar="S",
        help=f"an input shorter than S seconds fails as too short (default {MIN_DURATION_S:g}, as oasr serve)",
    )
    talk = p.add_mutually_exclusive_group()
    talk.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print each segment to stderr as it is decoded (the default when stderr is a terminal and stdout is not)",
    )
    talk.add_argument(
        "-q", "--quiet", action="store_true", help="no segments and no progress bar on stderr (errors only)"
    )
    g = p.add_argument_group("subtitles (srt, vtt; need --word-timestamps)")
    g.add_argument(
        "--max-line-width", type=positive_int, default=None, metavar="N", help="characters per cue line at most"
    )
    g.add_argument(
        "--max-line-count",
        type=positive_int,
        default=None,
        metavar="N",
        help="lines per cue at most (with --max-line-width; cues then run across segments)",
    )
    g.add_argument(
        "--max-words-per-line",
        type=positive_int,
        default=None,
        metavar="N",
        help="words per cue at most (while cues follow segments)",
    )
    g.add_argument(
        "--highlight-words", action="store_true", help="a cue per word too, with the word underlined (<u>...</u>)"
    )
    g = p.add_argument_group("speakers")
    g.add_argument(
        "--diarize",
        dest="diarize_model",
        default=None,
        metavar="MODEL",
        help="find who spoke when with this diarization model (a directory or .nemo archive; oasr diarize reads "
        "the same): segments and words get speakers (verbose_json, diarized_json; srt [SPEAKER_00]: and vtt <v> "
        "labels), by WhisperX's overlap rule",
    )
    add_speaker_count_flags(g)
    add_transcription_options(p)
    add_ray_transcribe_options(p)
    p.set_defaults(func=run, parser=p)


# ---------------------------------------------------------------------------
# Inputs and output names


def _sources(files: list[str]) -> list[Source]:
    return [Source("<stdin>", sys.stdin.buffer.read()) if f == "-" else Source(f, f) for f in files]


def _probe_seconds(source: Source) -> float | None:
    """The duration a file's header declares (None when it declares none or is not a file)."""
    if not isinstance(source.data, (str, os.PathLike)):
        return None
    try:
        import av

        with av.open(os.fspath(source.data), metadata_errors="ignore") as container:
            if container.duration:
                return container.duration / 1_000_000
    except Exception:  # the transcription itself reports a bad file
        return None
    return None


# ---------------------------------------------------------------------------
# Live output


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


def stdout_document(output, fmt: str, label: str, several: bool, words: bool, layout) -> str:
    """What stdout gets for one input's ``output`` in format ``fmt``: the document itself for a
    single input; with several, a JSON Lines row with its ``"file"`` for the JSON formats,
    ``<label>: <transcript>`` for text (as ``grep`` names files) and the document under a
    ``==> <label> <==`` header line then a blank line (as ``head`` does) for the subtitle formats."""
    from oasr.formatting import format_output, json_line

    if several and fmt in ("json", "verbose_json"):
        return json_line(output, fmt, label, words=words)
    doc = format_output(output, fmt, words=words, layout=layout)
    if not several:
        return doc
    if fmt == "text":
        return f"{label}: {doc}"
    return f"==> {label} <==\n{doc}\n"


def segment_line(segment, label: str | None = None) -> str:
    """``[MM:SS.mmm --> MM:SS.mmm] text`` (hours from one hour on), as openai-whisper prints."""
    from oasr.formatting import format_timestamp

    a = format_timestamp(segment.start, decimal_marker=".", always_include_hours=False)
    b = format_timestamp(segment.end, decimal_marker=".", always_include_hours=False)
    text = " ".join(segment.text.split())
    if segment.speaker is not None:
        text = f"[{segment.speaker}]: {text}"
    return f"{label} [{a} --> {b}] {text}" if label else f"[{a} --> {b}] {text}"


class AudioProgress:
    """A tqdm bar on stderr counting seconds of audio: the total from the files' headers
    (an input without one adds its duration when it finishes), advanced to each segment's
    end as it is decoded and to the input's end when it finishes or fails."""

    def __init__(self, sources: list[Source], enabled: bool) -> None:
        self.enabled = enabled
        self.totals = [_probe_seconds(s) for s in sources] if enabled else [None] * len(sources)
        self.done = [0.0] * len(sources)
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=self._total(),
                unit="s",
                file=sys.stderr,
                dynamic_ncols=True,
                leave=False,
                bar_format="{l_bar}{bar}| {n:.1f}/{total:.1f} s of audio [{elapsed}<{remaining}]",
            )

    def _total(self) -> float:
        return sum(t or 0.0 for t in self.totals)

    def _move(self) -> None:
        # The bar's count is set to the exact sum of the inputs' positions, never past its total (the
        # same sum of the same numbers): adding rounded steps to a rounded total went past it at the
        # end of a file and tqdm warned "clamping frac to range [0, 1]".
        self.bar.n = min(sum(self.done), self.bar.total)
        self.bar.update(0)  # redraws at tqdm's own pace

    def advance(self, index: int, seconds: float) -> None:
        if self.bar is None:
            return
        total = self.totals[index]
        position = min(seconds, total) if total is not None else seconds
        if position > self.done[index]:
            self.done[index] = position
            self._move()

    def finish(self, index: int, duration: float | None) -> None:
        if self.bar is None:
            return
        if self.totals[index] is None:
            self.totals[index] = max(duration or 0.0, self.done[index])
            self.bar.total = self._total()
            self._move()  # what it decoded before its length was known now counts
        self.advance(index, self.totals[index])

    def write(self, line: str, file, end: str = "\n") -> None:
        """Print ``line`` above the bar (clearing and redrawing it)."""
        if self.bar is None:
            print(line, file=file, end=end, flush=True)
        else:
            self.bar.write(line, file=file, end=end)
            file.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------------------
# The command


def _layout(args: argparse.Namespace, parser: argparse.ArgumentParser, options: dict):
    from oasr.formatting import SubtitleLayout

    given = [name for name in _SUBTITLE_OPTIONS if getattr(args, name)]
    if given and not options.get("word_timestamps"):
        flag = "--" + given[0].replace("_", "-")
        parser.error(f"{flag} needs --word-timestamps (subtitle cues are laid out from word times)")
    if args.max_line_count and not args.max_line_width:
        print(f"oasr {NAME}: warning: --max-line-count has no effect without --max-line-width", file=sys.stderr)
    return SubtitleLayout(
        max_line_width=args.max_line_width,
        max_line_count=args.max_line_count,
        max_words_per_line=args.max_words_per_line,
        highlight_words=args.highlight_words,
    )


def run(args: argparse.Namespace) -> int:
    if args.ray:
        return run_ray_transcribe(args, _layout)
    from oasr.engine.outputs import Segment
    from oasr.formatting import format_output

    parser: argparse.ArgumentParser = args.parser
    options = decode_kwargs(args)
    layout = _layout(args, parser, options)
    if args.min_duration < 0:
        parser.error(f"argument --min-duration: must be >= 0, got {args.min_duration:g}")
    counts = [f"--{n.replace('_', '-')}" for n in ("num_speakers", "min_speakers", "max_speakers") if n in options]
    if counts and args.diarize_model is None:
        parser.error(f"{counts[0]} needs --diarize MODEL (the diarization model)")
    plan = plan_files(args, args.recursive)
    files, targets, fmt = plan.files, plan.targets, plan.formats[0]
    if "diarized_json" in plan.formats and args.diarize_model is None:
        parser.error("-f diarized_json needs --diarize MODEL (the diarization model)")

    sources = _sources(files)
    engine = load_engine(args)
    try:
        engine.make_options(**options)
    except (TypeError, ValueError) as e:
        parser.error(str(e))
    plan.create_output_dir()

    several = len(sources) > 1
    # The transcript is shown once: text to a terminal is the live segments themselves; another
    # format to a terminal is its document (segments on stderr only with --verbose); to a file or a
    # pipe, the live view is on stderr when that is a terminal.
    stdout_tty = targets is None and _isatty(sys.stdout)
    live_is_output = stdout_tty and fmt == "text" and not args.quiet
    if stdout_tty:
        live = live_is_output or args.verbose
    else:
        live = args.verbose or (not args.quiet and _isatty(sys.stderr))
    live_file = sys.stdout if live_is_output else sys.stderr
    progress = AudioProgress(sources, enabled=not (args.no_progress or args.quiet) and _isatty(sys.stderr))
    words = bool(options.get("word_timestamps"))
    pending: dict[int, str] = {}  # stdout documents waiting for the ones before them
    next_to_print = 0
    failed: set[int] = set()
    shown = [0] * len(sources)  # segments printed live, per input

    def report(index: int, message: str) -> None:
        failed.add(index)
        progress.write(f"oasr {NAME}: {sources[index].label}: {message}", file=sys.stderr)

    def show(index: int, segment) -> None:
        shown[index] += 1
        progress.advance(index, segment.end)
        if live:
            progress.write(segment_line(segment, sources[index].label if several else None), file=live_file)

    def flush_stdout() -> None:
        nonlocal next_to_print
        while next_to_print in pending:
            doc = pending.pop(next_to_print)
            if doc:
                progress.write(doc, file=sys.stdout, end="")
            next_to_print += 1

    def on_result(index: int, output) -> None:
        for segment in output.segments[shown[index] :]:  # a strategy that reports them only at the end
            show(index, segment)
        progress.finish(index, output.duration)
        if output.finish_reason == "length":
            progress.write(f"oasr {NAME}: {sources[index].label}: warning: {CUT_WARNING}", file=sys.stderr)
        if targets is not None:
            for f, path in targets[index].items():
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(format_output(output, f, words=words, layout=layout), encoding="utf-8")
                except OSError as e:
                    report(index, f"cannot write {path}: {describe_error(e)}")
            return
        if live_is_output:  # the segments printed were the output (a transcript without segments: its text)
            doc = "" if shown[index] else stdout_document(output, fmt, sources[index].label, several, words, layout)
        else:
            doc = stdout_document(output, fmt, sources[index].label, several, words, layout)
        pending[index] = doc
        flush_stdout()

    def on_error(index: int, exc: BaseException) -> None:
        progress.finish(index, None)
        report(index, _problem(sources[index], exc))
        pending[index] = ""
        flush_stdout()

    try:
        results = engine.transcribe_iter(
            (s.data for s in sources),
            return_exceptions=True,
            segments=True,
            min_duration_s=args.min_duration,
            **options,
        )
        for index, item in results:
            if isinstance(item, Segment):
                show(index, item)
            elif isinstance(item, BaseException):
                on_error(index, item)
            else:
                on_result(index, item)
    finally:
        progress.close()
    if failed:
        print(
            f"oasr {NAME}: {len(failed)} of {len(sources)} input{'s' if len(sources) != 1 else ''} failed",
            file=sys.stderr,
        )
    return 1 if failed else 0
