"""``oasr stream FILE... -m DIARIZER``: files fed to a streaming diarizer as live sources.

When the model is a diarization model that streams (one whose ``Diarizer`` has ``stream()``,
Nemotron 3 Diarization), ``oasr stream`` feeds each file in pieces of ``--chunk-ms`` (160 ms when
not given; ``--realtime``: at the speed of a live source) to a stream of its own in the
checkpoint's streaming mode (``--streaming-mode`` picks another). Live output on stderr: the
speakers talking now, rewritten in place on a terminal, and each finished turn as
``[MM:SS.mmm --> MM:SS.mmm] SPEAKER_00`` (not with ``--quiet``). Each file's turns go to stdout,
or with ``-o DIR`` to ``DIR/<stem>.rttm``: RTTM with ``-f text`` (the default), the
``Diarization`` JSON with ``-f json``. Transcription options do not apply and are refused.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

FORMATS = {"text": "rttm", "txt": "rttm", "json": "json"}  # -f -> the extension written
# Flags of `oasr stream` that only a transcription reads (besides the decoding options).
_ASR_ONLY = ("endpoint", "min_chunk_s", "buffer_trimming_s", "stream_left_chunks")


def is_diarizer(model: str | None) -> bool:
    """Whether ``model`` is a directory or file a diarization package reads."""
    if not model or not Path(model).exists():
        return False
    from oasr.diarization.loader import detect_diarizer

    return detect_diarizer(model) is not None


def run_diarizer_stream(args: argparse.Namespace, *, feed_ms: float, display, read) -> int:
    """``oasr stream`` over a diarizer (see the module).

    Args:
        feed_ms: the piece fed at a time when ``--chunk-ms`` is not given.
        display: ``oasr stream``'s live display (``line``, ``partial``, ``clear``, ``quiet``).
        read: ``read(item, sampling_rate) -> samples`` of an input (a path or ``-``).
    """
    from oasr.cli.common import CliError, decode_kwargs, plan_files, resolve_device
    from oasr.diarization.loader import load_diarizer
    from oasr.diarization.types import Diarization
    from oasr.serving.common import describe_error

    parser: argparse.ArgumentParser = args.parser
    asr_options = sorted(decode_kwargs(args)) + [n for n in _ASR_ONLY if getattr(args, n, None)]
    if asr_options:
        parser.error(f"{args.model} is a diarization model: transcription options do not apply ({asr_options})")
    if args.output_format not in FORMATS:
        parser.error(f"a diarization model writes -f text (RTTM) or json, not {args.output_format!r}")
    plan = plan_files(args, recursive=False)
    try:
        diarizer = load_diarizer(args.model, device=resolve_device(args.device), dtype=args.dtype)
    except (ValueError, OSError, RuntimeError) as e:
        raise CliError(f"could not load diarization model {args.model}: {e}", exit_code=2) from None
    if not callable(getattr(diarizer, "stream", None)):
        parser.error(f"the diarization model {args.model} does not stream; use oasr diarize")
    try:
        diarizer.stream(args.streaming_mode).close()
    except ValueError as e:
        parser.error(str(e))
    plan.create_output_dir()

    ext = FORMATS[args.output_format]
    piece = max(1, int(round(diarizer.sampling_rate * (args.stream_chunk_ms or feed_ms) / 1000.0)))
    several = len(plan.files) > 1
    failed = 0
    for index, item in enumerate(plan.files):
        label = "<stdin>" if item == "-" else item
        try:
            samples = read(item, diarizer.sampling_rate)
        except (OSError, ValueError) as e:
            failed += 1
            display.line(f"oasr stream: {label}: {describe_error(e)}")
            continue
        turns = stream_turns(
            diarizer, samples, args.streaming_mode, piece, args.realtime, display, label if several else None
        )
        result = Diarization(turns, len(samples) / diarizer.sampling_rate)
        uri = Path(label).stem.replace(" ", "_") or "audio"
        text = result.to_rttm(uri) if ext == "rttm" else json.dumps(result.to_dict(), ensure_ascii=False) + "\n"
        if plan.targets is None:
            sys.stdout.write(text)
            sys.stdout.flush()
            continue
        path = plan.targets[index][next(iter(plan.targets[index]))].with_suffix(f".{ext}")
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as e:
            failed += 1
            display.line(f"oasr stream: {label}: cannot write {path}: {describe_error(e)}")
    if failed:
        print(f"oasr stream: {failed} of {len(plan.files)} inputs failed", file=sys.stderr)
    return 1 if failed else 0


def stream_turns(diarizer, samples, mode: str | None, piece: int, realtime: bool, display, label: str | None) -> list:
    """Feed ``samples`` to a new stream of ``diarizer``; the finished turns, shown as they close."""
    from oasr.formatting import format_timestamp

    def ts(t: float) -> str:
        return format_timestamp(t, decimal_marker=".", always_include_hours=False)

    stream = diarizer.stream(mode)
    rate = diarizer.sampling_rate
    talking: dict[str, float] = {}
    turns = []

    def show(events) -> None:
        for event in events:
            if event.type == "turn_opened":
                talking[event.speaker] = event.start
            else:
                talking.pop(event.speaker, None)
                turns.append(event.turn)
                if not display.quiet:
                    display.line(
                        f"{label + ' ' if label else ''}[{ts(event.start)} --> {ts(event.time)}] {event.speaker}"
                    )
        now = ", ".join(f"{s} since {ts(t)}" for s, t in talking.items())
        display.partial(label, f"talking: {now}" if now else "(no one)")

    started = time.monotonic()
    for a in range(0, len(samples), piece):
        b = min(a + piece, len(samples))
        if realtime:
            time.sleep(max(0.0, started + b / rate - time.monotonic()))
        show(stream.feed(samples[a:b]))
    show(stream.close())
    display.clear()
    return turns
