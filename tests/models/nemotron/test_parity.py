"""oasr's Nemotron 3.5 ASR against transformers' ``Nemotron3_5AsrForRNNT`` on the same saved
checkpoint, in float64: every stage (subsampling, each conformer layer, encoder output, prompt
projector, joint encoder projection, predictor, joint), greedy labels against ``generate`` for a
padded batch with a prompt per row and for one clip, every prompt of the table, and an input
long enough for the blocked offline attention against transformers' dense one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import oasr
import oasr.models.nemotron.model as nemotron_model
from tests.models.nemotron.conftest import DEFAULT_PROMPT, NUM_PROMPTS, generated_labels, hf_features, parity

ROW_PROMPTS = (0, 2, 5, 9)  # en-US, de, vi, auto: one per clip
LOOKAHEAD = 3
TOL_COS, TOL_ABS = 0.99999, 1e-6


def _close(ours: torch.Tensor, ref: torch.Tensor, what) -> None:
    cos, err = parity(ours, ref)
    assert cos >= TOL_COS and err <= TOL_ABS, (what, cos, err)


@pytest.fixture(scope="module")
def ours(nemotron_reference):
    loaded = oasr.load_pretrained(nemotron_reference.path)
    assert loaded.report.ok and not loaded.report.dropped, loaded.report.summary()
    loaded.model.double()
    return loaded


@pytest.fixture(scope="module")
def batch(nemotron_reference, waveforms):
    feats, mask = hf_features(nemotron_reference.feature_extractor, waveforms)
    return feats.double(), mask


def _generate(reference, feats, mask, prompt_ids=None):
    """transformers' greedy labels per row: (tokens, frames)."""
    model = reference.model
    kwargs = {} if prompt_ids is None else {"prompt_ids": torch.as_tensor(prompt_ids)}
    with torch.no_grad():
        out = model.generate(
            input_features=feats,
            attention_mask=mask,
            decoder_start_token_id=reference.blank_id,
            max_new_tokens=8 * feats.shape[1],
            num_lookahead_tokens=LOOKAHEAD,
            **kwargs,
        )
        enc_lens = model.encoder._get_subsampling_output_length(mask.sum(-1))
    return [(t, f) for t, f, _ in generated_labels(out.sequences, out.durations, enc_lens, reference.blank_id)]


@pytest.fixture(scope="module")
def hf_stages(nemotron_reference, batch):
    """transformers' intermediate tensors, captured with forward hooks."""
    model = nemotron_reference.model
    feats, mask = batch
    seen: dict[str, torch.Tensor] = {}
    # Clones: transformers scales the subsampling output in place.
    hooks = [
        model.encoder.subsampling.register_forward_hook(lambda m, i, o: seen.__setitem__("subsampling", o.clone()))
    ]
    for n, layer in enumerate(model.encoder.layers):
        hooks.append(layer.register_forward_hook(lambda m, i, o, n=n: seen.__setitem__(f"layer{n}", o.clone())))
    hooks.append(model.prompt_projector.register_forward_hook(lambda m, i, o: seen.__setitem__("prompted", o.clone())))
    try:
        with torch.no_grad():
            out = model.get_audio_features(
                input_features=feats,
                attention_mask=mask,
                prompt_ids=torch.tensor(ROW_PROMPTS),
                num_lookahead_tokens=LOOKAHEAD,
            )
    finally:
        for h in hooks:
            h.remove()
    seen["encoder"] = out.last_hidden_state
    seen["projected"] = out.pooler_output
    seen["lens"] = out.attention_mask.sum(-1)
    return seen


def test_bundle_specs(ours, nemotron_reference):
    model = ours.model
    assert model.architecture == "nemotron"
    assert model.blank_id == nemotron_reference.blank_id == len(nemotron_reference.tokenizer)
    assert model.encoder.subsampling_rate == 8
    # Cache-aware streaming over the paged pool: the trained window (3 chunks of 4), the conv tails,
    # the three subsampling tails and the prompt id (tests/streaming/test_nemotron_streaming.py).
    spec = model.cache_spec
    assert model.encoder.streaming_kind == "paged" and spec.fixed_attention_window == 12
    assert [s.name for s in spec.stream_states] == ["subsampling.0", "subsampling.1", "subsampling.2", "prompt_id"]
    assert "language" in model.encoder_options
    assert ours.decoding_spec.decode_type == oasr.models.DecodeType.TRANSDUCER
    assert ours.decoding_spec.params["blank_id"] == model.blank_id
    assert ours.feature_spec.kind == "parakeet_mel" and ours.feature_spec.params["normalize"] is False
    # The blank sits past the tokenizer's pieces and is filtered with the tokenizer's own specials.
    assert model.blank_id in ours.tokenizer_spec.special_ids
    assert model.predictor.label_window_state is False


