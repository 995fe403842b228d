"""Granite Speech through oasr against transformers ``GraniteSpeechForConditionalGeneration``
(its LoRA adapter loaded, as ``generate`` runs with audio): the front end, every conformer
block, the projector and the LM's logits in float64 (cosine and max-abs), the prompt ids,
and greedy tokens identical to ``generate``. oasr decodes the three clips in one batch; each
row is compared with transformers run on that clip alone (transformers' own padded batch
lets a short row's encoder read the padding)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.models.granite_speech import _reference as ref

MAX_NEW = 12


def _hf_inputs(proc, clip, text=None):
    return proc(text=text or ref.chat_prompt(proc), audio=clip, return_tensors="pt")


@torch.no_grad()
def test_front_end_matches_the_feature_extractor(loaded, proc, clips):
    from oasr.models.granite_speech.features import GraniteSpeechFrontend

    ours = GraniteSpeechFrontend(dtype=torch.float64)
    for i, clip in enumerate(clips):
        want = proc.audio_processor(torch.from_numpy(clip))["input_features"][0]
        ref.assert_parity(ours(clip), want, f"clip {i}: features", max_abs=1e-4)  # theirs is float32


@torch.no_grad()
def test_every_stage_matches_in_float64(model64, hf_model64, proc, clips):
    from oasr.audio.frontends import pad_features
    from oasr.models.granite_speech.features import GraniteSpeechFrontend

    fe = GraniteSpeechFrontend(dtype=torch.float64)
    feats, lens = pad_features([fe(c) for c in clips])
    ours_blocks, theirs_blocks = [], []
    hooks = [
        b.register_forward_hook(lambda m, a, o: ours_blocks.append(o.clone())) for b in model64.encoder.encoder.layers
    ]
    hooks += [
        b.register_forward_hook(lambda m, a, o: theirs_blocks.append(o.clone()))
        for b in hf_model64.model.encoder.layers
    ]
    states, n_audio = model64.encode_offline(feats, lens)
    prompts = [model64.prompt_ids(int(n)) for n in n_audio]
    t = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), t, dtype=torch.long)
    valid = torch.zeros(len(prompts), t, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, t - len(p) :], valid[i, t - len(p) :] = torch.tensor(p), True
    logits = model64.decoder(model64.embed_prompt(ids, valid, states, n_audio), valid)
    n_blocks = len(model64.encoder.encoder.layers)
    for i, clip in enumerate(clips):
        n = int(lens[i])
        theirs_blocks.clear()
        audio = hf_model64.get_audio_features(feats[i : i + 1, :n]).pooler_output[0]
        for j in range(n_blocks):
            ref.assert_parity(ours_blocks[j][i, :n], theirs_blocks[j][0], f"clip {i}: encoder block {j}")
        assert int(n_audio[i]) == audio.shape[0]
        ref.assert_parity(states[i, : int(n_audio[i])], audio, f"clip {i}: projector")
        inputs = _hf_inputs(proc, clip)
        assert prompts[i] == inputs["input_ids"][0].tolist(), "prompt ids differ from the processor's"
        want = hf_model64(input_ids=inputs["input_ids"], input_features=feats[i : i + 1, :n]).logits[0]
        # The LoRA is merged into the float32 checkpoint's weights at load: their rounding (~1e-7
        # relative) is the whole difference left.
        ref.assert_parity(logits[i, valid[i]], want, f"clip {i}: LM logits", max_abs=1e-5)
    for h in hooks:
        h.remove()


@torch.no_grad()
def test_a_generated_audio_token_is_embedded_as_transformers_embeds_it(model64, hf_model64, proc, clips):
    """A model may generate ``<|audio|>`` (random weights often do): transformers embeds that id as
    id 0 at every step, never with its own row, so the logits after it must follow."""
    from oasr.audio.frontends import pad_features
    from oasr.models.granite_speech.features import GraniteSpeechFrontend

    feats, lens = pad_features([GraniteSpeechFrontend(dtype=torch.float64)(clips[2])])
    prompt = _hf_inputs(proc, clips[2])["input_ids"]
    audio_id = model64.config.audio_token_id
    cont = torch.tensor([[audio_id, 17, audio_id]])  # generated after the prompt, one step each
    first = hf_model64(input_ids=prompt, input_features=feats, use_cache=True)
    want = hf_model64(input_ids=cont, cache=first.cache).logits[0]
    states, n_audio = model64.encode_offline(feats, lens)
    x = model64.embed_prompt(prompt, torch.ones_like(prompt, dtype=torch.bool), states, n_audio)
    x = torch.cat([x, model64.decoder.embed(cont)], dim=1)
    got = model64.decoder(x, torch.ones(x.shape[:2], dtype=torch.bool))[0, -3:]
    ref.assert_parity(got, want, "logits after generated <|audio|> ids", max_abs=1e-5)


def test_text_drops_special_tokens_as_the_model_card_decodes(engine, proc):
    """A model may write a special token mid-text (a role marker; random weights often do): the
    text is the card's ``decode(..., skip_special_tokens=True)``, the ids stay in the tokens."""
    rng = np.random.default_rng(0)
    specials = sorted(engine.loaded.tokenizer.special_ids)
    assert specials
    for _ in range(20):
        ids = [int(i) for i in rng.integers(0, min(specials), 16)]
        for k in rng.integers(0, 16, 3):
            ids[int(k)] = int(rng.choice(specials))
        got = engine.strategy._text_bytes(ids).decode("utf-8", "replace")
        assert got == proc.tokenizer.decode(ids, skip_special_tokens=True)


