"""Languages: one table of ISO codes and English names, and the one resolver every family and
surface uses to read a request's ``language``.

``LANGUAGES`` is Whisper's table (ISO-639 code -> lower-case English name, in the order of
Whisper's language tokens, which its tokenizer relies on); ``NAMES`` adds the codes other
families use that Whisper lacks. Families take their supported subsets from here
(``names_of``), so a name is spelled one way everywhere.

``resolve_language(language, available)`` maps what a user typed to one of the languages a
model has (``BaseAsrModel.languages``: ISO codes, or locales such as ``de-DE`` where the model
tells locales apart):

* ``None``, ``""``, ``"auto"``, ``"none"`` (any case): no language (the model detects it, or
  uses its default prompt where it cannot detect);
* an entry of ``available`` as written, in any case (``en-US``, ``de``);
* an ISO 639-1 code (``de``), an ISO 639-2/3 code (``deu``, ``ger``), a legacy code (``iw``,
  ``jv``), or an English name in any case (``German``, ``mandarin``);
* a locale, ``-`` or ``_`` separated (``pt-BR``, ``de_DE``, ``zh-Hant-TW``): the model's own
  locale where it has that one, else its base language (the bare code, else the ``xx-XX``
  spelling, else the one locale of that language it has).

A model's entries may be ISO 639-3 codes, as MMS names its adapters (``eng``, ``fra``), and
MMS's script variants (``cmn-script_simplified``, ``srp-script_latin``: the script as ISO
15924 writes it, ``zh-Hans``, ``sr-Latn``); ``en``, ``English``, ``eng`` and ``en-US`` all
name ``eng``.

Anything else, or a language the model does not have, raises ``LanguageError`` (a
``ValueError``: HTTP 400 ``invalid_language``, CLI exit 2) naming the model's languages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

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

# Other English names of the same languages (Whisper's aliases, and common ones).
_NAME_ALIASES: dict[str, str] = {
    "burmese": "my",
    "valencian": "ca",
    "flemish": "nl",
    "haitian": "ht",
    "letzeburgesch": "lb",
    "pushto": "ps",
    "panjabi": "pa",
    "moldavian": "ro",
    "moldovan": "ro",
    "sinhalese": "si",
    "castilian": "es",
    "mandarin": "zh",
    "farsi": "fa",
}
_CODE_OF_NAME = {**{name: code for code, name in NAMES.items()}, **_NAME_ALIASES}

# ISO 639-2 (T and B) / 639-3 codes of the languages of ``NAMES`` that have a 639-1 code, as
# "639-1 = others" pairs (Whisper spells Javanese ``jw``).
_THREE_LETTER = """
af=afr am=amh ar=ara as=asm az=aze ba=bak be=bel bg=bul bn=ben bo=bod,tib br=bre bs=bos ca=cat
cs=ces,cze cy=cym,wel da=dan de=deu,ger el=ell,gre en=eng es=spa et=est eu=eus,baq fa=fas,per,pes
fi=fin fo=fao fr=fra,fre gl=glg gu=guj ha=hau he=heb hi=hin hr=hrv ht=hat hu=hun hy=hye,arm id=ind
is=isl,ice it=ita ja=jpn jw=jav ka=kat,geo kk=kaz km=khm kn=kan ko=kor la=lat lb=ltz ln=lin lo=lao
lt=lit lv=lav mg=mlg mi=mri,mao mk=mkd,mac ml=mal mn=mon mr=mar ms=msa,may,zsm mt=mlt my=mya,bur
ne=nep nl=nld,dut nn=nno no=nor,nob oc=oci pa=pan pl=pol ps=pus pt=por ro=ron,rum ru=rus sa=san
sd=snd si=sin sk=slk,slo sl=slv sn=sna so=som sq=sqi,alb sr=srp su=sun sv=swe sw=swa,swh ta=tam
te=tel tg=tgk th=tha tk=tuk tl=tgl tr=tur tt=tat uk=ukr ur=urd uz=uzb vi=vie yi=yid yo=yor
zh=zho,chi,cmn
"""
# -> the code ``NAMES`` uses; also legacy / alternative two-letter spellings.
_CODE_ALIASES: dict[str, str] = {
    **{
        other: two for pair in _THREE_LETTER.split() for two, others in [pair.split("=")] for other in others.split(",")
    },
    "jv": "jw",
    "iw": "he",
    "in": "id",
    "ji": "yi",
    "nb": "no",
}

# Languages written without spaces between words.
UNSPACED_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})

# "No language": the model detects it (or uses its default prompt where it cannot detect).
DETECT = frozenset({"", "auto", "none"})

# A code, or a locale: code, optional script, optional region, "-" or "_" separated.
_LOCALE = re.compile(r"([A-Za-z]{2,3})(?:[-_]([A-Za-z]{4}))?(?:[-_]([A-Za-z]{2}|[0-9]{3}))?")
# MMS's spelling of a script variant: ``cmn-script_simplified``, ``srp-script_latin``.
_MMS_SCRIPT = re.compile(r"([A-Za-z]{3})-script_([A-Za-z]+)")
# MMS's script names -> ISO 15924 (others are kept as written, title-cased).
_SCRIPT_CODES: dict[str, str] = {
    "simplified": "Hans",
    "traditional": "Hant",
    "latin": "Latn",
    "cyrillic": "Cyrl",
    "arabic": "Arab",
    "devanagari": "Deva",
    "ethiopic": "Ethi",
    "gurmukhi": "Guru",
    "bengali": "Beng",
    "tibetan": "Tibt",
    "hebrew": "Hebr",
    "greek": "Grek",
    "syriac": "Syrc",
    "tifinagh": "Tfng",
    "mongolian": "Mong",
}


class LanguageError(ValueError):
    """A ``language`` the model does not have (or no language at all).

    Attributes:
        language: what was asked for.
        available: the model's languages (empty: it names none).
    """

    def __init__(self, message: str, language: object, available: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.language = language
        self.available = tuple(available)


def _canonical(code: str) -> str:
    code = code.lower()
    return _CODE_ALIASES.get(code, code)


def parse_language(language: str) -> tuple[str, str | None, str | None] | None:
    """(ISO code as ``NAMES`` spells it, script or None, region or None) of a code, an English
    name or a locale, in any case; None when it is none of these.

    Examples: ``"German"`` -> ``("de", None, None)``, ``"deu"`` -> ``("de", None, None)``,
    ``"pt_br"`` -> ``("pt", None, "BR")``, ``"zh-hant-tw"`` -> ``("zh", "Hant", "TW")``,
    ``"cmn-script_simplified"`` (MMS) -> ``("zh", "Hans", None)``.
    """
    key = language.strip()
    name = _CODE_OF_NAME.get(key.lower())
    if name is not None:
        return name, None, None
    if (mms := _MMS_SCRIPT.fullmatch(key)) is not None:
        code, script = mms.groups()
        return _canonical(code), _SCRIPT_CODES.get(script.lower(), script.title()), None
    m = _LOCALE.fullmatch(key)
    if m is None:
        return None
    code, script, region = m.groups()
    return _canonical(code), script.title() if script else None, region.upper() if region else None


def _spell(code: str, script: str | None, region: str | None) -> str:
    return "-".join(x for x in (code, script, region) if x)


def resolve_language(language: object, available: Sequence[str] | None, *, model: str = "this model") -> str | None:
    """The entry of ``available`` that ``language`` names (see the module), or None for none.

    Args:
        language: what the user gave (None, a code, a name or a locale).
        available: the model's languages (``BaseAsrModel.languages``): ISO codes or locales
            (``xx-YY``) as the model spells them; None or empty when it names none, so that
            only "no language" is accepted.
        model: how the message names the model.

    Raises:
        LanguageError: not a string, not a language, or one ``available`` lacks.
    """
    if language is None:
        return None
    if not isinstance(language, str):
        raise LanguageError(f"language must be a string, got {language!r}", language, available or ())
    key = language.strip()
    if key.lower() in DETECT:
        return None
    entries = tuple(available or ())
    for entry in entries:
        if entry.lower() == key.lower():
            return entry
    parsed = parse_language(key)
    if parsed is None:
        raise LanguageError(
            f"language {language!r} is not an ISO 639 code, an English name or a locale; {_has(model, entries, model)}",
            language,
            entries,
        )
    code, script, region = parsed
    # Each entry under its own spelling first, then under its canonical one ("nb" under "no"
    # only where the model has no "no").
    by_spelling = {entry.replace("_", "-").lower(): entry for entry in entries}
    for entry in entries:
        p = parse_language(entry)
        if p is not None:
            by_spelling.setdefault(_spell(*p).lower(), entry)
    # The locale as asked, then without its script, then without its region (``zh-Hant`` for
    # MMS's ``cmn-script_traditional``), then the base language.
    for spelling in dict.fromkeys(
        (_spell(code, script, region), _spell(code, None, region), _spell(code, script, None))
    ):
        if spelling.lower() in by_spelling:
            return by_spelling[spelling.lower()]
    # Entries of the language, less those written in another script than the one asked for.
    base = [
        e
        for e in entries
        if (p := parse_language(e)) is not None and p[0] == code and (script is None or p[1] in (None, script))
    ]
    found = _base_entry(code, base)
    if found is not None:
        return found
    if len(base) > 1:
        raise LanguageError(
            f"language {language!r} is ambiguous for {model}: it has {', '.join(sorted(base))}; name one of them",
            language,
            entries,
        )
    named = NAMES[code].title() if code in NAMES else None
    what = f"{language!r} ({named})" if named and named.lower() != key.lower() else repr(language)
    if not entries:
        raise LanguageError(
            f"language {what}: {model} has no language control and names no language it transcribes; "
            f"leave language unset (or 'auto')",
            language,
            entries,
        )
    raise LanguageError(
        f"language {what} is not a language of {model}; {_has(model, entries, 'it')}", language, entries
    )


def _base_entry(code: str, base: list[str]) -> str | None:
    """The entry of a base language among its entries: the bare code, else the one other bare
    spelling, else the ``xx-XX`` locale (NeMo's name of the language as such), else its only locale."""
    bare = [e for e in base if "-" not in e and "_" not in e]
    if code in bare:
        return code
    if len(bare) == 1:
        return bare[0]
    same = [e for e in base if e.replace("_", "-").lower() == f"{code}-{code}"]
    if len(same) == 1:
        return same[0]
    return base[0] if len(base) == 1 else None


def _has(model: str, entries: Sequence[str], subject: str) -> str:
    """``"<subject> has: de (German), en (English); or leave language unset (or 'auto')"``."""
    if not entries:
        return f"{model} names no language; leave language unset (or 'auto')"
    listed = ", ".join(entries) if len(entries) > 40 else describe_languages(entries)  # a long table: codes only
    return f"{subject} has: {listed}; or leave language unset (or 'auto')"


def _title(entry: str) -> str | None:
    p = parse_language(entry)
    return NAMES[p[0]].title() if p is not None and p[0] in NAMES else None


def describe_languages(entries: Sequence[str] | None) -> str:
    """The model's languages as an error message lists them (``"de (German), en (English)"``)."""
    return ", ".join(f"{e} ({n})" if (n := _title(e)) else e for e in entries or ())


def code_of(language: str) -> str:
    """The ISO code of a code, an English name or a locale (any case); unknown input is returned
    lower-cased."""
    parsed = parse_language(language)
    return parsed[0] if parsed is not None else language.strip().lower()


def normalize_language(language: str | None) -> str | None:
    """An ISO code from a code, an English name or a locale (any case); None / "" / "auto" /
    "none" give None.

    Raises:
        LanguageError: not a language of ``NAMES``.
    """
    return resolve_language(language, tuple(NAMES), model="oasr's language table")


def language_name(language: str | None) -> str | None:
    """The lower-case English name of an ISO code or locale (``"en"``, ``"en-US"`` -> ``"english"``),
    as OpenAI reports languages; unknown codes are returned unchanged."""
    if language is None:
        return None
    parsed = parse_language(language)
    return NAMES[parsed[0]] if parsed is not None and parsed[0] in NAMES else language


def names_of(codes: Iterable[str]) -> dict[str, str]:
    """A family's subset: code -> capitalised English name (``"yue"`` -> ``"Cantonese"``)."""
    return {code: NAMES[code].title() for code in codes}


__all__ = [
    "DETECT",
    "EXTRA_LANGUAGES",
    "LANGUAGES",
    "NAMES",
    "UNSPACED_LANGUAGES",
    "LanguageError",
    "code_of",
    "describe_languages",
    "language_name",
    "names_of",
    "normalize_language",
    "parse_language",
    "resolve_language",
]


# Scripts written without spaces between words: each character is a word.
_NO_SPACE_RANGES = (
    (0x3000, 0x303F),  # CJK symbols and punctuation
    (0x3040, 0x30FF),  # hiragana, katakana
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF00, 0xFFEF),  # half- and full-width forms
    (0x20000, 0x2FA1F),  # CJK extensions B.. and compatibility supplement
)


def is_no_space_char(ch: str) -> bool:
    """Whether ``ch`` belongs to a script written without spaces (CJK)."""
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _NO_SPACE_RANGES)
