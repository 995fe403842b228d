"""``oasr diarize FILE...``: who spoke when, as RTTM or JSON.

The model (``-m DIR``) is any layout ``oasr.diarization.loader.load_diarizer`` reads. Inputs are
expanded as ``oasr transcribe`` expands them (directories, ``--recursive``, glob patterns; ``-``
reads stdin), decoded at the model's rate and diarized ``--batch-size`` files a call
(``oasr.diarization.service.DiarizationService``: one batched forward for the batch).

Output: ``-f rttm`` (default) is NIST RTTM, one ``SPEAKER`` line per turn, the file id being the
input's name without its extension (whitespace replaced by ``_``, which RTTM's fields cannot
hold); several inputs on stdout simply follow each other, as RTTM files concatenate. ``-f json``
is ``Diarization.to_dict()`` (``turns`` of ``{start, end, speaker}``, ``duration``, ``speakers``);
several inputs on stdout are JSON Lines with each input's ``"file"`` first. With ``-o DIR``:
``DIR/<stem>.rttm`` or ``.json`` per input, named as ``oasr transcribe`` names its outputs.

A file that cannot be read or diarized is reported on stderr and skipped (exit code 1); a model
that does not load, or speaker counts it cannot honour: exit code 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from oasr.cli.common import (
    DTYPE_CHOICES,
    CliError,
    add_speaker_count_flags,
    expand_inputs,
    nonnegative_int,
    positive_int,
    resolve_device,
)

NAME = "diarize"
FORMATS = ("rttm", "json")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        NAME,
        help="find who spoke when in audio files (RTTM, JSON)",
        description="Speaker diarization of audio files with one model load and batched forwards.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="audio files, directories or glob patterns; - for stdin")
    p.add_argument("-r", "--recursive", action="store_true", help="directories: search their subdirectories too")
    p.add_argument("-f", "--output-format", choices=FORMATS, default="rttm", help="rttm (default) or json")
    p.add_argument("-o", "--output-dir", default=None, metavar="DIR", help="write DIR/<stem>.<rttm|json> per input")
    g = p.add_argument_group("model")
    g.add_argument(
        "-m",
        "--model",
        required=True,
        metavar="DIR",
        help="the diarization model: transformers' nemotron3_diarization directory, a pyannote.audio pipeline "
        "directory, or a NeMo Sortformer .nemo archive",
    )
    g.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... or auto (cuda when available; default)")
    g.add_argument("--dtype", choices=DTYPE_CHOICES, default=None, help="compute dtype (default: the model's choice)")
    g.add_argument("--threads", type=nonnegative_int, default=0, metavar="N", help="CPU threads (0: torch's default)")
    g.add_argument("--batch-size", type=positive_int, default=8, metavar="N", help="files per forward (default 8)")
    add_speaker_count_flags(p.add_argument_group("speakers"))
    p.set_defaults(func=run, parser=p)


def rttm_id(label: str) -> str:
    """An RTTM file id for an input: its name without the extension, whitespace as ``_``."""
    name = Path(label).stem if label != "<stdin>" else "stdin"
    return re.sub(r"\s", "_", name) or "audio"


def run(args: argparse.Namespace) -> int:
    from oasr.diarization.service import DiarizationJob, SpeakerConstraints
    from oasr.serving.common import Source, output_names
    from oasr.serving.common import problem as _problem

    parser: argparse.ArgumentParser = args.parser
    try:
        constraints = SpeakerConstraints(args.num_speakers, args.min_speakers, args.max_speakers)
    except ValueError as e:
        parser.error(str(e))
    files = expand_inputs(args.files, args.recursive, parser)
    if files.count("-") > 1:
        parser.error("stdin (-) can be read once")
    sources = [Source("<stdin>", sys.stdin.buffer.read()) if f == "-" else Source(f, f) for f in files]
    service = _load(args)
    try:
        constraints.check(service.diarizer)
    except ValueError as e:
        raise CliError(str(e), exit_code=2) from None
    out_dir = Path(args.output_dir) if args.output_dir is not None else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        names = output_names(files)
    ext = args.output_format
    several = len(sources) > 1
    failed = 0

    def write(index: int, diarization) -> None:
        source = sources[index]
        if ext == "rttm":
            doc = diarization.to_rttm(rttm_id(source.label))
        elif several and out_dir is None:
            doc = json.dumps({"file": source.label, **diarization.to_dict()}, ensure_ascii=False) + "\n"
        else:
            doc = json.dumps(diarization.to_dict(), ensure_ascii=False, indent=2) + "\n"
        if out_dir is None:
            sys.stdout.write(doc)
            sys.stdout.flush()
            return
        path = out_dir / f"{names[index]}.{ext}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(doc, encoding="utf-8")

    from oasr.audio.io import load_audio

    for first in range(0, len(sources), service.batch_size):
        batch: list[tuple[int, DiarizationJob]] = []
        for index in range(first, min(first + service.batch_size, len(sources))):
            try:
                audio = load_audio(sources[index].data, service.sampling_rate)
            except (ValueError, OSError, TypeError) as e:
                failed += 1
                print(f"oasr {NAME}: {sources[index].label}: {_problem(sources[index], e)}", file=sys.stderr)
                continue
            batch.append((index, DiarizationJob(audio, constraints)))
        service.run([job for _, job in batch])
        for index, job in batch:
            if job.error is not None or job.result is None:
                failed += 1
                print(f"oasr {NAME}: {sources[index].label}: {_problem(sources[index], job.error)}", file=sys.stderr)
                continue
            write(index, job.result)
    if failed:
        plural = "s" if len(sources) != 1 else ""
        print(f"oasr {NAME}: {failed} of {len(sources)} input{plural} failed", file=sys.stderr)
    return 1 if failed else 0


def _load(args: argparse.Namespace):
    """The diarization service over ``--model``.

    Raises:
        CliError: (exit code 2) a model that is not there or does not load.
    """
    import torch

    from oasr.diarization.loader import load_diarizer
    from oasr.diarization.service import DiarizationService

    device = resolve_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = None if args.dtype in (None, "auto") else args.dtype
    try:
        diarizer = load_diarizer(args.model, device=device, dtype=dtype)
    except (ValueError, OSError, RuntimeError) as e:
        raise CliError(f"could not load diarization model {args.model}: {e}", exit_code=2) from None
    return DiarizationService(diarizer, batch_size=args.batch_size)
