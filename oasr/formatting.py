"""Render a ``RequestOutput`` as text, JSON, verbose JSON, SRT or WebVTT.

Shared by the command line (``oasr transcribe -f ...``) and the HTTP server
(``response_format=...``), so both write the same bytes for the same transcript.

Every ``to_*`` writer returns the complete document as a ``str`` ending in a newline
(or ``""`` for an SRT file with no cues). ``json_dict`` / ``verbose_json_dict`` return
the JSON documents as dicts for callers that serialise themselves.

Choices:

* ``json`` is OpenAI's ``{"text": ...}`` plus ``"language"`` as the ISO code the
  engine reports (``"en"``; ``null`` when unknown).
* ``verbose_json`` follows OpenAI's ``verbose_json``: ``"language"`` is the
  lower-case English name (``"english"``), as OpenAI returns it (a code without a
  known name is passed through as it is); segment ``id`` is the 0-based position
  in the list (the engine numbers segments from 1, as faster-whisper does); word
  text is stripped of its leading space; times are seconds rounded to the
  millisecond. The top-level ``"words"`` list is present when ``words=True`` (the
  words the engine timed, possibly none).
* SRT: 1-based cue numbers, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, cues separated by
  a blank line. WebVTT: a ``WEBVTT`` header, then ``HH:MM:SS.mmm --> HH:MM:SS.mmm``
  cues. Times are rounded to the nearest millisecond *before* being split into
  fields, so 59.9996 s is ``00:01:00,000`` (never ``00:00:59,1000``); hours grow
  past 99 rather than wrap. Segments with empty text are skipped (an empty cue
  would end the cue block early); line breaks inside a cue's text are collapsed,
  and WebVTT text has ``&``, ``<`` and ``>`` escaped (which also breaks up ``-->``),
  as the WebVTT grammar requires.
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any

from oasr import languages

if TYPE_CHECKING:  # annotations only: the CLI reads FORMATS for `--help` without loading the engine
    from oasr.engine.outputs import RequestOutput, Segment

__all__ = [
    "EXTENSIONS",
    "FORMATS",
    "format_output",
    "format_timestamp",
    "json_dict",
    "language_name",
    "to_json",
    "to_srt",
    "to_text",
    "to_verbose_json",
    "to_vtt",
    "verbose_json_dict",
]

FORMATS: tuple[str, ...] = ("text", "json", "verbose_json", "srt", "vtt")
"""The output formats, by the names OpenAI's ``response_format`` uses."""

EXTENSIONS: dict[str, str] = {"text": "txt", "json": "json", "verbose_json": "verbose_json", "srt": "srt", "vtt": "vtt"}
"""File extension (without the dot) written for each format."""

_LINE_BREAKS = re.compile(r"\s*[\r\n]+\s*")
_INT_ARRAY = re.compile(r"\[\n\s*(-?\d+(?:,\n\s*-?\d+)*)\n\s*\]")


def format_timestamp(seconds: float, *, decimal_marker: str = ",") -> str:
    """``HH:MM:SS<marker>mmm`` for ``seconds`` (rounded to the nearest millisecond).

    Negative or non-finite times are clamped to 0; hours are at least two digits and
    are not wrapped at 24 or 100.
    """
    if not math.isfinite(seconds) or seconds < 0:
        seconds = 0.0
    total_ms = int(round(seconds * 1000.0))
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal_marker}{millis:03d}"


def language_name(language: str | None) -> str | None:
    """The lower-case English name of an ISO code (``"en"`` -> ``"english"``), as OpenAI
    reports languages; unknown codes are returned unchanged."""
    return languages.language_name(language)


def _ms(seconds: float) -> float:
    return round(float(seconds), 3)


def _cues(out: RequestOutput) -> list[tuple[float, float, str]]:
    cues = []
    for seg in out.segments:
        text = _LINE_BREAKS.sub(" ", seg.text).strip()
        if not text:
            continue
        start = max(0.0, float(seg.start))
        cues.append((start, max(start, float(seg.end)), text))
    return cues