def test_subsampling_and_each_layer_match(ours, batch, hf_stages):
    feats, mask = batch
    enc = ours.model.encoder
    with torch.no_grad():
        sub, lens = enc.subsampling(feats, mask.sum(-1))
        assert torch.equal(lens, hf_stages["lens"].long())
        x = sub * enc.input_scale
        valid = torch.arange(x.shape[1])[None, :] < lens[:, None]
        stages = [("subsampling", sub)]
        for n, layer in enumerate(enc.layers):
            x = layer(x, lens, valid)
            stages.append((f"layer{n}", x))
    for name, mine in stages:
        for row, n in enumerate(lens.tolist()):
            _close(mine[row, :n], hf_stages[name][row, :n], (name, row))


def test_encoder_prompt_and_joint_projection_match(ours, batch, hf_stages):
    feats, mask = batch
    model = ours.model
    with torch.no_grad():
        hidden, lens = model.encoder(feats, mask.sum(-1))
        prompted, _ = model.encode_offline(feats, mask.sum(-1), torch.tensor(ROW_PROMPTS))
        projected = model.joiner.project_encoder(prompted)
    for row, n in enumerate(lens.tolist()):
        _close(hidden[row, :n], hf_stages["encoder"][row, :n], ("encoder", row))
        _close(prompted[row, :n], hf_stages["prompted"][row, :n], ("prompted", row))
        _close(projected[row, :n], hf_stages["projected"][row, :n], ("projected", row))


def test_predictor_and_joint_match(ours, nemotron_reference, hf_stages):
    """The blank-primed LSTM over a label sequence, and the joint over every (frame, label) pair."""
    model, ref = ours.model, nemotron_reference.model
    blank = model.blank_id
    labels = torch.tensor([[blank, 3, 17, 17, 40, 2], [blank, 8, 1, 30, 5, 5]])
    with torch.no_grad():
        theirs = ref.decoder(labels)  # (B, U, Dj), no cache: the LSTM from a zero state
        state = model.predictor.init_state(2)
        preds = [model.predictor.predict(state)]
        for u in range(1, labels.shape[1]):
            state = model.predictor.advance(state, labels[:, u], torch.ones(2, dtype=torch.bool))
            preds.append(model.predictor.predict(state))
        mine = torch.stack(preds, dim=1)
        _close(mine, theirs, "predictor")
        enc = hf_stages["projected"][:2, :20]
        their_joint = ref.joint(decoder_hidden_states=theirs[:, None], encoder_hidden_states=enc[:, :, None])
        my_joint = model.joiner.join(enc[:, :, None], mine[:, None])
    _close(my_joint, their_joint, "joint")
    # A row that does not emit keeps its state.
    kept = model.predictor.advance(state, labels[:, 1], torch.tensor([True, False]))
    assert torch.equal(kept.h[:, 1], state.h[:, 1]) and torch.equal(kept.pred[1], state.pred[1])
    assert not torch.equal(kept.pred[0], state.pred[0])


def test_greedy_batch_matches_generate(ours, nemotron_reference, batch):
    """The three shorter clips (unequal lengths, one of 8 frames), a prompt per row."""
    feats, mask = batch
    n = int(mask[1:].sum(-1).max())
    feats, mask, prompts = feats[1:, :n], mask[1:, :n], ROW_PROMPTS[1:]
    theirs = _generate(nemotron_reference, feats, mask, prompts)
    mine = ours.model.greedy_decode(feats, mask.sum(-1), torch.tensor(prompts))
    emitted = 0
    for row, (tokens, frames) in enumerate(theirs):
        assert mine.tokens[row] == tokens, row
        assert mine.frames[row] == frames, row
        emitted += len(tokens)
    assert emitted > 50, "the random model should emit labels; the comparison is vacuous otherwise"
    assert any(len(set(f)) < len(f) for f in mine.frames), "no frame carried several labels"
    special = set(ours.tokenizer_spec.special_ids)
    text = ours.tokenizer.decode([i for i in mine.tokens[0] if i not in special])
    # RNN-T keeps repeated labels (transformers' processor decodes with group_tokens=False).
    assert text == nemotron_reference.tokenizer.decode(theirs[0][0], skip_special_tokens=True, group_tokens=False)


def test_greedy_one_clip_matches_generate(ours, nemotron_reference, batch):
    """One clip alone, no prompt given on either side: the checkpoint's default prompt."""
    feats, mask = batch
    n = int(mask[1].sum())
    theirs = _generate(nemotron_reference, feats[1:2, :n], mask[1:2, :n])
    mine = ours.model.greedy_decode(feats[1:2, :n], torch.tensor([n]))
    assert (mine.tokens[0], mine.frames[0]) == theirs[0]
    assert len(mine.tokens[0]) > 20
    with_default = ours.model.greedy_decode(feats[1:2, :n], torch.tensor([n]), torch.tensor([DEFAULT_PROMPT]))
    assert with_default.tokens == mine.tokens


