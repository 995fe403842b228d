"""The Qwen2-Audio prompt (as transformers' processor builds it), audio splicing,
language resolution and output parsing."""

from __future__ import annotations

import shutil

import pytest
import torch

from tests.models.speech_llm import _reference as ref


def _processor_ids(proc, text: str, clip) -> list[int]:
    return proc(text=text, audio=clip, sampling_rate=16000, return_tensors="pt")["input_ids"][0].tolist()


def _n_audio(hf_batch1) -> int:
    mel = int(hf_batch1["feature_attention_mask"].sum())
    return ((mel - 1) // 2 + 1 - 2) // 2 + 1


def test_chat_prompt_equals_the_processor(loaded, proc, clips, hf_batch1):
    n = _n_audio(hf_batch1)
    ids = loaded.model.prompt_ids(n)
    assert ids == hf_batch1["input_ids"][0].tolist()
    assert ids.count(loaded.model.config.audio_token_id) == n


@pytest.mark.parametrize(("language", "code"), [("English", "en"), ("zh", "zh"), ("CANTONESE", "yue")])
def test_forced_language_is_named_in_the_prompt(loaded, proc, clips, hf_batch1, language, code):
    want = _processor_ids(proc, ref.chat_prompt(proc, language_code=code), clips[0])
    assert loaded.model.prompt_ids(_n_audio(hf_batch1), language=language) == want


def test_context_is_the_system_turn(loaded, proc, clips, hf_batch1):
    context = "Names: Dashwood, Americans."
    want = _processor_ids(proc, ref.chat_prompt(proc, system=context), clips[0])
    assert loaded.model.prompt_ids(_n_audio(hf_batch1), context=context) == want


@pytest.fixture(scope="module")
def base_model(hf_dir, tmp_path_factory):
    """The same checkpoint without a chat template: the pretrained (base) prompt."""
    import oasr

    path = tmp_path_factory.mktemp("base") / "model"
    shutil.copytree(hf_dir, path)
    (path / "chat_template.jinja").unlink()
    return oasr.load_pretrained(path).model


@pytest.mark.parametrize("code", [None, "fr"])
def test_base_prompt_equals_the_processor(base_model, proc, clips, hf_batch1, code):
    assert base_model.config.prompt_style == "base"
    language = None if code is None else code.upper()
    want = _processor_ids(proc, ref.base_prompt(code), clips[0])
    assert base_model.prompt_ids(_n_audio(hf_batch1), language=language) == want


def test_refusals(loaded, base_model):
    with pytest.raises(ValueError, match="system turn"):
        base_model.prompt_ids(10, context="biasing text")
    with pytest.raises(ValueError, match="task='transcribe' only"):
        loaded.model.prompt_ids(10, task="translate")
    with pytest.raises(ValueError, match="Klingon"):
        loaded.model.prompt_ids(10, language="Klingon")


@pytest.mark.parametrize(
    ("given", "code"),
    [
        ("en", "en"),
        ("EN", "en"),
        ("eng", "en"),
        ("english", "en"),
        ("eNgLiSh", "en"),
        ("en-US", "en"),
        ("zh", "zh"),
        ("Chinese", "zh"),
        ("zh_TW", "zh"),
        ("yue", "yue"),
        ("ja", "ja"),
        ("German", "de"),
        ("ger", "de"),
        (None, None),
        ("", None),
        ("auto", None),
        ("AUTO", None),
        ("none", None),
    ],
)
def test_resolve_language(loaded, given, code):
    assert loaded.model.resolve_language(given) == code


@pytest.mark.parametrize("bad", ["xx", "Klingon", "ko", "Korean", "english-us"])
def test_unknown_language_raises_naming_the_supported_ones(loaded, bad):
    with pytest.raises(ValueError, match=r"Qwen2-Audio.* has: en \(English\), zh \(Chinese\)"):
        loaded.model.resolve_language(bad)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("<|en|>And so my fellow Americans.", ("en", "And so my fellow Americans.")),
        (" <|zh|> 欢迎大家", ("zh", "欢迎大家")),
        ("And so my fellow Americans.", (None, "And so my fellow Americans.")),
        ("<|xx|>kept as text", (None, "<|xx|>kept as text")),
        ("", (None, "")),
    ],
)
def test_parse_output(loaded, text, parsed):
    assert loaded.model.parse_output(text) == parsed


def test_embed_prompt_overwrites_each_rows_span_with_its_own_states(loaded):
    model = loaded.model
    d = model.config.text.hidden_size
    audio = model.config.audio_token_id
    ids = torch.tensor([[0, 0, 7, audio, audio, 9], [7, audio, audio, audio, 9, 9]])
    valid = torch.tensor([[False, False, True, True, True, True], [True] * 6])
    states = torch.arange(2 * 3 * d, dtype=torch.float32).view(2, 3, d)
    n_audio = torch.tensor([2, 3])
    with torch.no_grad():
        x = model.embed_prompt(ids, valid, states, n_audio)
        emb = model.decoder.embed(ids)
    assert torch.equal(x[0, 3:5], states[0, :2]) and torch.equal(x[1, 1:4], states[1])
    text = ~((ids == audio) & valid)
    assert torch.equal(x[text], emb[text])
    with pytest.raises(ValueError, match="placeholders per row"):
        model.embed_prompt(ids, valid, states, torch.tensor([3, 3]))
