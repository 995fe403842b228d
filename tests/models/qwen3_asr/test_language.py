"""Language forcing, the chat prompt and output parsing."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from oasr.tokenizers import HFTokenizer
from tests.models.tiny_configs import TINY_CONFIGS


@pytest.fixture(scope="module")
def model(reference):
    """A model on the reference checkpoint's tokenizer (no weights needed)."""
    from oasr.models.qwen3_asr.config import Qwen3AsrConfig
    from oasr.models.qwen3_asr.model import Qwen3AsrModel

    tok = reference.tokenizer
    cfg = TINY_CONFIGS["qwen3_asr"]()
    ids = {
        "audio_token_id": tok.token_to_id("<|audio_pad|>"),
        "audio_start_token_id": tok.token_to_id("<|audio_start|>"),
        "audio_end_token_id": tok.token_to_id("<|audio_end|>"),
        "im_start_token_id": tok.token_to_id("<|im_start|>"),
        "im_end_token_id": tok.token_to_id("<|im_end|>"),
        "asr_text_token_id": tok.token_to_id("<asr_text>"),
        "eos_token_ids": (tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")),
    }
    text = dataclasses.replace(cfg.text, vocab_size=tok.get_vocab_size())
    m = Qwen3AsrModel(Qwen3AsrConfig(audio=cfg.audio, text=text, **ids))
    m.attach_tokenizer(HFTokenizer.from_file(reference.path / "tokenizer.json"))
    return m


def _rendered(model, language) -> str:
    """The prompt as the template writes it (its control and plain-text parts joined)."""
    from oasr.tokenizers.base import Control

    return "".join(p.text if isinstance(p, Control) else p for p in model.prompt_parts(1, language=language))


@pytest.mark.parametrize(
    ("given", "code"),
    [
        ("en", "en"),
        ("EN", "en"),
        ("eng", "en"),
        ("English", "en"),
        ("  eNgLiSh ", "en"),
        ("en-US", "en"),
        ("zh", "zh"),
        ("zh_CN", "zh"),
        ("Yue", "yue"),
        ("cantonese", "yue"),
        ("fil", "fil"),
        ("Filipino", "fil"),
        ("DE", "de"),
        ("deu", "de"),
        ("de-AT", "de"),
        ("pt_BR", "pt"),
    ],
)
def test_codes_names_and_locales_resolve_to_the_code_of_the_references_name(model, given, code):
    """The code names the language transformers' processor forces (``language {Name}<asr_text>``)."""
    from transformers.audio_utils import resolve_language
    from transformers.models.qwen3_asr.processing_qwen3_asr import LANGUAGE_CODE_TO_NAME

    assert model.resolve_language(given) == code
    name = resolve_language(code, LANGUAGE_CODE_TO_NAME, return_code=False)
    assert _rendered(model, given).endswith(f"<|im_start|>assistant\nlanguage {name}<asr_text>")


@pytest.mark.parametrize("given", [None, "", "  ", "auto", "AUTO", "none", "None"])
def test_detect(model, given):
    assert model.resolve_language(given) is None
    assert _rendered(model, given).endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("given", ["klingon", "xx", "cy", "Welsh", "english-us"])
def test_unknown_language_raises(model, given):
    """transformers' processor refuses these too; the qwenasr.cpp port would detect instead."""
    with pytest.raises(ValueError, match=r"Qwen3-ASR.* has: ar \(Arabic\), yue \(Cantonese\).*en \(English\)"):
        model.resolve_language(given)
    with pytest.raises(ValueError, match="Qwen3-ASR"):
        model.prompt_ids(3, language=given)


def test_the_table_is_the_checkpoints(original_dir):
    from oasr.models import load_pretrained

    m = load_pretrained(original_dir).model  # support_languages: Chinese, English, German
    assert m.languages == ("zh", "en", "de")
    assert m.resolve_language("de") == "de" and m.resolve_language("chinese") == "zh"
    with pytest.raises(ValueError, match="it has: zh \\(Chinese\\), en \\(English\\), de \\(German\\)"):
        m.resolve_language("fr")


def _literal(context: str, n_audio: int, tail: str) -> str:
    return (
        f"<|im_start|>system\n{context}<|im_end|>\n"
        f"<|im_start|>user\n<|audio_start|>{'<|audio_pad|>' * n_audio}<|audio_end|><|im_end|>\n"
        f"<|im_start|>assistant\n{tail}"
    )


@pytest.mark.parametrize(
    ("language", "context", "tail", "system"),
    [
        (None, None, "", ""),
        ("auto", "", "", ""),
        ("en", "Dashwood, Norland", "language English<asr_text>", "Dashwood, Norland"),
        ("german", "欢迎 体验", "language German<asr_text>", "欢迎 体验"),
    ],
)
def test_prompt_layout(model, reference, language, context, tail, system):
    ids = model.prompt_ids(5, language=language, context=context)
    expected = reference.tokenizer.encode(_literal(system, 5, tail), add_special_tokens=False).ids
    assert ids == expected
    assert ids.count(model.config.audio_token_id) == 5
    assert model.tokenizer.decode(ids) == _literal(system, 5, tail)
    if tail:
        assert ids[-1] == model.config.asr_text_token_id
    else:
        end = reference.tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False).ids
        assert ids[-len(end) :] == end


