"""The WeNet U2++ fixture reproduced: kaldi fbank, encoder output and CTC log-probs
against WeNet's own tensors, and the three decodes token for token."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.audio.fbank import KaldiFbank
from oasr.audio.frontends import build_frontend
from oasr.models.base import DecodeType

# reference.npz was produced with WeNet's decoding_chunk_size=6; expected.json is full context.
REFERENCE_CHUNK = 6


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_bundle_declares_wenet_specs(loaded64):
    assert loaded64.architecture == "conformer"
    assert loaded64.format == "wenet"
    assert loaded64.report.ok
    model = loaded64.model
    assert model.capabilities == frozenset({DecodeType.CTC, DecodeType.CTC_AED_RESCORING})
    assert model.default_decode_type == DecodeType.CTC
    assert model.encoder.streaming_kind == "paged"  # dynamic-chunk training: WeNet decodes it chunk by chunk
    assert model.encoder.conv_cache_shape is None  # a non-causal conv module keeps no tail
    assert model.blank_id == 0 and model.encoder.subsampling_rate == 4
    assert model.decoder.sos == model.decoder.eos == 63
    assert loaded64.tokenizer_spec.kind == "table"
    assert loaded64.tokenizer_spec.special_ids == (0, 63)
    assert loaded64.feature_spec.kind == "kaldi_fbank"
    assert dict(loaded64.decoding_spec.params) == {"ctc_weight": 0.3, "reverse_weight": 0.3}


def test_fbank_matches_wenet(loaded64, waveform, reference):
    frontend = build_frontend(loaded64.feature_spec)
    assert isinstance(frontend, KaldiFbank)
    ref = reference["fbank"].astype(np.float64)
    for dtype in (torch.float64, torch.float32):
        feats = frontend.compute(waveform, dtype=dtype).double().numpy()
        assert feats.shape == ref.shape
        diff = np.abs(feats - ref)
        assert diff.max() <= 1e-3, (dtype, diff.max())
        assert np.median(diff) <= 1e-5, (dtype, np.median(diff))
    assert frontend(waveform).dtype == torch.float32
    assert frontend.frame_shift_s == pytest.approx(0.01)


@torch.no_grad()
def test_encoder_and_ctc_match_wenet(loaded64, reference):
    model = loaded64.model
    feats = torch.from_numpy(reference["fbank"]).double()[None]
    enc, lens = model.encode_offline(feats, torch.tensor([feats.shape[1]]), decoding_chunk_size=REFERENCE_CHUNK)
    log_probs = model.ctc_log_probs(enc)
    assert int(lens[0]) == reference["encoder_out"].shape[0] == enc.shape[1]
    enc_np, lp_np = enc[0].numpy(), log_probs[0].double().numpy()
    assert np.abs(enc_np - reference["encoder_out"]).max() <= 1e-4
    assert np.abs(lp_np - reference["ctc_log_probs"]).max() <= 1e-4
    assert _cosine(enc_np, reference["encoder_out"]) > 0.999999
    # The chunk mask matters: full context is measurably different on this model.
    full, _ = model.encode_offline(feats, torch.tensor([feats.shape[1]]))
    assert (full - enc).abs().max() > 1e-2


@pytest.mark.parametrize("precision", ["float32", "float64"])
@torch.no_grad()
def test_decodes_match_wenet(precision, request, waveform, expected):
    from oasr.engine.decode.ctc import attention_rescoring, ctc_greedy_search, ctc_prefix_beam_search

    loaded = request.getfixturevalue("loaded32" if precision == "float32" else "loaded64")
    model, tok = loaded.model, loaded.tokenizer
    feats = build_frontend(loaded.feature_spec)(waveform)[None]
    enc, lens = model.encode_offline(feats, torch.tensor([feats.shape[1]]))  # full context, as expected.json
    log_probs = model.ctc_log_probs(enc)[0]
    blank = model.blank_id
    skip = tuple(i for i in loaded.tokenizer_spec.special_ids if i != blank)
    greedy = ctc_greedy_search(log_probs, blank, skip)
    nbest = ctc_prefix_beam_search(log_probs, 4, blank, skip)
    rescored = attention_rescoring(model.decoder, enc, int(lens[0]), nbest, 0.3, 0.3)
    got = {
        "ctc_greedy_search": list(greedy.tokens),
        "ctc_prefix_beam_search": list(nbest[0].tokens),
        "attention_rescoring": list(rescored.tokens),
    }
    for method, tokens in got.items():
        assert tokens == expected[method], method
        assert tok.decode(tokens) == expected["text"][method], method
    # forward_offline is the same encoder + head
    lp2, lens2 = model.forward_offline(feats, torch.tensor([feats.shape[1]]))
    assert torch.equal(lp2[0], log_probs) and int(lens2[0]) == int(lens[0])
