"""``oasr.languages``: reading a code, a name or a locale, and resolving it against what a model has."""

from __future__ import annotations

import pytest

from oasr.languages import NAMES, LanguageError, language_name, normalize_language, parse_language, resolve_language

WHISPER = tuple(NAMES)[:99]  # large-v2's language tokens
TABLE = ("en-US", "en", "en-GB", "de-DE", "de", "zh-CN", "zh-ZH", "zh-TW", "vi-VN", "pt-BR", "pt-PT", "nb", "no")


def test_every_english_name_and_alias_whisper_knows_gives_its_code():
    """openai-whisper's ``TO_LANGUAGE_CODE`` (as transformers ships it): names and aliases."""
    whisper = pytest.importorskip("transformers.models.whisper.tokenization_whisper")
    for name, code in whisper.TO_LANGUAGE_CODE.items():
        for spelling in (name, name.upper(), name.title()):
            assert parse_language(spelling) == (code, None, None), spelling


@pytest.mark.parametrize(
    ("given", "code"),
    [
        # ISO 639-2/T, 639-2/B and 639-3 codes (checked against the ISO tables)
        ("deu", "de"),
        ("ger", "de"),
        ("eng", "en"),
        ("fra", "fr"),
        ("fre", "fr"),
        ("zho", "zh"),
        ("chi", "zh"),
        ("cmn", "zh"),  # Mandarin: its macrolanguage's code
        ("jpn", "ja"),
        ("nld", "nl"),
        ("dut", "nl"),
        ("ell", "el"),
        ("fas", "fa"),
        ("per", "fa"),
        ("ces", "cs"),
        ("yue", "yue"),
        ("fil", "fil"),
        ("haw", "haw"),
        # legacy / alternative two-letter codes
        ("iw", "he"),
        ("jv", "jw"),  # Whisper spells Javanese jw
        ("nb", "no"),
        # names in any case, with spaces
        ("  German ", "de"),
        ("HAITIAN CREOLE", "ht"),
        ("Filipino", "fil"),
        ("farsi", "fa"),
    ],
)
def test_codes_and_names(given, code):
    assert parse_language(given) == (code, None, None)
    assert normalize_language(given) == code


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        ("pt-BR", ("pt", None, "BR")),
        ("pt_br", ("pt", None, "BR")),
        ("DE_de", ("de", None, "DE")),
        ("es-419", ("es", None, "419")),
        ("zh-hant-tw", ("zh", "Hant", "TW")),
        ("sr_Latn", ("sr", "Latn", None)),
        ("deu-AT", ("de", None, "AT")),
    ],
)
def test_locales(given, parsed):
    assert parse_language(given) == parsed


@pytest.mark.parametrize("given", ["klingon", "english-us", "e", "en-USA-x", "de DE", "42"])
def test_what_is_not_a_language(given):
    assert parse_language(given) is None
    with pytest.raises(LanguageError, match="is not an ISO 639 code, an English name or a locale"):
        resolve_language(given, WHISPER)


@pytest.mark.parametrize(
    ("given", "want"),
    [
        (None, None),
        ("", None),
        ("  ", None),
        ("auto", None),
        ("AUTO", None),
        ("none", None),
        ("None", None),
        ("en-us", "en-US"),  # an entry as written, in any case
        ("en_US", "en-US"),
        ("English", "en"),
        ("en-AU", "en"),  # a locale the model lacks: its base language
        ("de_AT", "de"),
        ("zh", "zh-ZH"),  # no bare code: the xx-XX spelling
        ("zh-Hant-TW", "zh-TW"),  # the script dropped, the region kept
        ("zh_HK", "zh-ZH"),
        ("vi", "vi-VN"),  # its only locale
        ("pt", "pt-PT"),
        ("nb", "nb"),  # the entry itself before any alias
        ("nob", "no"),  # an alias: the entry spelled as the code
        ("Norwegian", "no"),
    ],
)
def test_resolved_against_a_table_of_locales(given, want):
    assert resolve_language(given, TABLE) == want


def test_resolved_against_codes_only():
    assert resolve_language("pt-BR", WHISPER) == "pt"
    assert resolve_language("zh_TW", WHISPER) == "zh"
    assert resolve_language("Javanese", WHISPER) == "jw"
    with pytest.raises(LanguageError, match=r"'yue' \(Cantonese\) is not a language of Whisper; it has: en, zh, de"):
        resolve_language("yue", WHISPER, model="Whisper")  # large-v3 only


def test_refusals_name_the_models_languages():
    with pytest.raises(LanguageError, match=r"'French' is not a language of M; it has: en-US \(English\), en"):
        resolve_language("French", TABLE, model="M")
    with pytest.raises(LanguageError, match=r"'es' is ambiguous for M: it has es-MX, es-US; name one of them"):
        resolve_language("es", ("es-US", "es-MX"), model="M")
    with pytest.raises(LanguageError, match=r"'de' \(German\): M has no language control") as e:
        resolve_language("de", None, model="M")
    assert isinstance(e.value, ValueError) and e.value.available == ()
    assert resolve_language("auto", None) is None and resolve_language(None, ()) is None
    with pytest.raises(LanguageError, match="language must be a string, got 5"):
        resolve_language(5, TABLE)


@pytest.mark.parametrize(
    ("code", "name"), [("en", "english"), ("en-US", "english"), ("pt_BR", "portuguese"), ("xx", "xx"), (None, None)]
)
def test_language_name_is_openais(code, name):
    assert language_name(code) == name


MMS = ("eng", "fra", "deu", "cmn-script_simplified", "cmn-script_traditional", "srp-script_latin", "abk")


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("en", "eng"),  # ISO 639-1, a name, 639-3 itself and a locale all name MMS's 639-3 entry
        ("English", "eng"),
        ("ENG", "eng"),
        ("fr-FR", "fra"),
        ("fre", "fra"),  # 639-2/B
        ("German", "deu"),
        ("zh-Hans", "cmn-script_simplified"),  # MMS's script variants by their ISO 15924 script
        ("zh-Hant-TW", "cmn-script_traditional"),
        ("cmn-script_simplified", "cmn-script_simplified"),
        ("sr", "srp-script_latin"),  # the language's only variant
        ("sr-Latn", "srp-script_latin"),
        ("abk", "abk"),  # a 639-3 code oasr's table does not name
        ("auto", None),
    ],
)
def test_resolved_against_mms_adapters(given, want):
    assert resolve_language(given, MMS) == want


def test_mms_refusals():
    with pytest.raises(LanguageError, match=r"'zh' is ambiguous for M: it has cmn-script_simplified, cmn-script_tr"):
        resolve_language("zh", MMS, model="M")
    with pytest.raises(LanguageError, match=r"'sr-Cyrl' \(Serbian\) is not a language of M; it has: eng \(English\)"):
        resolve_language("sr-Cyrl", MMS, model="M")  # another script is another orthography
    with pytest.raises(LanguageError, match=r"'es' \(Spanish\) is not a language of M"):
        resolve_language("es", MMS, model="M")
    assert parse_language("cmn-script_simplified") == ("zh", "Hans", None)
    assert language_name("cmn-script_traditional") == "chinese" and language_name("eng") == "english"
