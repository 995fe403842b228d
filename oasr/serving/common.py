"""What ``oasr transcribe`` / ``oasr serve`` and their Ray runs (``ray_batch``, ``ray``) share: the
audio files a folder holds, the output names of a batch, the wording of an input's failure, the
progress bar, a replica range. Imports no Ray (the CLI imports it at start-up)."""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

AUDIO_EXTENSIONS = frozenset(
    "wav wave flac mp3 mp2 ogg oga opus spx m4a m4b aac wma webm weba mp4 mkv mka mov "
    "aiff aif aifc amr 3gp 3g2 caf ac3 eac3 wv ape au snd".split()
)
"""What a directory is searched for (any file given by name or glob is tried, whatever its name)."""


@dataclass
class Source:
    """One input: a label for messages and what ``load_audio`` reads (a path or bytes)."""

    label: str
    data: str | os.PathLike | bytes


def progress_bar(total: int, disable: bool, unit: str = "file"):
    """A tqdm bar on stderr, off when asked or when stderr is not a terminal."""
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        unit=unit,
        file=sys.stderr,
        disable=disable or not sys.stderr.isatty(),
        dynamic_ncols=True,
        leave=False,
    )


def describe_error(exc: BaseException) -> str:
    """A one-line description of why an input failed."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, ValueError):  # AudioDecodeError and bad values say what is wrong
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def output_names(files: list[str]) -> list[Path]:
    """Per input, its output path relative to ``-o`` without the format's extension: the
    stem; the whole file name for inputs whose stems clash; their directories relative to
    the inputs' common parent for inputs whose file names clash too (``oasr.cli.transcribe``'s notes)."""
    absolute = {i: Path(os.path.abspath(f)) for i, f in enumerate(files) if f != "-"}
    common = Path(os.path.commonpath([str(p.parent) for p in absolute.values()])) if absolute else None

    def candidate(i: int, level: int) -> Path:
        if i not in absolute:
            return Path("stdin")
        p = absolute[i]
        return [Path(p.stem), Path(p.name), p.parent.relative_to(common) / p.name][level]

    levels = [0] * len(files)
    while True:
        names = [candidate(i, levels[i]) for i in range(len(files))]
        groups: dict[str, list[int]] = defaultdict(list)
        for i, name in enumerate(names):
            groups[os.path.normcase(str(name))].append(i)
        clashing = [i for group in groups.values() if len(group) > 1 for i in group if levels[i] < 2]
        if not clashing:
            return names
        for i in clashing:
            levels[i] += 1


def problem(source: Source, exc: BaseException) -> str:
    """Why ``source`` failed, without the file name the audio reader put in (the CLI's
    message starts with it)."""
    message = describe_error(exc)
    data = source.data
    name = os.fspath(data) if isinstance(data, (str, os.PathLike)) else f"<bytes of {len(data)} bytes>"
    for old, new in ((f": {name}:", ":"), (f" from {name}", ""), (f": {name}", ""), (f"{name}: ", "")):
        message = message.replace(old, new)
    return message


def parse_autoscale(text: str) -> tuple[int, int]:
    """``MIN:MAX`` -> ``(min, max)`` replicas.

    Raises:
        ValueError: not two integers with 0 <= MIN <= MAX and MAX >= 1.
    """
    low, sep, high = str(text).partition(":")
    try:
        lo, hi = int(low), int(high)
    except ValueError:
        raise ValueError(f"expected MIN:MAX replicas, got {text!r}") from None
    if not sep or lo < 0 or hi < 1 or lo > hi:
        raise ValueError(f"expected MIN:MAX with 0 <= MIN <= MAX and MAX >= 1, got {text!r}")
    return lo, hi