def test_prompt_refusals(model):
    with pytest.raises(ValueError, match="transcribe"):
        model.prompt_ids(3, task="translate")
    with pytest.raises(ValueError, match="n_audio"):
        model.prompt_ids(0)


def test_embed_prompt_splices_each_rows_states(model):
    a, b = model.prompt_ids(2, language="en"), model.prompt_ids(3)
    t = max(len(a), len(b))
    ids = torch.full((2, t), model.config.im_end_token_id)
    valid = torch.zeros(2, t, dtype=torch.bool)
    for i, row in enumerate((a, b)):
        ids[i, t - len(row) :] = torch.tensor(row)
        valid[i, t - len(row) :] = True
    states = torch.randn(2, 3, model.config.text.hidden_size)
    x = model.embed_prompt(ids, valid, states, torch.tensor([2, 3]))
    for i, n in enumerate((2, 3)):
        at = (ids[i] == model.config.audio_token_id).nonzero().squeeze(-1)
        assert torch.equal(x[i, at], states[i, :n])
        other = ~torch.isin(torch.arange(t), at)
        assert torch.equal(x[i, other], model.decoder.embed(ids[i : i + 1])[0, other])
    with pytest.raises(ValueError, match="placeholders"):
        model.embed_prompt(ids, valid, states, torch.tensor([3, 3]))


@pytest.mark.parametrize(
    ("text", "language", "transcript"),
    [
        ("language English<asr_text>and so my fellow americans", "en", "and so my fellow americans"),
        ("language english<asr_text> ask not ", "en", "ask not"),
        ("language None<asr_text>", None, ""),
        ("language None<asr_text>noise", None, ""),
        ("language Chinese<asr_text>欢迎大家", "zh", "欢迎大家"),
        ("language German<asr_text>eins<asr_text>zwei", "de", "zwei"),
        ("language Klingon<asr_text>qapla", "Klingon", "qapla"),
        ("<asr_text>hello", None, "hello"),
        # A forced-language prompt already ends with the marker: the text is the transcript.
        ("and so my fellow americans", None, "and so my fellow americans"),
        ("Language models are fun", None, "Language models are fun"),
        # A preamble cut short by the token budget never becomes the transcript.
        ("language", None, ""),
        ("language Eng", None, ""),
        ("language English", "en", ""),
        ("language None", None, ""),
    ],
)
def test_parse_output(model, text, language, transcript):
    assert model.parse_output(text) == (language, transcript)


def test_the_preamble_never_leaks(model, reference):
    """Whatever the model writes before the last marker stays out of the transcript."""
    tok = HFTokenizer.from_file(reference.path / "tokenizer.json")
    for pre in ("language English", "language German\n", "English", "language English<asr_text>x"):
        ids = tok.encode_text(f"{pre}<asr_text>the quick brown fox")
        text = tok.decode(ids)
        _, transcript = model.parse_output(text)
        assert transcript == "the quick brown fox"


def test_stop_ids(model, reference):
    assert set(model.stop_ids) == {reference.token_id("<|endoftext|>"), reference.token_id("<|im_end|>")}
