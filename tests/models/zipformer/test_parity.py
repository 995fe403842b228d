"""oasr's Zipformer CTC against icefall's own modules (the ``zipformer`` package) on the same
saved checkpoint, in float64: the embed, every stack, the encoder output and the CTC
log-probs (max-abs and cosine), greedy CTC tokens against the package's ``ctc_greedy_search``;
oasr runs the clips as one padded batch, icefall one at a time."""

from __future__ import annotations

import pytest
import torch

import oasr
from tests.models.zipformer.conftest import _ENCODED, icefall_input, pad, parity

COSINE = 0.99999
MAX_ABS = 1e-9


@pytest.fixture(scope="module")
def ours(reference):
    loaded = oasr.load_pretrained(reference.path)
    assert loaded.model.architecture == "zipformer"
    return loaded


@pytest.fixture(scope="module")
def ref_out(reference, features):
    """Per clip, alone: embed, each stack's output (B, T, C), encoder output, CTC log-probs."""
    model = reference.model
    outs = []
    for f in (icefall_input(f, reference.causal) for f in features):
        stacks: list[torch.Tensor] = []
        hooks = [
            s.register_forward_hook(lambda _m, _i, out, acc=stacks: acc.append(out.permute(1, 0, 2)))
            for s in model.encoder.encoders
        ]
        lens = torch.tensor([f.shape[0]])
        with torch.no_grad():
            embed, _ = model.encoder_embed(f[None], lens)
            enc, enc_lens = model.forward_encoder(f[None], lens)
            log_probs = model.ctc_output(enc)
        for h in hooks:
            h.remove()
        outs.append(
            dict(embed=embed[0], stacks=[s[0] for s in stacks], enc=enc[0], enc_lens=enc_lens, log_probs=log_probs[0])
        )
    # The transducer tests reuse icefall's encoder outputs.
    _ENCODED.setdefault(reference.causal, [(o["enc"][None], o["enc_lens"]) for o in outs])
    return outs


@pytest.fixture(scope="module")
def ours_out(ours, features):
    """The clips as one zero-padded batch through oasr, float64."""
    model = ours.model.double()
    feats, lens = pad(features)
    with torch.no_grad():
        embed, embed_lens = model.encoder.embed(*model.encoder.pad_tail(feats, lens))
        enc, enc_lens, stacks = model.encoder.forward_stacks(embed, embed_lens)
        log_probs = model.ctc_output.logits(enc).log_softmax(-1)
        fused, fused_lens = model.forward_offline(feats, lens)
    model.float()
    return dict(
        embed=embed,
        embed_lens=embed_lens,
        stacks=stacks,
        enc=enc,
        enc_lens=enc_lens,
        log_probs=log_probs,
        fused=fused,
        fused_lens=fused_lens,
    )


def _check(name: str, ours: torch.Tensor, ref: torch.Tensor) -> None:
    max_abs, cos = parity(ours, ref)
    assert max_abs < MAX_ABS and cos >= COSINE, f"{name}: max-abs {max_abs:.3g}, cosine {cos:.12f}"


def test_lengths(ref_out, ours_out):
    assert ours_out["enc_lens"].tolist() == [r["enc"].shape[0] for r in ref_out]
    assert ours_out["embed_lens"].tolist() == [r["embed"].shape[0] for r in ref_out]
    assert torch.equal(ours_out["fused_lens"], ours_out["enc_lens"])


def test_embed_matches(ref_out, ours_out):
    for i, r in enumerate(ref_out):
        n = r["embed"].shape[0]
        _check(f"embed[{i}]", ours_out["embed"][i, :n], r["embed"])


def test_each_stack_matches(ref_out, ours_out):
    for i, r in enumerate(ref_out):
        n = r["embed"].shape[0]
        assert len(r["stacks"]) == len(ours_out["stacks"]) == 3
        for s, (ours_s, ref_s) in enumerate(zip(ours_out["stacks"], r["stacks"])):
            _check(f"clip {i} stack {s}", ours_s[i, :n], ref_s)


def test_encoder_output_and_ctc_log_probs_match(ref_out, ours_out):
    for i, r in enumerate(ref_out):
        n = r["enc"].shape[0]
        _check(f"encoder[{i}]", ours_out["enc"][i, :n], r["enc"])
        _check(f"ctc log-probs[{i}]", ours_out["log_probs"][i, :n], r["log_probs"])
        # The fused forward computes the log-softmax in float32.
        max_abs, cos = parity(ours_out["fused"][i, :n], r["log_probs"])
        assert max_abs < 1e-4 and cos >= COSINE, (max_abs, cos)


def test_ctc_greedy_matches_icefall(ref_out, ours_out, reference):
    from zipformer.decode.search import ctc_greedy_search

    ref_tokens = [ctc_greedy_search(r["log_probs"][None], torch.tensor([r["log_probs"].shape[0]]))[0] for r in ref_out]
    ours_tokens = ctc_greedy_search(ours_out["fused"], ours_out["fused_lens"])
    assert ours_tokens == ref_tokens
    assert sum(len(t) for t in ref_tokens) >= 5, f"sharpened heads should emit tokens: {ref_tokens}"


def test_batch_equals_each_alone(ours, features, ours_out):
    model = ours.model.double()
    try:
        for i, f in enumerate(features):
            with torch.no_grad():
                enc, lens = model.encode_offline(f[None], torch.tensor([f.shape[0]]))
            n = int(lens[0])
            assert n == int(ours_out["enc_lens"][i])
            _check(f"alone[{i}]", ours_out["enc"][i, :n], enc[0])
    finally:
        model.float()


def test_contract(ours, reference):
    model = ours.model
    assert model.blank_id == 0 and model.encoder.subsampling_rate == 4
    # A causal release streams through the slot runtime (tests/streaming); a full-context one cannot.
    assert model.encoder.streaming_kind == ("slot" if reference.causal else "none")
    assert (model.cache_spec is None) is not reference.causal
    assert model.config.encoder.causal is reference.causal
    if reference.causal:
        assert (model.config.encoder.chunk_size, model.config.encoder.left_context_frames) == (16, 128)
    assert ours.feature_spec.kind == "kaldi_fbank" and ours.feature_spec.params["snip_edges"] is False
    from oasr.models.interfaces import validate_capabilities

    validate_capabilities(model)
