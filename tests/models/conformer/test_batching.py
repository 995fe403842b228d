"""A padded batch equals its rows run one at a time: encoder frames within 1e-5 and CTC
greedy tokens identical, at full context and under chunk masks."""

from __future__ import annotations

import pytest
import torch

from oasr.audio.frontends import build_frontend
from oasr.models.conformer import ConformerEncoderConfig, ConformerModelConfig
from oasr.models.conformer.model import ConformerModel
from tests.conftest import AUDIO_DIR
from tests.models.conformer._wenet_format import randomize

CLIPS = (
    "sense_and_sensibility_01_austen_64kb-0870.wav",
    "sense_and_sensibility_01_austen_64kb-0880.wav",
    "sense_and_sensibility_01_austen_64kb-0890.wav",
)


def _check_batch_equals_single(model, feats, lens, **kw):
    from oasr.engine.decode.ctc import ctc_greedy_search

    enc, enc_lens = model.encode_offline(feats, lens, **kw)
    log_probs = model.ctc_log_probs(enc)
    assert not torch.isnan(enc).any()
    for i in range(feats.shape[0]):
        n = int(lens[i])
        one, one_lens = model.encode_offline(feats[i : i + 1, :n], lens[i : i + 1], **kw)
        t = int(one_lens[0])
        assert int(enc_lens[i]) == t == one.shape[1]
        assert (enc[i, :t] - one[0]).abs().max() <= 1e-5
        single = ctc_greedy_search(model.ctc_log_probs(one)[0], model.blank_id).tokens
        assert ctc_greedy_search(log_probs[i, :t], model.blank_id).tokens == single
    return enc_lens


@pytest.mark.parametrize("chunk", [-1, 6])
@torch.no_grad()
def test_fixture_batch_equals_one_at_a_time(chunk, loaded32):
    from oasr.audio import load_audio

    paths = [AUDIO_DIR / c for c in CLIPS]
    if not all(p.is_file() for p in paths):
        pytest.skip("shared clips not found")
    frontend = build_frontend(loaded32.feature_spec)
    feats, lens = frontend.compute_batch([load_audio(p) for p in paths])
    assert len(set(lens.tolist())) == 3
    enc_lens = _check_batch_equals_single(loaded32.model, feats, lens, decoding_chunk_size=chunk)
    assert enc_lens.tolist() == [((int(n) - 1) // 2 - 1) // 2 for n in lens]


@pytest.mark.parametrize("causal", [False, True])
@torch.no_grad()
def test_random_model_batch_with_left_limited_chunks(causal):
    """Left-limited chunks leave padded query frames with no key at all; their outputs
    must stay finite so nothing leaks into the valid frames."""
    torch.manual_seed(3)
    enc = ConformerEncoderConfig(
        input_dim=40,
        output_size=16,
        attention_heads=2,
        linear_units=24,
        num_blocks=2,
        cnn_module_kernel=5,
        causal=causal,
        use_dynamic_chunk=True,
    )
    model = ConformerModel(ConformerModelConfig(encoder=enc, vocab_size=21)).eval()
    randomize(model, 3)
    feats = torch.randn(3, 150, 40)
    lens = torch.tensor([150, 61, 23])
    for chunk, left in ((-1, -1), (2, 1), (4, 0)):
        _check_batch_equals_single(model, feats, lens, decoding_chunk_size=chunk, num_decoding_left_chunks=left)


@torch.no_grad()
def test_inputs_too_short_to_subsample_give_empty_rows():
    torch.manual_seed(0)
    enc = ConformerEncoderConfig(input_dim=40, output_size=16, attention_heads=2, linear_units=24, num_blocks=1)
    model = ConformerModel(ConformerModelConfig(encoder=enc, vocab_size=21)).eval()
    log_probs, lens = model.forward_offline(torch.randn(2, 5, 40), torch.tensor([5, 3]))
    assert lens.tolist() == [0, 0] and log_probs.shape[1] >= 1 and not torch.isnan(log_probs).any()
    log_probs, lens = model.forward_offline(torch.randn(2, 7, 40), torch.tensor([7, 2]))
    assert lens.tolist() == [1, 0] and not torch.isnan(log_probs).any()
