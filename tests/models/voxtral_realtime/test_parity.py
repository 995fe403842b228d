"""Voxtral Realtime against transformers on a tiny random checkpoint saved by transformers'
own classes: the log-mel, the tower, the projector and the LM stage by stage in float64, then
greedy ids of whole clips (``generate``) and of live streams (transformers' streaming
``generate`` fed the chunks its documentation cuts)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.models.loaders import load_pretrained

# transformers' RMSNorm rounds its input to float32 even in a float64 model: the stages agree
# to float32's precision, not float64's.
ATOL = 1e-5


@pytest.fixture(scope="module")
def ours(tiny_voxtral_realtime):
    return load_pretrained(str(tiny_voxtral_realtime.path), dtype=torch.float64).model


def _ref_ids(out: torch.Tensor, prompt_len: int, eos: int) -> list[int]:
    return [t for t in out[0, prompt_len:].tolist() if t != eos]


def test_tokenizer_and_prompt_match_the_reference(tiny_voxtral_realtime, ours):
    proc = tiny_voxtral_realtime.processor
    text = "the child almost hurt the small dog"
    assert ours.tokenizer.encode_text(text) == proc.tokenizer.encode(text, add_special_tokens=False)
    inputs = proc(tiny_voxtral_realtime.clips[0], return_tensors="pt")
    assert ours.prompt_ids(1) == inputs["input_ids"][0].tolist()
    assert int(inputs["num_delay_tokens"]) == ours.config.stream.n_delay_tokens


def test_decode_equals_the_processor_on_pieces_that_are_not_utf8(tiny_voxtral_realtime, ours):
    """A random model emits byte pieces that are not UTF-8 (a real one may cut a character at a
    control token): each run between control tokens decodes on its own, as mistral-common does,
    so bytes never join across a dropped control token."""
    proc = tiny_voxtral_realtime.processor
    rng = np.random.default_rng(0)
    n = ours.tokenizer.vocab_size
    specials = sorted(ours.tokenizer.special_ids)
    for _ in range(50):
        ids = [int(i) for i in rng.integers(len(specials), n, 24)]
        for k in rng.integers(0, 24, 3):
            ids[int(k)] = int(rng.choice(specials))
        assert ours.tokenizer.decode(ids) == proc.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("clip", [0, 1])
def test_stages_match_transformers_in_float64(tiny_voxtral_realtime, ours, clip):
    ref = tiny_voxtral_realtime.model
    wave = tiny_voxtral_realtime.clips[clip]
    inputs = tiny_voxtral_realtime.processor(wave, return_tensors="pt")
    mel = ours.features(wave)
    torch.testing.assert_close(mel, inputs["input_features"][0], rtol=0, atol=1e-6)
    feats = inputs["input_features"].double()
    with torch.no_grad():
        tower = ref.model.audio_tower(input_features=feats).last_hidden_state
        torch.testing.assert_close(ours.encoder(feats), tower, rtol=0, atol=ATOL)
        audio = ref.model.get_audio_features(input_features=feats).pooler_output
        torch.testing.assert_close(ours.encode(feats), audio, rtol=0, atol=ATOL)
        # The LM over the prompt with its audio vectors (the delay folded into its norms).
        ids = inputs["input_ids"]
        logits = ref(
            input_ids=ids,
            encoder_inputs_embeds=ref.model.audio_tower.embedder(feats)[:, : ids.shape[1] * 4],
            num_delay_tokens=inputs["num_delay_tokens"],
        ).logits
        embeds = ours.decoder.embed(ids) + ours.encode(feats)[:, : ids.shape[1]]
        mine = ours.decoder(embeds, torch.ones_like(ids, dtype=torch.bool))
        torch.testing.assert_close(mine, logits, rtol=0, atol=ATOL * 10)


@pytest.mark.parametrize("clip", [0, 1])
def test_generate_equals_transformers(tiny_voxtral_realtime, ours, clip):
    fx = tiny_voxtral_realtime
    wave = fx.clips[clip]
    inputs = fx.processor(wave, return_tensors="pt")
    out = fx.model.generate(
        input_ids=inputs["input_ids"],
        input_features=inputs["input_features"].double(),
        num_delay_tokens=inputs["num_delay_tokens"],
    )
    ids, reason = ours.generate(wave)
    assert ids == _ref_ids(out, inputs["input_ids"].shape[1], ours.config.eos_token_id)
    assert reason == "stop"
    assert ours.text(ids) == fx.processor.batch_decode(out, skip_special_tokens=True)[0]


def test_max_new_tokens_cuts_with_length(tiny_voxtral_realtime, ours):
    fx = tiny_voxtral_realtime
    inputs = fx.processor(fx.clips[0], return_tensors="pt")
    out = fx.model.generate(
        input_ids=inputs["input_ids"],
        input_features=inputs["input_features"].double(),
        num_delay_tokens=inputs["num_delay_tokens"],
        max_new_tokens=5,
    )
    ids, reason = ours.generate(fx.clips[0], max_new_tokens=5)
    assert ids == _ref_ids(out, inputs["input_ids"].shape[1], ours.config.eos_token_id) and len(ids) == 5
    assert reason == "length"


def _reference_stream(fx, wave: np.ndarray) -> list[int]:
    """transformers' streaming ``generate`` on the chunks its documentation cuts."""
    proc = fx.processor
    audio = np.pad(wave, (0, proc.num_right_pad_tokens * proc.raw_audio_length_per_tok))
    first = proc(
        audio[: proc.num_samples_first_audio_chunk], is_streaming=True, is_first_audio_chunk=True, return_tensors="pt"
    )
    hop, win = proc.feature_extractor.hop_length, proc.feature_extractor.win_length

    def chunks():
        yield first["input_features"].double()
        mel = proc.num_mel_frames_first_audio_chunk
        start = mel * hop - win // 2
        while (end := start + proc.num_samples_per_audio_chunk) < audio.shape[0]:
            piece = proc(audio[start:end], is_streaming=True, is_first_audio_chunk=False, return_tensors="pt")
            yield piece["input_features"].double()
            mel += proc.audio_length_per_tok
            start = mel * hop - win // 2

    out = fx.model.generate(
        input_ids=first["input_ids"], input_features=chunks(), num_delay_tokens=first["num_delay_tokens"]
    )
    return _ref_ids(out, first["input_ids"].shape[1], 2)


