"""Languages: one table of ISO codes and English names for every family and surface.

``LANGUAGES`` is Whisper's table (ISO-639 code -> lower-case English name, in the order of
Whisper's language tokens, which its tokenizer relies on); ``NAMES`` adds the codes other
families use that Whisper lacks. Families take their supported subsets from here
(``names_of``), so a name is spelled one way everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable

# ISO-639 code -> English name, in the order of Whisper's language tokens.
LANGUAGES: dict[str, str] = {
    "en": "english",
    "zh": "chinese",
    "de": "german",
    "es": "spanish",
    "ru": "russian",
    "ko": "korean",
    "fr": "french",
    "ja": "japanese",
    "pt": "portuguese",
    "tr": "turkish",
    "pl": "polish",
    "ca": "catalan",
    "nl": "dutch",
    "ar": "arabic",
    "sv": "swedish",
    "it": "italian",
    "id": "indonesian",
    "hi": "hindi",
    "fi": "finnish",
    "vi": "vietnamese",
    "he": "hebrew",
    "uk": "ukrainian",
    "el": "greek",
    "ms": "malay",
    "cs": "czech",
    "ro": "romanian",
    "da": "danish",
    "hu": "hungarian",
    "ta": "tamil",
    "no": "norwegian",
    "th": "thai",
    "ur": "urdu",
    "hr": "croatian",
    "bg": "bulgarian",
    "lt": "lithuanian",
    "la": "latin",
    "mi": "maori",
    "ml": "malayalam",
    "cy": "welsh",
    "sk": "slovak",
    "te": "telugu",
    "fa": "persian",
    "lv": "latvian",
    "bn": "bengali",
    "sr": "serbian",
    "az": "azerbaijani",
    "sl": "slovenian",
    "kn": "kannada",
    "et": "estonian",
    "mk": "macedonian",
    "br": "breton",
    "eu": "basque",
    "is": "icelandic",
    "hy": "armenian",
    "ne": "nepali",
    "mn": "mongolian",
    "bs": "bosnian",
    "kk": "kazakh",
    "sq": "albanian",
    "sw": "swahili",
    "gl": "galician",
    "mr": "marathi",
    "pa": "punjabi",
    "si": "sinhala",
    "km": "khmer",
    "sn": "shona",
    "yo": "yoruba",
    "so": "somali",
    "af": "afrikaans",
    "oc": "occitan",
    "ka": "georgian",
    "be": "belarusian",
    "tg": "tajik",
    "sd": "sindhi",
    "gu": "gujarati",
    "am": "amharic",
    "yi": "yiddish",
    "lo": "lao",
    "uz": "uzbek",
    "fo": "faroese",
    "ht": "haitian creole",
    "ps": "pashto",
    "tk": "turkmen",
    "nn": "nynorsk",
    "mt": "maltese",
    "sa": "sanskrit",
    "lb": "luxembourgish",
    "my": "myanmar",
    "bo": "tibetan",
    "tl": "tagalog",
    "mg": "malagasy",
    "as": "assamese",
    "tt": "tatar",
    "haw": "hawaiian",
    "ln": "lingala",
    "ha": "hausa",
    "ba": "bashkir",
    "jw": "javanese",
    "su": "sundanese",
    "yue": "cantonese",
}

# Codes other families support that Whisper's table lacks.
EXTRA_LANGUAGES: dict[str, str] = {"fil": "filipino"}

NAMES: dict[str, str] = {**LANGUAGES, **EXTRA_LANGUAGES}
_CODE_OF_NAME = {name: code for code, name in NAMES.items()}

# Languages written without spaces between words.
UNSPACED_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})


def normalize_language(language: str | None) -> str | None:
    """An ISO code from a code or an English name (any case); None/"" stay None.

    Raises:
        ValueError: an unknown language.
    """
    if language is None or language == "":
        return None
    key = language.strip().lower()
    if key in NAMES:
        return key
    if key in _CODE_OF_NAME:
        return _CODE_OF_NAME[key]
    raise ValueError(f"unknown language {language!r}; expected an ISO code such as 'en' or a name such as 'english'")


def code_of(language: str) -> str:
    """The ISO code of a code or an English name (any case); unknown input is returned lower-cased."""
    key = language.strip().lower()
    return _CODE_OF_NAME.get(key, key)


def language_name(language: str | None) -> str | None:
    """The lower-case English name of an ISO code (``"en"`` -> ``"english"``), as OpenAI reports
    languages; unknown codes are returned unchanged."""
    if language is None:
        return None
    return NAMES.get(language.lower(), language)


def names_of(codes: Iterable[str]) -> dict[str, str]:
    """A family's subset: code -> capitalised English name (``"yue"`` -> ``"Cantonese"``)."""
    return {code: NAMES[code].title() for code in codes}


__all__ = [
    "EXTRA_LANGUAGES",
    "LANGUAGES",
    "NAMES",
    "UNSPACED_LANGUAGES",
    "code_of",
    "language_name",
    "names_of",
    "normalize_language",
]
