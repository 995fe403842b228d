"""Qwen2-Audio through oasr against transformers ``Qwen2AudioForConditionalGeneration``:
mel, tower output (after pool + norm + projector), prefill hidden states and logits
(float64, cosine >= 0.99999 and max-abs <= 1e-4 on the flattened tensors), and greedy
tokens identical to ``generate`` for a batch of 1 and a left-padded batch of 3."""

from __future__ import annotations

import math

import pytest
import torch

from tests.models.speech_llm import _reference as ref


def _valid_rows(x: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """Concatenate the first ``lens[i]`` positions of every row. (B, T, D) -> (sum, D)"""
    return torch.cat([x[i, : int(n)] for i, n in enumerate(lens)])


def _left_valid(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The positions ``valid`` marks, rows in order. (B, T, D) -> (n_valid, D)"""
    return x[valid.to(torch.bool)]


def _oasr_features(clips: list, n_mels: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """oasr's log-mel of the 30-s window per clip, and its valid frames (ceil(samples / hop))."""
    from oasr.audio import log_mel_batch

    feats = log_mel_batch(clips, n_mels=n_mels)
    lens = torch.tensor([min(math.ceil(len(c) / 160), feats.shape[-1]) for c in clips])
    return feats, lens


def _left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    t = max(len(r) for r in rows)
    ids = torch.full((len(rows), t), pad, dtype=torch.long)
    valid = torch.zeros(len(rows), t, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, t - len(r) :] = torch.tensor(r)
        valid[i, t - len(r) :] = True
    return ids, valid


def test_mel_matches_the_extractor(clips, hf_batch3, loaded):
    feats, lens = _oasr_features(clips)
    ref.assert_parity(feats, hf_batch3["input_features"], "mel (log_mel_batch vs WhisperFeatureExtractor)")
    assert lens.tolist() == hf_batch3["feature_attention_mask"].sum(-1).tolist()
    # The checkpoint's own front end (what the engine runs), from its FeatureSpec.
    from oasr.audio.frontends import build_frontend

    front, front_lens = build_frontend(loaded.feature_spec).compute_batch(clips)  # (B, 3000, 128)
    ref.assert_parity(front.transpose(1, 2), hf_batch3["input_features"], "mel (whisper_mel front end, pad_to_chunk)")
    assert front_lens.tolist() == lens.tolist()


@torch.no_grad()
def test_tower_output_after_pool_norm_and_projector(model64, hf_model64, hf_batch3):
    captured = []
    hook = hf_model64.model.multi_modal_projector.register_forward_hook(lambda m, i, o: captured.append(o))
    try:
        hf_model64.model(**{k: v for k, v in hf_batch3.items()})
    finally:
        hook.remove()
    hf_states = captured[0]  # (3, 750, D_lm), all positions of the padded windows
    mel_lens = hf_batch3["feature_attention_mask"].sum(-1)
    states, n_audio = model64.encode_offline(hf_batch3["input_features"].double(), mel_lens)
    # The two-stage formula: conv stride, then pool; it is what the processor expands to.
    n_expected = ((mel_lens - 1) // 2 + 1 - 2) // 2 + 1
    assert n_audio.tolist() == n_expected.tolist()
    assert n_audio.tolist() == (hf_batch3["input_ids"] == model64.config.audio_token_id).sum(-1).tolist()
    assert states.shape == (3, int(n_audio.max()), model64.config.text.hidden_size)
    ref.assert_parity(_valid_rows(states, n_audio), _valid_rows(hf_states, n_audio), "tower output (valid states)")


@torch.no_grad()
@pytest.mark.parametrize("batch", ["hf_batch1", "hf_batch3"])
def test_prefill_hidden_states_and_logits(model64, hf_model64, batch, request):
    inputs = request.getfixturevalue(batch)
    out = hf_model64.model(**inputs)
    hf_hidden = out.last_hidden_state
    hf_logits = hf_model64.lm_head(hf_hidden)
    valid = inputs["attention_mask"].to(torch.bool)
    assert bool(valid.all()) == (batch == "hf_batch1")  # the batch of 3 is left-padded

    mel_lens = inputs["feature_attention_mask"].sum(-1)
    states, n_audio = model64.encode_offline(inputs["input_features"].double(), mel_lens)
    rows = [model64.prompt_ids(int(n)) for n in n_audio]
    ids, ours_valid = _left_pad(rows, pad=0)
    assert torch.equal(ours_valid, valid), "prompt lengths differ from the processor's"
    assert torch.equal(ids[valid], inputs["input_ids"][valid]), "prompt ids differ from the processor's"

    embeds = model64.embed_prompt(ids, valid, states, n_audio)
    hidden = model64.decoder.forward_hidden(embeds, valid)
    ref.assert_parity(_left_valid(hidden, valid), _left_valid(hf_hidden, valid), f"prefill hidden states ({batch})")
    logits = model64.decoder.logits(hidden)
    ref.assert_parity(_left_valid(logits, valid), _left_valid(hf_logits, valid), f"prefill logits ({batch})")

    pool = model64.decoder.new_pool(ids.shape[0], max_len=ids.shape[1] + 1)
    last, _ = model64.decoder.prefill(pool, embeds, valid)
    ref.assert_parity(last, hf_logits[:, -1], f"prefill last-position logits through the pool ({batch})")


def _oasr_greedy(model, clips: list, max_new_tokens: int) -> list[list[int]]:
    """Greedy decode through oasr's pieces: features, tower, prompt, prefill, steps;
    a row stops at a stop id (kept) as generate does."""
    feats, lens = _oasr_features(clips, model.config.audio.num_mel_bins)
    states, n_audio = model.encode_offline(feats, lens)
    ids, valid = _left_pad([model.prompt_ids(int(n)) for n in n_audio], pad=0)
    embeds = model.embed_prompt(ids, valid, states, n_audio)
    dec = model.decoder
    pool = dec.new_pool(len(clips), max_len=ids.shape[1] + max_new_tokens)
    logits, state = dec.prefill(pool, embeds, valid)
    out: list[list[int]] = [[] for _ in clips]
    live = list(range(len(clips)))
    for _ in range(max_new_tokens):
        nxt = logits.argmax(-1)
        keep = []
        for j, row in enumerate(live):
            out[row].append(int(nxt[j]))
            if int(nxt[j]) not in model.stop_ids:
                keep.append(j)
        if not keep or len(out[live[0]]) == max_new_tokens:
            break
        if len(keep) < len(live):
            state = dec.select(state, keep)
            nxt = nxt[keep]
            live = [live[j] for j in keep]
        logits = dec.step(state, nxt)
    return out


def _hf_greedy(hf_model, proc, clips: list, max_new_tokens: int) -> list[list[int]]:
    inputs = proc(
        text=[ref.chat_prompt(proc)] * len(clips), audio=clips, sampling_rate=16000, return_tensors="pt", padding=True
    )
    gen = hf_model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    new = gen[:, inputs["input_ids"].shape[1] :]
    stops = set(hf_model.generation_config.eos_token_id)
    rows = []
    for r in new.tolist():
        cut = next((i + 1 for i, t in enumerate(r) if t in stops), len(r))
        rows.append(r[:cut])
    return rows


@torch.no_grad()
@pytest.mark.parametrize("n_clips", [1, 3])
def test_greedy_tokens_equal_generate(loaded, hf_model, proc, clips, n_clips):
    chosen = clips[:n_clips]
    theirs = _hf_greedy(hf_model, proc, chosen, max_new_tokens=16)
    ours = _oasr_greedy(loaded.model, chosen, max_new_tokens=16)
    assert ours == theirs
    assert all(len(r) >= 1 for r in ours)
    if n_clips == 3:
        assert len({tuple(r) for r in ours}) > 1  # the rows follow their own audio