def test_every_prompt_matches_generate(ours, nemotron_reference, batch):
    """The same clip under each prompt id (as a batch), and the languages that name them."""
    feats, mask = batch
    n = int(mask[2].sum())
    clip = feats[2:3, :n].expand(NUM_PROMPTS, -1, -1)
    clip_mask = mask[2:3, :n].expand(NUM_PROMPTS, -1)
    ids = list(range(NUM_PROMPTS))
    theirs = _generate(nemotron_reference, clip, clip_mask, ids)
    mine = ours.model.greedy_decode(clip, clip_mask.sum(-1), torch.tensor(ids))
    assert [(t, f) for t, f in zip(mine.tokens, mine.frames)] == theirs
    assert len({tuple(t) for t, _ in theirs}) > 1, "prompts should change the labels; the check is vacuous otherwise"
    languages = ["en", "en-GB", "de", "zh", "zh-TW", "vi", "pt-BR", "pt-PT", None]
    by_language = ours.model.prompt_ids(languages, len(languages))
    assert by_language.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, DEFAULT_PROMPT]
    resolved = ours.model.greedy_decode(clip[: len(languages)], clip_mask[: len(languages)].sum(-1), by_language)
    assert resolved.tokens == [theirs[i][0] for i in by_language.tolist()]


def test_long_input_in_blocks_equals_dense_reference(ours, nemotron_reference, waveforms, monkeypatch):
    """An input of several query blocks (and a batch with it) against transformers' dense mask;
    then blocks of 8 frames, so even the short rows run blocked. (Greedy labels follow from the
    encoder output: the search is checked against ``generate`` above.)"""
    long = np.concatenate(list(waveforms))
    feats, mask = hf_features(nemotron_reference.feature_extractor, [long, waveforms[1], waveforms[3]])
    feats = feats.double()
    with torch.no_grad():
        ref = nemotron_reference.model.encoder(
            input_features=feats, attention_mask=mask, num_lookahead_tokens=LOOKAHEAD
        )
    lens = ref.attention_mask.sum(-1).tolist()
    attn = ours.model.encoder.layers[0].self_attn
    for block in (nemotron_model.OFFLINE_BLOCK_FRAMES, 8):
        monkeypatch.setattr(nemotron_model, "OFFLINE_BLOCK_FRAMES", block)
        _, _, n_blocks = attn.geometry(lens[0])
        assert n_blocks >= 4, (block, n_blocks)
        with torch.no_grad():
            hidden, _ = ours.model.encoder(feats, mask.sum(-1))
        for row, n in enumerate(lens):
            _close(hidden[row, :n], ref.last_hidden_state[row, :n], (block, row))


def test_front_end_matches_transformers(ours, nemotron_reference, waveforms):
    """oasr's front end for this spec (no normalisation) gives transformers' features."""
    from oasr.audio.frontends import build_frontend

    frontend = build_frontend(ours.feature_spec)
    feats, lens = frontend.compute_batch(waveforms)
    theirs, mask = hf_features(nemotron_reference.feature_extractor, waveforms)
    assert torch.equal(lens, mask.sum(-1))
    for row, n in enumerate(lens.tolist()):
        assert (feats[row, :n] - theirs[row, :n]).abs().max() <= 1e-3, row


def test_padded_batch_equals_one_at_a_time(nemotron_reference, waveforms):
    """float32 as served: features, encoder and greedy labels, batched vs alone (the three
    shorter clips: the longest adds steps, not cases)."""
    from oasr.audio.frontends import build_frontend
    from oasr.models.nemotron.search import greedy_search

    loaded = oasr.load_pretrained(nemotron_reference.path)
    model = loaded.model.float().eval()
    frontend = build_frontend(loaded.feature_spec)
    waveforms, prompts = waveforms[1:], ROW_PROMPTS[1:]
    feats, lens = frontend.compute_batch(waveforms)
    with torch.no_grad():
        hidden, out_lens = model.encode_offline(feats, lens, torch.tensor(prompts))
        batched = greedy_search(
            model.joiner, model.predictor, hidden, out_lens, blank_id=model.blank_id, max_symbols_per_step=5
        )
        for row, wav in enumerate(waveforms):
            alone = frontend(wav)
            h1, n1 = model.encode_offline(alone[None], torch.tensor([alone.shape[0]]), torch.tensor([prompts[row]]))
            n = int(out_lens[row])
            assert int(n1[0]) == n
            assert (hidden[row, :n] - h1[0]).abs().max() <= 1e-4, row
            one = greedy_search(model.joiner, model.predictor, h1, n1, blank_id=model.blank_id, max_symbols_per_step=5)
            assert one.tokens[0] == batched.tokens[row], row
