"""Random tiny WeNet configurations written in WeNet's format (torch.save of its state-dict
names, train.yaml, units.txt, global_cmvn) and read back through the converter: the
loaded model must be the saved one."""

from __future__ import annotations

import warnings

import pytest
import torch

import oasr
from oasr.models.base import PAD_LOGIT, DecodeType, align_out_features
from oasr.models.conformer import ConformerEncoderConfig, ConformerModelConfig
from oasr.models.conformer.model import ConformerModel
from oasr.models.decoders.transformer_decoder import TransformerDecoderConfig
from tests.models.conformer._wenet_format import randomize, save_wenet_experiment

V = 37  # unaligned on purpose: the heads are widened on load

VARIANTS = {
    # 1/6 subsampling, causal batch-norm conv module, relu, plain transformer decoder,
    # kaldi-text CMVN that only the file holds.
    "conv2d6_causal_transformer_kaldi_cmvn": dict(
        encoder=dict(
            input_dim=80,
            input_layer="conv2d6",
            causal=True,
            cnn_module_kernel=5,
            cnn_module_norm="batch_norm",
            activation="relu",
            use_dynamic_chunk=True,
        ),
        decoder=dict(bidirectional=False, num_blocks=2),
        decoder_type="transformer",
        cmvn="kaldi",
        cmvn_in_checkpoint=False,
        tie=False,
    ),
    # 1/8 subsampling, post-norm blocks without macaron, layer-norm conv module,
    # bidirectional decoder with tied output layers, JSON CMVN stored in the weights.
    "conv2d8_postnorm_bitransformer_tied": dict(
        encoder=dict(
            input_dim=40,
            input_layer="conv2d8",
            normalize_before=False,
            macaron_style=False,
            cnn_module_kernel=3,
            cnn_module_norm="layer_norm",
        ),
        decoder=dict(bidirectional=True, num_blocks=1, r_num_blocks=2, reverse_weight=0.4),
        decoder_type="bitransformer",
        cmvn="json",
        cmvn_in_checkpoint=True,
        tie=True,
    ),
}


def _model(variant: dict, seed: int) -> ConformerModel:
    torch.manual_seed(seed)
    enc = ConformerEncoderConfig(output_size=16, attention_heads=2, linear_units=24, num_blocks=2, **variant["encoder"])
    dec = TransformerDecoderConfig(vocab_size=V, d_model=16, attention_heads=2, linear_units=24, **variant["decoder"])
    model = ConformerModel(ConformerModelConfig(encoder=enc, vocab_size=V, decoder=dec)).eval()
    randomize(model, seed)
    if variant["tie"]:
        with torch.no_grad():
            for side in (model.decoder.left_decoder, model.decoder.right_decoder):
                side.output_layer.weight[:V] = side.embed[0].weight
    return model


@pytest.mark.parametrize("name", sorted(VARIANTS))
@torch.no_grad()
def test_wenet_directory_round_trips(name, tmp_path):
    variant = VARIANTS[name]
    original = _model(variant, seed=len(name))
    path = save_wenet_experiment(
        original,
        tmp_path / name,
        decoder_type=variant["decoder_type"],
        cmvn=variant["cmvn"],
        cmvn_in_checkpoint=variant["cmvn_in_checkpoint"],
        tie=variant["tie"],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing dropped or guessed
        loaded = oasr.load_pretrained(path)
    model = loaded.model
    assert loaded.architecture == "conformer" and loaded.report.ok
    assert model.config == original.config
    assert model.capabilities == frozenset({DecodeType.CTC, DecodeType.CTC_AED_RESCORING})
    assert loaded.feature_spec.params["num_mel_bins"] == variant["encoder"]["input_dim"]
    assert loaded.tokenizer.decode([2, 3, V - 1]) == "u2u3<sos/eos>"

    # Every tensor made it to its place (CMVN from the file is its float32 derivation).
    theirs = model.state_dict()
    for key, t in original.state_dict().items():
        tol = 1e-6 if "global_cmvn" in key else 0.0
        if key.startswith("ctc.") or ".output_layer." in key:
            # widened heads: the real rows, then padding that can never win
            assert theirs[key].shape[0] == align_out_features(V)
            torch.testing.assert_close(theirs[key][:V], t[:V], atol=0, rtol=0, msg=key)
            pad = theirs[key][V:]
            assert torch.all(pad == (PAD_LOGIT if key.endswith("bias") else 0.0)), key
            continue
        torch.testing.assert_close(theirs[key], t, atol=tol, rtol=tol, msg=key)

    feats = torch.randn(2, 97, variant["encoder"]["input_dim"])
    lens = torch.tensor([97, 70])
    for chunk in (-1, 4):
        a, la = original.forward_offline(feats, lens, decoding_chunk_size=chunk)
        b, lb = model.forward_offline(feats, lens, decoding_chunk_size=chunk)
        assert torch.equal(la, lb)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    enc, enc_lens = model.encode_offline(feats[:1], lens[:1])
    hyps = [[5, 6, 7], [], [V - 2]]
    rw = original.config.decoder.reverse_weight
    torch.testing.assert_close(
        model.decoder.score_hypotheses(enc, int(enc_lens[0]), hyps, rw),
        original.decoder.score_hypotheses(enc, int(enc_lens[0]), hyps, rw),
        atol=1e-5,
        rtol=0,
    )