# The 0.44-s clip is shorter than the first chunk (the delay's 0.56 s): all of its text comes at
# ``finish``.
@pytest.mark.parametrize(("clip", "piece", "live"), [(0, 1000, True), (1, 333, False)])
def test_stream_equals_transformers_streaming_generate(tiny_voxtral_realtime, ours, clip, piece, live):
    fx = tiny_voxtral_realtime
    wave = fx.clips[clip]
    stream = ours.open_live()
    partial = []
    for i in range(0, len(wave), piece):
        stream.feed(wave[i : i + piece])
        partial.append(len(stream.tokens))
    stream.finish()
    assert stream.tokens == _reference_stream(fx, wave)
    assert (partial[-1] > 0) == live and partial == sorted(partial)  # text arrives while the audio does
    assert stream.finish_reason == "stop"
    # Live and whole-clip decoding see the same audio vectors and write the same ids.
    assert stream.tokens == ours.generate(wave)[0]


def test_omitted_config_fields_are_transformers_defaults(tiny_voxtral_realtime):
    import json

    from transformers import VoxtralRealtimeConfig as HFConfig

    from oasr.models.voxtral_realtime.model import VoxtralRealtimeConfig

    tekken = json.loads((tiny_voxtral_realtime.path / "tekken.json").read_text())
    ours = VoxtralRealtimeConfig.from_hf({"model_type": "voxtral_realtime"}, tekken)
    ref = HFConfig()
    a, t = ref.audio_config, ref.text_config
    assert (ours.audio.hidden_size, ours.audio.num_hidden_layers, ours.audio.head_dim, ours.audio.sliding_window) == (
        a.hidden_size,
        a.num_hidden_layers,
        a.head_dim,
        a.sliding_window,
    )
    assert ours.audio.rope_theta == a.rope_parameters["rope_theta"]
    assert ours.text.rope_theta == t.rope_parameters["rope_theta"]
    assert (ours.text.hidden_size, ours.text.num_hidden_layers, ours.text.num_key_value_heads, ours.text.head_dim) == (
        t.hidden_size,
        t.num_hidden_layers,
        t.num_key_value_heads,
        t.head_dim,
    )
    assert ours.text.max_position_embeddings == t.sliding_window  # the context stops at the LM's window
