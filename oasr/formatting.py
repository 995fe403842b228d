"""Render a ``RequestOutput`` as text, JSON, verbose JSON, SRT, WebVTT or TSV.

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
  words the engine timed, possibly none). An extension: ``"finish_reason"``, "stop", or
  "length" when a token budget cut the transcript (``RequestOutput.finish_reason``).
* Both JSON documents carry ``"emotion"`` and ``"audio_events"`` where the model tags them
  (SenseVoice: ``RequestOutput.emotion`` / ``.audio_events``), and leave them out where it does not.
* SRT: 1-based cue numbers, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, cues separated by
  a blank line. WebVTT: a ``WEBVTT`` header, then ``HH:MM:SS.mmm --> HH:MM:SS.mmm``
  cues. Times are rounded to the nearest millisecond *before* being split into
  fields, so 59.9996 s is ``00:01:00,000`` (never ``00:00:59,1000``); hours grow
  past 99 rather than wrap. Segments with empty text are skipped (an empty cue
  would end the cue block early); line breaks inside a cue's text are collapsed,
  and WebVTT text has ``&``, ``<`` and ``>`` escaped (which also breaks up ``-->``),
  as the WebVTT grammar requires.
* Subtitle cues never run past the end of the audio: every time is clamped to
  ``out.duration`` (when it is known, > 0), as the last window's timestamps may overshoot.
* When every segment with text has timed words (``word_timestamps``), SRT and WebVTT
  cues are laid out from the words, as openai-whisper's subtitle writers do: a cue
  spans its first word's start to its last word's end, and a ``SubtitleLayout`` may
  cut and wrap them (see its docstring). Without words, a cue is a segment.
* Speakers (a transcript diarized: ``Segment.speaker`` / ``Word.speaker`` set,
  ``oasr.diarization.assign``): ``verbose_json`` segments and words carry ``"speaker"``; subtitle
  cues never mix speakers (word-laid cues are cut where the speaker changes) and are labelled as
  WhisperX's writers label them in SRT, ``[SPEAKER_00]: text``, and with WebVTT's voice span in
  WebVTT, ``<v SPEAKER_00>text``, which browser players (``<track>``) read as the cue's speaker.
  ``diarized_json`` is OpenAI's ``TranscriptionDiarized``: ``task``, ``duration``, ``text``,
  ``segments`` of ``{"type": "transcript.text.segment", "id", "start", "end", "text",
  "speaker"}``, each segment one speaker's (``speaker_runs``: the engine's segments cut where
  the speaker changes between words), ids ``seg_0``, ``seg_1``, ...; speakers named as OpenAI
  names them, ``A``, ``B``, ... in order of first appearance, except known speakers, who keep
  their names. Undiarized segments in it have speaker ``null``.
* TSV is openai-whisper's: a ``start<TAB>end<TAB>text`` header, then one line per
  segment with the times in integer milliseconds (tabs in the text become spaces).
* ``txt`` is another name for ``text`` (``FORMAT_ALIASES``), and ``all`` stands for
  openai-whisper's set, txt, vtt, srt, tsv and json (``ALL_FORMATS``).
* Several transcripts on one stream in a JSON format are JSON Lines (``json_line``): one
  object a line, its ``"file"`` first, as ``jq`` and ``pandas.read_json(lines=True)`` read them.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oasr import languages

if TYPE_CHECKING:  # annotations only: the CLI reads FORMATS for `--help` without loading the engine
    from oasr.engine.outputs import RequestOutput, Segment

__all__ = [
    "ALL_FORMATS",
    "EXTENSIONS",
    "FORMATS",
    "FORMAT_ALIASES",
    "SubtitleLayout",
    "format_output",
    "format_timestamp",
    "json_dict",
    "json_line",
    "language_name",
    "output_formats",
    "diarized_json_dict",
    "to_diarized_json",
    "to_json",
    "to_srt",
    "subtitle_cues",
    "to_text",
    "to_tsv",
    "to_verbose_json",
    "to_vtt",
    "verbose_json_dict",
]

FORMATS: tuple[str, ...] = ("text", "json", "verbose_json", "srt", "vtt", "tsv", "diarized_json")
"""The output formats, by the names OpenAI's ``response_format`` uses (and openai-whisper's ``tsv``)."""

EXTENSIONS: dict[str, str] = {
    "text": "txt",
    "json": "json",
    "verbose_json": "verbose_json",
    "srt": "srt",
    "vtt": "vtt",
    "tsv": "tsv",
    "diarized_json": "diarized.json",
}
"""File extension (without the dot) written for each format."""

FORMAT_ALIASES: dict[str, str] = {"txt": "text"}
"""Other names a format is asked for by (``txt``: openai-whisper's and whisper.cpp's name for text)."""

ALL_FORMATS: tuple[str, ...] = ("text", "vtt", "srt", "tsv", "json")
"""What ``all`` writes: openai-whisper's ``--output_format all`` set (txt, vtt, srt, tsv, json), each
document as its own format writes it (``verbose_json`` is asked for by name)."""


def output_formats(name: str) -> tuple[str, ...]:
    """The formats a command-line format name stands for: ``all`` -> ``ALL_FORMATS``, an alias
    (``txt``) -> its format, a format -> itself.

    Raises:
        ValueError: an unknown name, naming the known ones.
    """
    if name == "all":
        return ALL_FORMATS
    fmt = FORMAT_ALIASES.get(name, name)
    if fmt not in FORMATS:
        known = ", ".join((*FORMATS, *FORMAT_ALIASES, "all"))
        raise ValueError(f"unknown output format {name!r}; expected one of {known}")
    return (fmt,)


PAUSE_S = 3.0
"""With both ``max_line_width`` and ``max_line_count``, a word starting this long after the
previous word's start begins a new cue (openai-whisper's rule)."""


@dataclass(frozen=True)
class SubtitleLayout:
    """How word-timed subtitle cues are cut and wrapped (openai-whisper's ``--max_line_width``,
    ``--max_line_count``, ``--max_words_per_line``, ``--highlight_words``).

    Words are placed in order. A word that would take a line past ``max_line_width``
    characters starts a new line; with ``max_line_count`` too, a cue that already holds
    that many lines (or a pause of ``PAUSE_S``) starts a new cue, and cues may run across
    segments. Without both, every segment starts a new cue and, with
    ``max_words_per_line``, so does every run of that many words of a segment.

    Attributes:
        max_line_width: characters per line (None: no limit).
        max_line_count: lines per cue; takes effect with ``max_line_width`` only.
        max_words_per_line: words per cue while cues follow segments (None: no limit).
        highlight_words: one cue per word besides the others, with that word in ``<u>...</u>``
            (and a cue without highlight over any gap between words).
    """

    max_line_width: int | None = None
    max_line_count: int | None = None
    max_words_per_line: int | None = None
    highlight_words: bool = False

    def __post_init__(self) -> None:
        for name in ("max_line_width", "max_line_count", "max_words_per_line"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")


_LINE_BREAKS = re.compile(r"\s*[\r\n]+\s*")
_INT_ARRAY = re.compile(r"\[\n\s*(-?\d+(?:,\n\s*-?\d+)*)\n\s*\]")


def format_timestamp(seconds: float, *, decimal_marker: str = ",", always_include_hours: bool = True) -> str:
    """``HH:MM:SS<marker>mmm`` for ``seconds`` (rounded to the nearest millisecond).

    Negative or non-finite times are clamped to 0; hours are at least two digits and
    are not wrapped at 24 or 100. With ``always_include_hours=False`` the hours are left
    out below one hour (``MM:SS.mmm``, as openai-whisper prints segments).
    """
    if not math.isfinite(seconds) or seconds < 0:
        seconds = 0.0
    total_ms = int(round(seconds * 1000.0))
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    hh = f"{hours:02d}:" if always_include_hours or hours else ""
    return f"{hh}{minutes:02d}:{secs:02d}{decimal_marker}{millis:03d}"


def language_name(language: str | None) -> str | None:
    """The lower-case English name of an ISO code (``"en"`` -> ``"english"``), as OpenAI
    reports languages; unknown codes are returned unchanged."""
    return languages.language_name(language)


def _ms(seconds: float) -> float:
    return round(float(seconds), 3)


def _clamp(seconds: float, duration: float) -> float:
    seconds = max(0.0, float(seconds))
    return min(seconds, duration) if duration > 0 else seconds


def _segment_cues(out: RequestOutput, escape, label) -> list[tuple[float, float, str]]:
    cues = []
    duration = float(out.duration)
    for seg in out.segments:
        text = _LINE_BREAKS.sub(" ", seg.text).strip()
        if not text:
            continue
        start = _clamp(seg.start, duration)
        cues.append((start, max(start, _clamp(seg.end, duration)), label(seg.speaker, escape(text))))
    return cues


def _unlabelled(speaker: str | None, text: str) -> str:
    return text


def _has_words(out: RequestOutput) -> bool:
    texts = [seg for seg in out.segments if seg.text.strip()]
    return bool(texts) and all(seg.words for seg in texts)


def _word_lines(out: RequestOutput, layout: SubtitleLayout) -> list[list[tuple[float, float, str, str | None]]]:
    """The words of ``out`` grouped into cues (with their speakers; a change of speaker starts
    a cue); a word's text starts with ``\n`` where it begins a new line of its cue (and is
    stripped where it begins a line)."""
    width = layout.max_line_width or math.inf
    run = layout.max_words_per_line or math.inf
    count = layout.max_line_count
    follow_segments = layout.max_line_width is None or count is None
    cues: list[list[tuple[float, float, str, str | None]]] = []
    cue: list[tuple[float, float, str, str | None]] = []
    speaker: str | None = None
    line_len, lines = 0, 1
    words = [w for seg in out.segments for w in seg.words or ()]
    last_start = words[0].start if words else 0.0
    for seg in out.segments:
        for k, w in enumerate(seg.words or ()):
            text = _LINE_BREAKS.sub(" ", w.word)
            pause = not follow_segments and w.start - last_start > PAUSE_S
            new_cue_here = follow_segments and k % run == 0 and bool(cue)
            if w.speaker is not None and speaker is not None and w.speaker != speaker and cue:
                new_cue_here = True
            speaker = w.speaker if w.speaker is not None else speaker
            if line_len > 0 and line_len + len(text) <= width and not pause and not new_cue_here:
                line_len += len(text)
            else:
                text = text.strip()
                if new_cue_here or (cue and count is not None and (pause or lines >= count)):
                    cues.append(cue)
                    cue, lines = [], 1
                elif line_len > 0:
                    lines += 1
                    text = "\n" + text
                line_len = len(text.strip())
            cue.append((float(w.start), float(w.end), text, w.speaker))
            last_start = w.start
    if cue:
        cues.append(cue)
    return cues


def subtitle_cues(
    out: RequestOutput, layout: SubtitleLayout | None = None, *, escape=lambda text: text, label=_unlabelled
) -> list[tuple[float, float, str]]:
    """The ``(start, end, text)`` cues SRT and WebVTT write for ``out`` (see the module notes).

    Args:
        layout: how word-timed cues are cut and wrapped (None: one cue per segment's words).
        escape: applied to each piece of cue text (WebVTT escapes ``&<>``) before the
            highlight tags are added.
        label: ``label(speaker, text)``, the text of a cue said by ``speaker`` (None where the
            transcript has no speakers).
    """
    layout = layout or SubtitleLayout()
    if not _has_words(out):
        return _segment_cues(out, escape, label)
    duration = float(out.duration)
    cues = []
    for words in _word_lines(out, layout):
        pieces = [escape(text) for _, _, text, _ in words]
        text = "".join(pieces)
        if not text.strip():
            continue
        speaker = next((s for *_, s in words if s is not None), None)
        start, end = _clamp(words[0][0], duration), _clamp(words[-1][1], duration)
        if not layout.highlight_words:
            cues.append((start, max(start, end), label(speaker, text)))
            continue
        shown = start
        for i, (w_start, w_end, _, _) in enumerate(words):
            w_start, w_end = _clamp(w_start, duration), _clamp(w_end, duration)
            if round(shown * 1000) != round(w_start * 1000):
                cues.append((shown, max(shown, w_start), label(speaker, text)))
            marked = re.sub(r"^(\s*)(.*)$", r"\1<u>\2</u>", pieces[i], flags=re.DOTALL)
            highlighted = "".join(pieces[:i]) + marked + "".join(pieces[i + 1 :])
            cues.append((w_start, max(w_start, w_end), label(speaker, highlighted)))
            shown = w_end
    return cues


def to_text(out: RequestOutput) -> str:
    """The transcript as one line of plain text (with a trailing newline)."""
    return _LINE_BREAKS.sub(" ", out.text).strip() + "\n"


def json_dict(out: RequestOutput) -> dict[str, Any]:
    """``{"text": ..., "language": <ISO code or None>}`` (and the model's tags, ``_tags``)."""
    return {"text": out.text.strip(), "language": out.language, **_tags(out)}


def _tags(out: RequestOutput) -> dict[str, Any]:
    """``emotion`` / ``audio_events`` where the model tagged them (SenseVoice), else nothing."""
    tags = {"emotion": out.emotion, "audio_events": out.audio_events}
    return {k: v for k, v in tags.items() if v is not None}


def to_json(out: RequestOutput) -> str:
    """``json_dict`` serialised (UTF-8 characters kept as they are)."""
    return json.dumps(json_dict(out), ensure_ascii=False) + "\n"


def json_line(out: RequestOutput, fmt: str, file: str, *, words: bool | None = None) -> str:
    """One JSON Lines row for ``out`` in ``json`` or ``verbose_json``: ``{"file": file, ...the
    document's fields}`` on one line, as several inputs are written to one stream."""
    if fmt == "json":
        doc = json_dict(out)
    elif fmt == "verbose_json":
        doc = verbose_json_dict(out, any(seg.words for seg in out.segments) if words is None else words)
    else:
        raise ValueError(f"JSON Lines rows are json or verbose_json, not {fmt!r}")
    return json.dumps({"file": file, **doc}, ensure_ascii=False) + "\n"


def _segment_dict(index: int, seg: Segment) -> dict[str, Any]:
    speaker = {} if seg.speaker is None else {"speaker": seg.speaker}
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
        **speaker,
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
        "finish_reason": out.finish_reason,
        **_tags(out),
        "segments": [_segment_dict(i, seg) for i, seg in enumerate(out.segments)],
    }
    if words:
        doc["words"] = [
            {"word": w.word.strip(), "start": _ms(w.start), "end": _ms(w.end)}
            | ({} if w.speaker is None else {"speaker": w.speaker})
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


def diarized_json_dict(out: RequestOutput, known: tuple[str, ...] = ()) -> dict[str, Any]:
    """OpenAI's ``diarized_json`` document (``TranscriptionDiarized``; see the module notes).

    Args:
        out: a diarized transcript.
        known: the known speakers' names (kept as they are; the others become ``A``, ``B``, ...).
    """
    from oasr.diarization.assign import SpeakerIndex, letter_labels, speaker_runs

    runs = [run for run in speaker_runs(out.segments) if run.text.strip()]
    if out.diarization is not None:  # every OpenAI segment names a speaker: the nearest turn's
        index = SpeakerIndex(out.diarization.turns)
        for run in runs:
            if run.speaker is None:
                run.speaker = index.speaker(run.start, run.end, fill_nearest=True)
    names = letter_labels([run.speaker for run in runs], known)
    return {
        "task": "transcribe",
        "duration": _ms(out.duration),
        "text": out.text.strip(),
        "segments": [
            {
                "type": "transcript.text.segment",
                "id": f"seg_{i}",
                "start": _ms(run.start),
                "end": _ms(run.end),
                "text": _LINE_BREAKS.sub(" ", run.text).strip(),
                "speaker": None if run.speaker is None else names[run.speaker],
            }
            for i, run in enumerate(runs)
        ],
    }


def to_diarized_json(out: RequestOutput) -> str:
    """``diarized_json_dict`` serialised with a two-space indent."""
    return json.dumps(diarized_json_dict(out), ensure_ascii=False, indent=2) + "\n"


def _srt_label(speaker: str | None, text: str) -> str:
    return text if speaker is None else f"[{speaker}]: {text}"


def _vtt_label(speaker: str | None, text: str) -> str:
    return text if speaker is None else f"<v {_vtt_escape(speaker)}>{text}"


def to_srt(out: RequestOutput, layout: SubtitleLayout | None = None) -> str:
    """SubRip subtitles: one cue per segment, or laid out from the words (``subtitle_cues``)."""
    blocks = [
        f"{n}\n{format_timestamp(start)} --> {format_timestamp(end)}\n{text}\n"
        for n, (start, end, text) in enumerate(subtitle_cues(out, layout, label=_srt_label), start=1)
    ]
    return "\n".join(blocks)


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_vtt(out: RequestOutput, layout: SubtitleLayout | None = None) -> str:
    """WebVTT subtitles: one cue per segment, or laid out from the words (``subtitle_cues``)."""
    blocks = ["WEBVTT\n"]
    for start, end, text in subtitle_cues(out, layout, escape=_vtt_escape, label=_vtt_label):
        a = format_timestamp(start, decimal_marker=".")
        b = format_timestamp(end, decimal_marker=".")
        blocks.append(f"{a} --> {b}\n{text}\n")
    return "\n".join(blocks)


def to_tsv(out: RequestOutput) -> str:
    """openai-whisper's TSV: a ``start<TAB>end<TAB>text`` header, then a line per segment with
    integer milliseconds (clamped to the audio's duration)."""
    lines = ["start\tend\ttext"]
    duration = float(out.duration)
    for seg in out.segments:
        start = _clamp(seg.start, duration)
        end = max(start, _clamp(seg.end, duration))
        text = _LINE_BREAKS.sub(" ", seg.text).strip().replace("\t", " ")
        lines.append(f"{round(1000 * start)}\t{round(1000 * end)}\t{text}")
    return "\n".join(lines) + "\n"


def format_output(
    out: RequestOutput, fmt: str, *, words: bool | None = None, layout: SubtitleLayout | None = None
) -> str:
    """Render ``out`` in format ``fmt`` (one of ``FORMATS``).

    Args:
        words: for ``verbose_json``, whether to add the top-level word list; None adds
            it when the engine timed words.
        layout: for ``srt`` / ``vtt``, how word-timed cues are cut (ignored by the others).

    Raises:
        ValueError: an unknown format, naming the known ones.
    """
    fmt = FORMAT_ALIASES.get(fmt, fmt)
    if fmt == "text":
        return to_text(out)
    if fmt == "json":
        return to_json(out)
    if fmt == "verbose_json":
        if words is None:
            words = any(seg.words for seg in out.segments)
        return to_verbose_json(out, words)
    if fmt == "srt":
        return to_srt(out, layout)
    if fmt == "vtt":
        return to_vtt(out, layout)
    if fmt == "tsv":
        return to_tsv(out)
    if fmt == "diarized_json":
        return to_diarized_json(out)
    raise ValueError(f"unknown output format {fmt!r}; expected one of {', '.join(FORMATS)}")
