"""The field's diarization metrics: DER and JER (``pyannote.metrics``), cpWER (``meeteval``).

* DER, diarization error rate: (missed speech + false alarm + speaker confusion) / reference
  speech, in seconds, after the best one-to-one mapping of hypothesis to reference speakers,
  summed over the files before dividing (pyannote's ``DiarizationErrorRate``).
* JER, Jaccard error rate (DIHARD II): per reference speaker, 1 - the Jaccard index of their
  speech with their mapped hypothesis speaker's; averaged over the reference speakers of every
  file (pyannote's ``JaccardErrorRate``).
* cpWER, concatenated minimum-permutation word error rate (CHiME-6): each speaker's words
  concatenated in time order, hypothesis speakers mapped to reference speakers to minimise the
  errors, unmatched speakers' words counted as insertions / deletions; errors / reference words
  summed over the files (meeteval's ``cp_word_error_rate``). Both sides pass through Whisper's
  normaliser first (``oasr.metrics.normalize_text``), as ``oasr eval`` scores WER.

``collar`` is pyannote's: the total width, in seconds, of the band around each reference turn
boundary left out of the scoring (0.5 = +-0.25 s, NIST's forgiving collar); ``skip_overlap``
leaves out the regions where the reference has two or more speakers. The defaults (collar 0,
overlap scored) are the "full" scoring of DIHARD and pyannote's published figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oasr.diarization.types import Diarization, SpeakerTurn

_PACKAGES = "pip install pyannote.metrics meeteval"


def _require(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"diarization scoring needs pyannote.metrics and meeteval: {_PACKAGES}") from e


def read_rttm(path: str | Path) -> dict[str, Diarization]:
    """The ``SPEAKER`` lines of an RTTM file, one ``Diarization`` per file id (in order of first
    appearance; its duration is its last turn's end, as RTTM does not say the recording's).

    Raises:
        ValueError: a ``SPEAKER`` line with fewer than 8 fields or times that are not numbers.
        OSError: the file cannot be read.
    """
    turns: dict[str, list[SpeakerTurn]] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0] != "SPEAKER":
            continue
        if len(fields) < 8:
            raise ValueError(f"{path}:{number}: an RTTM SPEAKER line has at least 8 fields, got {len(fields)}")
        try:
            start, duration = float(fields[3]), float(fields[4])
            turn = SpeakerTurn(start, round(start + duration, 6), fields[7])  # no binary noise on the sum
        except ValueError as e:
            raise ValueError(f"{path}:{number}: {e}") from None
        turns.setdefault(fields[1], []).append(turn)
    return {uri: Diarization(ts, max(t.end for t in ts)) for uri, ts in turns.items()}


def to_annotation(diarization: Diarization, uri: str = "audio"):
    """``diarization`` as a ``pyannote.core.Annotation`` (one track per turn)."""
    core = _require("pyannote.core")
    annotation = core.Annotation(uri=uri)
    for k, turn in enumerate(diarization.turns):
        annotation[core.Segment(turn.start, turn.end), k] = turn.speaker
    return annotation


def _rounded(score: Any) -> dict[str, Any]:
    """A score's fields, floats to 6 decimals (for JSON reports)."""
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in score.__dict__.items()}


@dataclass(frozen=True)
class DiarizationScore:
    """DER and JER over a set of files, and DER's parts in seconds.

    Attributes:
        der: (missed + false_alarm + confusion) / total.
        jer: pyannote's Jaccard error rate over every reference speaker.
        missed, false_alarm, confusion: seconds of each error.
        total: seconds of reference speech scored (an overlap of two speakers counts twice).
        files: how many files were scored.
        collar, skip_overlap: the scoring settings.
    """

    der: float
    jer: float
    missed: float
    false_alarm: float
    confusion: float
    total: float
    files: int
    collar: float
    skip_overlap: bool

    def to_dict(self) -> dict[str, Any]:
        return _rounded(self)


