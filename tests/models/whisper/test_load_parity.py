"""Loading a transformers Whisper directory through oasr: nothing missing, and the
encoder and decoder agree with transformers (float64 cosine >= 0.99999 and max-abs
<= 1e-4 on the flattened outputs)."""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch

import oasr
from tests.models.whisper import _reference as ref

PROMPT, FORCED = ref.TF_PROMPT, ref.TF_FORCED


def test_load_report_is_clean(oasr_hf, hf_dir):
    rep = oasr_hf.report
    assert rep.ok and not rep.missing, rep.summary()
    assert oasr_hf.format == "huggingface" and oasr_hf.architecture == "whisper"
    cfg = oasr_hf.model.config
    assert (cfg.n_audio_state, cfg.n_audio_layer, cfg.n_text_layer, cfg.n_audio_head) == (64, 2, 2, 4)
    assert (cfg.encoder_ffn_dim, cfg.decoder_ffn_dim, cfg.n_vocab) == (128, 128, 51865)
    params = oasr_hf.decoding_spec.params
    assert params["alignment_heads"] == ref.ALIGNMENT_HEADS
    assert params["max_initial_timestamp_index"] == ref.MAX_INITIAL_TIMESTAMP_INDEX
    assert len(params["lang_ids"]) == 99 and params["begin_suppress_tokens"] == [220, ref.EOT]
    assert oasr_hf.tokenizer is not None
    model = oasr.from_pretrained(hf_dir)
    assert all(torch.equal(v, oasr_hf.model.state_dict()[k]) for k, v in model.state_dict().items())


def test_weights_equal_transformers(oasr_hf, hf_model):
    ours = oasr_hf.model.state_dict()
    theirs = {k.removeprefix("model."): v for k, v in hf_model.state_dict().items() if k != "proj_out.weight"}
    assert set(ours) == set(theirs)
    for name, t in theirs.items():
        assert torch.equal(ours[name], t), name
    assert torch.equal(hf_model.proj_out.weight, ours["decoder.embed_tokens.weight"])


def test_features_match_transformers_extractor(clips, hf_features):
    from oasr.audio import log_mel_batch

    ref.assert_parity(log_mel_batch(clips), hf_features, "features (log_mel_batch vs WhisperFeatureExtractor)")


@torch.no_grad()
def test_encoder_and_teacher_forced_logits(oasr_hf, hf_model, hf_features):
    model = oasr_hf.model
    feats = hf_features[:2]
    enc, lens = model.encode_offline(feats)
    hf_enc = hf_model.model.encoder(feats).last_hidden_state
    assert lens.tolist() == [1500, 1500]
    ref.assert_parity(enc, hf_enc, "encoder output")

    full = torch.tensor([PROMPT + FORCED] * 2)
    hf_logits = hf_model(encoder_outputs=(hf_enc,), decoder_input_ids=full).logits  # (2, L, V)
    p = len(PROMPT)
    pool = model.decoder.new_pool(2, 2)
    at = torch.arange(p)[None].expand(2, -1)
    logits, state = model.decoder.prefill(pool, full[:, :p], torch.full((2,), p), memory=enc, logits_at=at)
    ref.assert_parity(logits, hf_logits[:, :p], "prefill logits (every prompt position)")
    for i, t in enumerate(FORCED[:-1]):
        step = model.decoder.step(state, torch.tensor([t, t]))
        ref.assert_parity(step, hf_logits[:, p + i], f"step {i} logits")
    assert state.lengths == [len(PROMPT) + len(FORCED) - 1] * 2


@torch.no_grad()
def test_row_batched_prefill_of_unequal_prompts(oasr_hf, hf_model, hf_features):
    """Rows of different prompt lengths (right-padded) give each row's own logits, and
    keep doing so through steps at their own positions."""
    model = oasr_hf.model
    prompts = [
        ref.hf_prompt("en", "transcribe", timestamps=False),
        [ref.SOT_PREV, 464, 2068, 7586, 21831, 13] + ref.hf_prompt("de", "translate", timestamps=True),
        [ref.SOT],
    ]
    nxt = [[440, 1002, 13], [ref.TIMESTAMP_BEGIN, 2221, 11], [ref.SOT + 1, ref.TRANSCRIBE, ref.NO_TIMESTAMPS]]
    feats = hf_features[[0, 2, 3]]
    enc, _ = model.encode_offline(feats)
    b, width = len(prompts), max(map(len, prompts))
    tokens = torch.zeros(b, width, dtype=torch.long)
    for i, pr in enumerate(prompts):
        tokens[i, : len(pr)] = torch.tensor(pr)
    lens = torch.tensor([len(pr) for pr in prompts])
    pool = model.decoder.new_pool(b, b)
    batched, state = model.decoder.prefill(pool, tokens, lens, memory=enc)
    batched_steps = [model.decoder.step(state, torch.tensor([n[s] for n in nxt])) for s in range(len(nxt[0]))]
    for i, pr in enumerate(prompts):
        one_pool = model.decoder.new_pool(1, 1)
        alone, st = model.decoder.prefill(one_pool, torch.tensor([pr]), torch.tensor([len(pr)]), memory=enc[i : i + 1])
        ref.assert_parity(batched[i], alone[0], f"row {i} prefill: batched vs alone")
        full = torch.tensor([pr + nxt[i]])
        hf_logits = hf_model(
            encoder_outputs=(hf_model.model.encoder(feats[i : i + 1]).last_hidden_state,), decoder_input_ids=full
        ).logits[0]
        ref.assert_parity(batched[i], hf_logits[len(pr) - 1], f"row {i} prefill: batched vs transformers")
        for s in range(len(nxt[i])):
            one = model.decoder.step(st, torch.tensor([nxt[i][s]]))
            ref.assert_parity(batched_steps[s][i], one[0], f"row {i} step {s}: batched vs alone")
            ref.assert_parity(batched_steps[s][i], hf_logits[len(pr) + s], f"row {i} step {s}: vs transformers")


