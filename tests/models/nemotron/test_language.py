"""The prompt of a request: ``language`` against the checkpoint's own prompt table."""

from __future__ import annotations

import pytest
import torch

from oasr.models.nemotron.model import resolve_prompt_id
from tests.models.nemotron.conftest import DEFAULT_PROMPT, PROMPTS


@pytest.mark.parametrize(
    "language, prompt",
    [
        (None, DEFAULT_PROMPT),  # no language: the model's own language ID
        ("auto", DEFAULT_PROMPT),
        ("none", DEFAULT_PROMPT),
        ("", DEFAULT_PROMPT),
        ("en", 0),  # listed
        ("English", 0),  # a name
        ("eng", 0),  # ISO 639-3
        ("en-GB", 1),  # a listed locale
        ("en_gb", 1),  # in any case, "_" separated
        ("en-AU", 0),  # a locale the table lacks: its base language
        ("de_DE", 2),
        ("german", 2),
        ("zh", 3),  # not listed: its xx-XX spelling (zh-ZH), though zh-CN / zh-TW disagree
        ("Chinese", 3),
        ("zh-Hant-TW", 4),  # script dropped, the region kept
        ("vi", 5),  # not listed, no xx-XX: its only locale
        ("Vietnamese", 5),
        ("DE", 2),  # codes are case-insensitive
        ("pt", 7),  # pt-BR and pt-PT disagree, but pt-PT is the xx-XX spelling
        ("pt_br", 6),
    ],
)
def test_language_resolves_against_the_table(language, prompt):
    assert resolve_prompt_id(PROMPTS, language, DEFAULT_PROMPT) == prompt


def test_ambiguous_and_unknown_languages_are_refused():
    with pytest.raises(ValueError, match=r"'es' is ambiguous.*es-MX.*es-US"):
        resolve_prompt_id({**PROMPTS, "es-US": 6, "es-MX": 8}, "es", DEFAULT_PROMPT)
    with pytest.raises(ValueError, match=r"'xx' is not a language of this checkpoint; it has: en-US \(English\)"):
        resolve_prompt_id(PROMPTS, "xx", DEFAULT_PROMPT)
    with pytest.raises(ValueError, match=r"'fr-FR' \(French\) is not a language of this checkpoint; .*pt-PT"):
        resolve_prompt_id(PROMPTS, "fr-FR", DEFAULT_PROMPT)
    with pytest.raises(ValueError, match="this checkpoint has no language control"):
        resolve_prompt_id({}, "en", DEFAULT_PROMPT)


def test_model_prompt_ids_per_row(nemotron_reference):
    import oasr

    model = oasr.load_pretrained(nemotron_reference.path).model
    assert model.prompt_ids(["en", None, "vi"], 3).tolist() == [0, DEFAULT_PROMPT, 5]
    assert model.prompt_ids(None, 2).tolist() == [DEFAULT_PROMPT] * 2
    with pytest.raises(ValueError, match="2 languages for 3 rows"):
        model.prompt_ids(["en", "de"], 3)
    feats, lens = torch.zeros(1, 40, 80), torch.tensor([40])
    with pytest.raises(ValueError, match="outside the 10 prompts"):
        model.encode_offline(feats, lens, torch.tensor([10]))
    with pytest.raises(ValueError, match="2 entries for a batch of 1"):
        model.encode_offline(feats, lens, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"features must be \(B, T, 80\).*\(1, 40, 64\)"):
        model.encode_offline(torch.zeros(1, 40, 64), lens)