def score_diarization(
    pairs: Iterable[tuple[Diarization, Diarization]],
    *,
    collar: float = 0.0,
    skip_overlap: bool = False,
) -> DiarizationScore:
    """DER and JER of hypotheses against references.

    Args:
        pairs: ``(reference, hypothesis)`` per file; each file is scored over
            ``[0, reference.duration]`` (the UEM), labels matched by the optimal mapping.
        collar: pyannote's collar (total width in seconds, see the module doc).
        skip_overlap: leave the reference's overlapped speech out.

    Raises:
        ValueError: no pairs, or a negative collar.
    """
    if collar < 0:
        raise ValueError(f"collar must be >= 0, got {collar}")
    diarization = _require("pyannote.metrics.diarization")
    core = _require("pyannote.core")
    der = diarization.DiarizationErrorRate(collar=collar, skip_overlap=skip_overlap)
    jer = diarization.JaccardErrorRate(collar=collar, skip_overlap=skip_overlap)
    files = 0
    for reference, hypothesis in pairs:
        uri = f"file{files}"
        ref, hyp = to_annotation(reference, uri), to_annotation(hypothesis, uri)
        uem = core.Timeline([core.Segment(0.0, reference.duration)], uri=uri)
        der(ref, hyp, uem=uem)
        jer(ref, hyp, uem=uem)
        files += 1
    if not files:
        raise ValueError("nothing to score: no (reference, hypothesis) pairs")
    parts = {name: float(der[name]) for name in ("missed detection", "false alarm", "confusion", "total")}
    return DiarizationScore(
        der=float(abs(der)),
        jer=float(abs(jer)),
        missed=parts["missed detection"],
        false_alarm=parts["false alarm"],
        confusion=parts["confusion"],
        total=parts["total"],
        files=files,
        collar=collar,
        skip_overlap=skip_overlap,
    )


@dataclass(frozen=True)
class CpWerScore:
    """cpWER over a set of files.

    Attributes:
        rate: errors / reference_words.
        errors: insertions + deletions + substitutions.
        reference_words: words of every reference speaker.
        missed_speakers, extra_speakers: reference speakers with no hypothesis speaker, and
            hypothesis speakers with no reference speaker, over all files.
    """

    rate: float
    errors: int
    reference_words: int
    insertions: int
    deletions: int
    substitutions: int
    missed_speakers: int
    extra_speakers: int
    files: int

    def to_dict(self) -> dict[str, Any]:
        return _rounded(self)


def speaker_texts(segments: Iterable[Any]) -> dict[str, str]:
    """Each speaker's text from transcription-with-speakers segments (objects or dicts with
    ``speaker``, ``start`` and ``text``), joined in time order; segments without a speaker are
    left out."""

    def get(seg: Any, key: str) -> Any:
        return seg.get(key) if isinstance(seg, Mapping) else getattr(seg, key, None)

    texts: dict[str, list[str]] = {}
    for seg in sorted(segments, key=lambda s: get(s, "start") or 0.0):
        speaker, text = get(seg, "speaker"), (get(seg, "text") or "").strip()
        if speaker is not None and text:
            texts.setdefault(str(speaker), []).append(text)
    return {s: " ".join(t) for s, t in texts.items()}


def score_cpwer(
    pairs: Iterable[tuple[Mapping[str, str], Mapping[str, str]]], language: str | None = "en"
) -> CpWerScore:
    """cpWER of per-speaker hypothesis texts against per-speaker references.

    Args:
        pairs: ``(reference, hypothesis)`` per file, each ``{speaker: text}``.
        language: the normaliser's language (``oasr.metrics.normalize_text``).

    Raises:
        ValueError: no pairs.
    """
    from oasr.metrics import normalize_text

    cp = _require("meeteval.wer")

    def norm(texts: Mapping[str, str]) -> dict[str, str]:
        return {s: normalize_text(t, language) for s, t in texts.items()}

    # the texts are each speaker's words in order already: no timestamps to sort by
    results = [
        cp.cp_word_error_rate(norm(ref), norm(hyp), reference_sort=False, hypothesis_sort=False) for ref, hyp in pairs
    ]
    if not results:
        raise ValueError("nothing to score: no (reference, hypothesis) pairs")
    total = sum(results[1:], results[0])
    return CpWerScore(
        rate=float(total.errors / total.length) if total.length else 0.0,
        errors=int(total.errors),
        reference_words=int(total.length),
        insertions=int(total.insertions),
        deletions=int(total.deletions),
        substitutions=int(total.substitutions),
        missed_speakers=int(total.missed_speaker),
        extra_speakers=int(total.falarm_speaker),
        files=len(results),
    )
