"""oasr's Parakeet CTC against transformers' ``ParakeetForCTC`` on the same saved checkpoint:
encoder states, log-probs and greedy tokens on real clips, in float64; and a padded batch
against one utterance at a time."""

from __future__ import annotations

import pytest
import torch

import oasr
from tests.models.parakeet.conftest import ctc_collapse, hf_features, parity


@pytest.fixture(scope="module")
def ours(reference):
    loaded = oasr.load_pretrained(reference.path)
    assert loaded.report.ok and not loaded.report.dropped, loaded.report.summary()
    return loaded


@pytest.fixture(scope="module")
def batch(reference, waveforms):
    feats, mask = hf_features(reference.feature_extractor, waveforms)
    return feats.double(), mask


@pytest.fixture(scope="module")
def hf_out(reference, batch):
    feats, mask = batch
    with torch.no_grad():
        enc = reference.model.encoder(input_features=feats, attention_mask=mask)
        logits = reference.model.ctc_head(enc.last_hidden_state)
        greedy = reference.model.generate(input_features=feats, attention_mask=mask)
    return enc.last_hidden_state, enc.attention_mask.sum(-1), logits.log_softmax(-1), greedy


@pytest.fixture(scope="module")
def ours_out(ours, batch):
    model = ours.model.double()
    feats, mask = batch
    with torch.no_grad():
        hidden, lens = model.encode_offline(feats, mask.sum(-1))
        log_probs, lp_lens = model.forward_offline(feats, mask.sum(-1))
    model.float()
    assert torch.equal(lens, lp_lens)
    return hidden, lens, log_probs


def test_bundle_specs(ours, reference):
    assert ours.model.architecture == "parakeet"
    assert ours.model.blank_id == reference.blank_id == len(reference.tokenizer) - 1
    assert ours.model.encoder.subsampling_rate == 8
    assert ours.model.encoder.streaming_kind == "none" and ours.model.cache_spec is None
    assert ours.decoding_spec.decode_type == oasr.models.DecodeType.CTC
    assert ours.feature_spec.kind == "parakeet_mel"
    # Blank and <unk> are special: they never reach text.
    assert set(ours.tokenizer_spec.special_ids) == {reference.blank_id, reference.tokenizer.unk_token_id}


def test_output_lengths_match(hf_out, ours_out):
    assert torch.equal(ours_out[1], hf_out[1].long())
    assert ours_out[1].unique().numel() == len(ours_out[1]), "the clips should give unequal lengths"


def test_encoder_states_match(hf_out, ours_out):
    for row, n in enumerate(hf_out[1].tolist()):
        cos, err = parity(ours_out[0][row, :n], hf_out[0][row, :n])
        assert cos >= 0.99999 and err <= 1e-4, (row, cos, err)


def test_log_probs_match(hf_out, ours_out):
    assert ours_out[2].dtype == torch.float32  # the head's log-softmax runs in float32
    for row, n in enumerate(hf_out[1].tolist()):
        cos, err = parity(ours_out[2][row, :n], hf_out[2][row, :n])
        assert cos >= 0.99999 and err <= 1e-4, (row, cos, err)


def test_greedy_tokens_match(ours, reference, hf_out, ours_out):
    blank = reference.blank_id
    special = set(ours.tokenizer_spec.special_ids)
    emitted = 0
    for row, n in enumerate(hf_out[1].tolist()):
        theirs = ctc_collapse(hf_out[3][row, :n], blank)
        mine = ctc_collapse(ours_out[2][row, :n].argmax(-1), blank)
        assert mine == theirs, row
        emitted += len(mine)
        # transformers' CTC text (its tokenizer merges repeats and drops the pad blank itself)
        # and oasr's tokenizer on the ids left after the checkpoint's special ids.
        text = reference.tokenizer.decode(hf_out[3][row], skip_special_tokens=True)
        assert ours.tokenizer.decode([i for i in mine if i not in special]) == text
    assert emitted > 10, "a random model this small should still emit tokens; the comparison is vacuous otherwise"


def test_padded_batch_equals_one_at_a_time(ours, waveforms):
    """float32 as served: the front end and the model, batched vs alone, token for token."""
    from oasr.audio.frontends import build_frontend

    frontend = build_frontend(ours.feature_spec)
    model = ours.model.float().eval()
    feats, lens = frontend.compute_batch(waveforms)
    with torch.no_grad():
        log_probs, out_lens = model.forward_offline(feats, lens)
        for row, wav in enumerate(waveforms):
            alone = frontend(wav)
            assert alone.shape[0] == int(lens[row])
            torch.testing.assert_close(feats[row, : alone.shape[0]], alone, rtol=0, atol=1e-5)
            lp1, n1 = model.forward_offline(alone[None], torch.tensor([alone.shape[0]]))
            n = int(out_lens[row])
            assert int(n1[0]) == n == lp1.shape[1]
            assert (log_probs[row, :n] - lp1[0]).abs().max() <= 1e-4, row
            assert ctc_collapse(log_probs[row, :n].argmax(-1), model.blank_id) == ctc_collapse(
                lp1[0].argmax(-1), model.blank_id
            )