def to_text(out: RequestOutput) -> str:
    """The transcript as one line of plain text (with a trailing newline)."""
    return _LINE_BREAKS.sub(" ", out.text).strip() + "\n"


def json_dict(out: RequestOutput) -> dict[str, Any]:
    """``{"text": ..., "language": <ISO code or None>}``."""
    return {"text": out.text.strip(), "language": out.language}


def to_json(out: RequestOutput) -> str:
    """``json_dict`` serialised (UTF-8 characters kept as they are)."""
    return json.dumps(json_dict(out), ensure_ascii=False) + "\n"


def _segment_dict(index: int, seg: Segment) -> dict[str, Any]:
    return {
        "id": index,
        "seek": int(seg.seek),
        "start": _ms(seg.start),
        "end": _ms(seg.end),
        "text": seg.text,
        "tokens": [int(t) for t in seg.tokens],
        "temperature": float(seg.temperature),
        "avg_logprob": float(seg.avg_logprob),
        "compression_ratio": float(seg.compression_ratio),
        "no_speech_prob": float(seg.no_speech_prob),
    }


def verbose_json_dict(out: RequestOutput, words: bool = False) -> dict[str, Any]:
    """OpenAI's ``verbose_json`` document (see the module notes for the choices made).

    Args:
        out: the transcript.
        words: add the top-level ``"words"`` list ``[{"word", "start", "end"}]``.
    """
    doc: dict[str, Any] = {
        "task": out.task,
        "language": language_name(out.language),
        "duration": _ms(out.duration),
        "text": out.text.strip(),
        "segments": [_segment_dict(i, seg) for i, seg in enumerate(out.segments)],
    }
    if words:
        doc["words"] = [
            {"word": w.word.strip(), "start": _ms(w.start), "end": _ms(w.end)}
            for seg in out.segments
            for w in seg.words or ()
        ]
    return doc


def to_verbose_json(out: RequestOutput, words: bool = False) -> str:
    """``verbose_json_dict`` serialised with a two-space indent (token lists on one line)."""
    text = json.dumps(verbose_json_dict(out, words), ensure_ascii=False, indent=2)
    # JSON strings cannot hold a raw newline, so this only ever rewrites integer arrays.
    text = _INT_ARRAY.sub(lambda m: "[" + ", ".join(re.findall(r"-?\d+", m.group(1))) + "]", text)
    return text + "\n"


def to_srt(out: RequestOutput) -> str:
    """SubRip subtitles, one cue per segment."""
    blocks = [
        f"{n}\n{format_timestamp(start)} --> {format_timestamp(end)}\n{text}\n"
        for n, (start, end, text) in enumerate(_cues(out), start=1)
    ]
    return "\n".join(blocks)


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_vtt(out: RequestOutput) -> str:
    """WebVTT subtitles, one cue per segment."""
    blocks = ["WEBVTT\n"]
    for start, end, text in _cues(out):
        a = format_timestamp(start, decimal_marker=".")
        b = format_timestamp(end, decimal_marker=".")
        blocks.append(f"{a} --> {b}\n{_vtt_escape(text)}\n")
    return "\n".join(blocks)


def format_output(out: RequestOutput, fmt: str, *, words: bool | None = None) -> str:
    """Render ``out`` in format ``fmt`` (one of ``FORMATS``).

    Args:
        words: for ``verbose_json``, whether to add the top-level word list; None adds
            it when the engine timed words.

    Raises:
        ValueError: an unknown format, naming the known ones.
    """
    if fmt == "text":
        return to_text(out)
    if fmt == "json":
        return to_json(out)
    if fmt == "verbose_json":
        if words is None:
            words = any(seg.words for seg in out.segments)
        return to_verbose_json(out, words)
    if fmt == "srt":
        return to_srt(out)
    if fmt == "vtt":
        return to_vtt(out)
    raise ValueError(f"unknown output format {fmt!r}; expected one of {', '.join(FORMATS)}")