@torch.no_grad()
def test_select_and_merge_keep_rows_intact(oasr_hf, hf_model, hf_features):
    """Batch surgery over the K/V pool (repeat / reorder rows with ``select``, join a
    later prefill with ``merge``) leaves every row's logits those of transformers on
    that row's own tokens."""
    model, dec = oasr_hf.model, oasr_hf.model.decoder
    feats = hf_features[:3]
    enc, _ = model.encode_offline(feats)
    hf_enc = hf_model.model.encoder(feats).last_hidden_state
    pa = ref.hf_prompt("en", "transcribe", timestamps=True)
    pb = ref.hf_prompt("de", "translate", timestamps=False)

    def hf_next(i, tokens):
        return hf_model(encoder_outputs=(hf_enc[i : i + 1],), decoder_input_ids=torch.tensor([tokens])).logits[0, -1]

    pool = dec.new_pool(6, 3)
    ta, tb = ref.TIMESTAMP_BEGIN, ref.TIMESTAMP_BEGIN + 3
    _, state = dec.prefill(pool, torch.tensor([pa, pa]), torch.tensor([len(pa)] * 2), memory=enc[:2])
    dec.step(state, torch.tensor([ta, tb]))
    # A request joins: prefilled into the rows / group after the running batch, then merged.
    _, joined = dec.prefill(pool, torch.tensor([pb]), torch.tensor([len(pb)]), row0=2, group0=2, memory=enc[2:3])
    state = dec.merge(state, joined)
    assert state.lengths == [len(pa) + 1] * 2 + [len(pb)] and state.row_group == [0, 1, 2]
    out = dec.step(state, torch.tensor([440, 1002, 464]))
    ref.assert_parity(out[0], hf_next(0, pa + [ta, 440]), "merge: running row 0")
    ref.assert_parity(out[1], hf_next(1, pa + [tb, 1002]), "merge: running row 1")
    ref.assert_parity(out[2], hf_next(2, pb + [464]), "merge: joined row")
    # Rows become: row 1 twice (a beam expansion), then the joined row; row 0 leaves.
    state = dec.select(state, [1, 1, 2])
    assert state.row_group == [0, 0, 1] and state.n_groups == 2
    out = dec.step(state, torch.tensor([13, 11, 2068]))
    ref.assert_parity(out[0], hf_next(1, pa + [tb, 1002, 13]), "select: repeated row (a)")
    ref.assert_parity(out[1], hf_next(1, pa + [tb, 1002, 11]), "select: repeated row (b)")
    ref.assert_parity(out[2], hf_next(2, pb + [464, 2068]), "select: moved joined row")
    state = dec.select(state, [2, 1])
    out = dec.step(state, torch.tensor([7586, 257]))
    ref.assert_parity(out[0], hf_next(2, pb + [464, 2068, 7586]), "select again: joined row")
    ref.assert_parity(out[1], hf_next(1, pa + [tb, 1002, 11, 257]), "select again: repeated row (b)")


@pytest.mark.parametrize("layout", ["sharded-safetensors", "pytorch_model.bin"])
def test_other_transformers_layouts_load_identically(tmp_path, hf_dir, hf_model, oasr_hf, layout):
    """A sharded safetensors checkpoint (with its index), and a legacy pickled
    ``pytorch_model.bin`` holding every tensor (the tied ``proj_out`` too)."""
    out = tmp_path / layout
    if layout == "sharded-safetensors":
        hf_model.save_pretrained(out, max_shard_size="4MB")
        assert (out / "model.safetensors.index.json").is_file()
    else:
        out.mkdir()
        torch.save(hf_model.state_dict(), out / "pytorch_model.bin")
        for name in ("config.json", "generation_config.json"):
            shutil.copy(hf_dir / name, out / name)
    shutil.copy(hf_dir / "tokenizer.json", out / "tokenizer.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        loaded = oasr.load_pretrained(out)
    a, b = loaded.model.state_dict(), oasr_hf.model.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in b)
    assert loaded.decoding_spec.params == oasr_hf.decoding_spec.params