def _hf_greedy(hf_model, proc, clip, text=None) -> list[int]:
    inputs = _hf_inputs(proc, clip, text)
    gen = ref.generate_with_adapter(hf_model, **inputs, max_new_tokens=MAX_NEW, do_sample=False)
    gen = gen[0, inputs["input_ids"].shape[1] :]
    stops = {hf_model.generation_config.eos_token_id}
    out = gen.tolist()
    return out[: next((k + 1 for k, x in enumerate(out) if x in stops), len(out))]


@torch.no_grad()
def test_engine_greedy_tokens_equal_generate_row_by_row(engine, hf_model, proc, clips):
    want = [_hf_greedy(hf_model, proc, c) for c in clips]
    outputs = engine.transcribe(list(clips), max_new_tokens=MAX_NEW)
    assert len({tuple(w) for w in want}) > 1  # the rows follow their own audio
    for out, tokens in zip(outputs, want):
        got = [t for s in out.segments for t in s.tokens]
        assert got == [t for t in tokens if t != hf_model.generation_config.eos_token_id]
        assert out.finish_reason == ("length" if len(tokens) == MAX_NEW else "stop")


@torch.no_grad()
@pytest.mark.parametrize(
    ("options", "instruction", "system"),
    [
        ({"task": "translate", "language": "fr"}, "translate the speech to French", None),
        ({"context": "Dashwood <|audio|> <|end_of_text|>"}, None, "Dashwood <|audio|> <|end_of_text|>"),
    ],
)
def test_translation_and_context_prompts_equal_generate(engine, hf_model, proc, clips, options, instruction, system):
    text = ref.chat_prompt(proc, **({"instruction": instruction} if instruction else {}), system=system)
    if system is not None:  # the context is text: the processor must not read its special tokens
        text = text.replace(system, "\x00")
        head, tail = text.split("\x00")
        inputs = _hf_inputs(proc, clips[2], head + "\x01" + tail)
        ctx = proc.tokenizer(system, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        ids = inputs["input_ids"][0].tolist()
        k = ids.index(proc.tokenizer.convert_tokens_to_ids(proc.tokenizer.tokenize("\x01"))[0])
        assert engine.model.prompt_ids(ids.count(engine.model.config.audio_token_id), context=system) == (
            ids[:k] + ctx + ids[k + 1 :]
        )
        return
    want = _hf_greedy(hf_model, proc, clips[2], text)
    got = engine.transcribe(clips[2], max_new_tokens=MAX_NEW, **options)
    assert [t for s in got.segments for t in s.tokens] == [
        t for t in want if t != hf_model.generation_config.eos_token_id
    ]
