"""Word / character error rates with Whisper-style text normalisation."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

# Scripts written without spaces: scored by characters (CER) rather than words.
CER_LANGUAGES = frozenset({"zh", "ja", "ko", "th", "lo", "my", "yue"})


@lru_cache(maxsize=1)
def _english():
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()


@lru_cache(maxsize=1)
def _basic():
    from whisper_normalizer.basic import BasicTextNormalizer

    return BasicTextNormalizer()


def normalize_text(text: str, language: str | None) -> str:
    """Whisper's English normaliser for English, its basic normaliser otherwise."""
    if language == "en":
        return _english()(text)
    return _basic()(text)


def _units(text: str, language: str | None) -> str:
    norm = normalize_text(text, language)
    if language in CER_LANGUAGES:
        return " ".join(ch for ch in norm if not ch.isspace())
    return norm


@dataclass
class ErrorRate:
    """Edit-distance totals over a set of utterances.

    Attributes:
        language: the language, or "all".
        metric: "wer" or "cer".
        errors: substitutions + deletions + insertions.
        reference_units: words (or characters) in the references.
        utterances: how many utterances were scored.
    """

    language: str
    metric: str
    errors: int
    reference_units: int
    utterances: int

    @property
    def rate(self) -> float:
        return self.errors / self.reference_units if self.reference_units else 0.0


def error_rates(rows: Iterable[tuple[str, str, str | None]]) -> dict[str, ErrorRate]:
    """Corpus error rate per language from ``(reference, hypothesis, language)`` rows.

    Returns:
        language -> ErrorRate (CER for unspaced scripts, WER otherwise).
    """
    import jiwer

    totals: dict[str, list[int]] = {}
    for ref, hyp, lang in rows:
        lang = lang or "unknown"
        r, h = _units(ref, lang), _units(hyp, lang)
        ref_n = len(r.split())
        if ref_n == 0:
            errors = len(h.split())
        else:
            out = jiwer.process_words(r, h if h.strip() else "")
            errors = out.substitutions + out.deletions + out.insertions
        t = totals.setdefault(lang, [0, 0, 0])
        t[0] += errors
        t[1] += ref_n
        t[2] += 1
    return {
        lang: ErrorRate(lang, "cer" if lang in CER_LANGUAGES else "wer", e, n, u)
        for lang, (e, n, u) in sorted(totals.items())
    }
