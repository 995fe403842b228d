"""Qwen3-ASR against transformers' ``Qwen3ASRForConditionalGeneration``, stage by stage, in
float64: mel, stem, tower, projected states, prefill hidden states and logits, and greedy
tokens against ``generate`` for one clip and a left-padded batch of three."""

from __future__ import annotations

import torch

from oasr.audio.frontends import build_frontend
from tests.models.qwen3_asr.conftest import hf_features, parity

COS, MAX_ABS = 0.99999, 1e-4
# Each clip with its own prompt options: auto-detect, a forced code with context, a forced name.
OPTIONS = (
    dict(language=None, context=None),
    dict(language="en", context="Dashwood, Norland"),
    dict(language="German", context=""),
)


def _close(ours: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    cos, err = parity(ours, ref)
    assert cos >= COS and err <= MAX_ABS, f"{what}: cosine {cos:.8f}, max-abs {err:.3g}"


def _prompts(model, n_audio: torch.Tensor, options=OPTIONS) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids (B, T) and their valid mask."""
    rows = [model.prompt_ids(int(n), **opt) for n, opt in zip(n_audio.tolist(), options)]
    t = max(map(len, rows))
    ids = torch.full((len(rows), t), model.config.im_end_token_id, dtype=torch.long)
    valid = torch.zeros(len(rows), t, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, t - len(r) :] = torch.tensor(r)
        valid[i, t - len(r) :] = True
    return ids, valid


def _greedy(model, embeds: torch.Tensor, valid: torch.Tensor, max_new: int) -> list[list[int]]:
    """Greedy decoding over oasr's K/V pool; each row ends at (and keeps) its first stop token."""
    dec = model.decoder
    pool = dec.new_pool(embeds.shape[0], max_len=embeds.shape[1] + max_new + 1, dtype=embeds.dtype)
    logits, state = dec.prefill(pool, embeds, valid)
    out: list[list[int]] = [[] for _ in range(embeds.shape[0])]
    live = list(range(embeds.shape[0]))
    for _ in range(max_new):
        nxt = logits.argmax(-1)
        keep = []
        for j, row in enumerate(live):
            out[row].append(int(nxt[j]))
            if int(nxt[j]) not in model.stop_ids:
                keep.append(j)
        if not keep:
            break
        if len(keep) < len(live):
            state = dec.select(state, keep)
            nxt = nxt[keep]
            live = [live[j] for j in keep]
        logits = dec.step(state, nxt)
    return out


def _until_stop(ids: list[int], stops) -> list[int]:
    for i, t in enumerate(ids):
        if t in stops:
            return ids[: i + 1]
    return ids


def test_mel_matches_the_extractor(reference, loaded, waveforms):
    frontend = build_frontend(loaded.feature_spec)
    feats, lens = frontend.compute_batch(waveforms)
    for i, w in enumerate(waveforms):
        out = reference.feature_extractor(
            w, sampling_rate=16000, return_tensors="pt", padding=True, return_attention_mask=True
        )
        n = int(out.attention_mask.sum())
        assert int(lens[i]) == n
        _close(feats[i, :n].T, out.input_features[0, :, :n], f"mel of clip {i}")


def test_stem_tower_and_projection(reference, loaded, waveforms):
    model, hf = loaded.model, reference.model
    x, mask = hf_features(reference.feature_extractor, waveforms)
    x = x.double()
    captured = {}
    hook = hf.model.audio_tower.layers[0].register_forward_pre_hook(lambda m, args: captured.update(stem=args[0]))
    with torch.no_grad():
        tower = hf.model.audio_tower(input_features=x, input_features_mask=mask).last_hidden_state
        projected = hf.model.get_audio_features(x, mask).pooler_output
        hook.remove()
        lens = mask.sum(1)
        stem, n = model.encoder.embed(x.transpose(1, 2), lens)
        valid = torch.arange(stem.shape[1])[None, :] < n[:, None]
        assert int(n.sum()) == tower.shape[0]
        _close(stem[valid], captured["stem"], "stem")
        ours, _ = model.encoder(x, lens, project=False)
        _close(ours[valid], tower, "tower")
        states, n_audio = model.encode_offline(x, lens)
        _close(states[valid], projected, "projected tower")
        assert torch.equal(n_audio, n)
        assert n.tolist() == [model.n_audio_tokens(int(k)) for k in lens]
        # Frames past each row's length are zero.
        assert bool((states[~valid] == 0).all())


def test_prefill_hidden_states_and_logits(reference, loaded, waveforms):
    model, hf = loaded.model, reference.model
    x, mask = hf_features(reference.feature_extractor, waveforms)
    x = x.double()
    with torch.no_grad():
        states, n_audio = model.encode_offline(x, mask.sum(1))
        ids, valid = _prompts(model, n_audio)
        ref = hf.model(input_ids=ids, input_features=x, input_features_mask=mask, attention_mask=valid.long())
        embeds = model.embed_prompt(ids, valid, states, n_audio)
        hidden = model.decoder.forward_hidden(embeds, valid)
        _close(hidden[valid], ref.last_hidden_state[valid], "prefill hidden states")
        _close(model.decoder.logits(hidden)[valid], hf.lm_head(ref.last_hidden_state)[valid], "prefill logits")
        # The pool's prefill returns the same last-position logits.
        pool = model.decoder.new_pool(ids.shape[0], max_len=ids.shape[1] + 1, dtype=embeds.dtype)
        last, _ = model.decoder.prefill(pool, embeds, valid)
        _close(last, hf.lm_head(ref.last_hidden_state[:, -1]), "pool prefill logits")


def _generate_both(reference, loaded, waveforms, options, max_new=16):
    model, hf = loaded.model, reference.model
    x, mask = hf_features(reference.feature_extractor, waveforms)
    x = x.double()
    with torch.no_grad():
        states, n_audio = model.encode_offline(x, mask.sum(1))
        ids, valid = _prompts(model, n_audio, options)
        ours = _greedy(model, model.embed_prompt(ids, valid, states, n_audio), valid, max_new)
        gen = hf.generate(
            input_ids=ids,
            attention_mask=valid.long(),
            input_features=x,
            input_features_mask=mask,
            max_new_tokens=max_new,
            do_sample=False,
        )
    theirs = [_until_stop(row.tolist(), model.stop_ids) for row in gen[:, ids.shape[1] :]]
    return ours, theirs


def test_greedy_tokens_equal_generate_for_one_clip(reference, loaded, waveforms):
    ours, theirs = _generate_both(reference, loaded, waveforms[1:2], OPTIONS[1:2])
    assert ours == theirs
    assert len(ours[0]) > 1


def test_greedy_tokens_equal_generate_for_a_left_padded_batch(reference, loaded, waveforms):
    ours, theirs = _generate_both(reference, loaded, waveforms, OPTIONS)
    assert ours == theirs
    # Unequal prompts: the batch really is left-padded.
    assert len({len(loaded.model.prompt_ids(1, **o)) for o in OPTIONS}) > 1
