"""Voxtral Realtime through ``oasr.ASREngine`` (the ``llm`` strategy, its rows' audio vectors in
their decoder state): a batch of clips equals transformers' ``generate`` clip by clip, the
budget and the finish reasons, what the prompt refuses, and int8."""

from __future__ import annotations

import pytest
import torch

import oasr
from oasr.models.loaders import load_pretrained


@pytest.fixture(scope="module")
def engine(tiny_voxtral_realtime):
    return oasr.ASREngine(load_pretrained(str(tiny_voxtral_realtime.path), dtype=torch.float64))


def _reference(fx, wave, **kwargs) -> tuple[list[int], str]:
    inputs = fx.processor(wave, return_tensors="pt")
    out = fx.model.generate(
        input_ids=inputs["input_ids"],
        input_features=inputs["input_features"].double(),
        num_delay_tokens=inputs["num_delay_tokens"],
        **kwargs,
    )
    ids = [t for t in out[0, inputs["input_ids"].shape[1] :].tolist() if t != 2]
    return ids, fx.processor.batch_decode(out, skip_special_tokens=True)[0]


def test_batch_equals_generate(engine, tiny_voxtral_realtime):
    fx = tiny_voxtral_realtime
    outputs = engine.transcribe(list(fx.clips))
    for wave, out in zip(fx.clips, outputs):
        ids, text = _reference(fx, wave)
        assert out.segments[0].tokens == ids
        assert out.text == text.strip()
        assert out.finish_reason == "stop"  # the audio's end, as generate's max_length
        assert out.language is None


def test_text_streams_as_it_is_decoded(engine, tiny_voxtral_realtime):
    deltas: list[str] = []
    out = engine.transcribe(tiny_voxtral_realtime.clips[0], on_token=deltas.append)
    assert len(deltas) > 1 and "".join(deltas) == out.text  # no language preamble holds it back


def test_token_budget_cuts_with_length(engine, tiny_voxtral_realtime):
    fx = tiny_voxtral_realtime
    out = engine.transcribe(fx.clips[0], max_new_tokens=5)
    assert out.segments[0].tokens == _reference(fx, fx.clips[0], max_new_tokens=5)[0]
    assert out.finish_reason == "length"


@pytest.mark.parametrize(
    ("options", "match"),
    [({"language": "en"}, "no language control"), ({"context": "[INST] hi"}, "no text turn")],
)
def test_prompt_refuses_what_it_cannot_express(engine, tiny_voxtral_realtime, options, match):
    with pytest.raises(ValueError, match=match):
        engine.transcribe(tiny_voxtral_realtime.clips[0], **options)


def test_int8_decodes(tiny_voxtral_realtime):
    engine = oasr.ASREngine(str(tiny_voxtral_realtime.path), quantize="int8")
    out = engine.transcribe(tiny_voxtral_realtime.clips[0])
    assert out.finish_reason == "stop" and out.segments[0].tokens
