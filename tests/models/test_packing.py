"""Sequence packing (``forward_offline_packed``): every architecture that declares it
gives each packed row what the padded batch gives that row, frame for frame, and the
others refuse with a clear error."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from oasr.models.conformer import ConformerEncoderConfig, ConformerModelConfig
from oasr.models.conformer.model import ConformerModel
from oasr.models.ctc import CtcMixin
from oasr.models.registry import get_model_info, list_models
from tests.models.tiny_configs import TINY_CONFIGS

PACKING = {"conformer", "lasr", "parakeet", "parakeet_hybrid", "wav2vec2", "mms", "wavlm"}
LENGTHS = [37, 5, 120, 64, 2]  # the 5- and 2-frame rows subsample to 0 frames in WeNet and LASR


def _randomized(model):
    """Weights and norm statistics far from their inits, so a leak between rows shows."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.2)
        for name, b in model.named_buffers():
            if name.endswith("running_var"):
                b.uniform_(0.5, 2.0)
            elif name.endswith("running_mean"):
                b.normal_(std=0.3)
    return model.eval()


def _n_mels(model) -> int:
    enc = model.encoder
    cfg = getattr(enc, "cfg", None) or enc.config
    return getattr(cfg, "input_dim", None) or cfg.num_mel_bins


def _compare(model, lengths=LENGTHS, **kw):
    torch.manual_seed(2)
    feats = torch.randn(len(lengths), max(lengths), _n_mels(model))
    lens = torch.tensor(lengths)
    packed = torch.cat([feats[i, :n] for i, n in enumerate(lengths)])
    cu = F.pad(lens.cumsum(0), (1, 0))
    with torch.no_grad():
        if kw:
            hidden, out_lens = model.encode_offline(feats, lens, **kw)
            packed_hidden, out_cu = model.encoder.forward_packed(packed, cu, **kw)
        else:
            hidden, out_lens = model.encode_offline(feats, lens)
            packed_hidden, out_cu = model.encode_offline_packed(packed, cu)
            log_probs, _ = model.forward_offline(feats, lens)
            packed_log_probs, log_prob_cu = model.forward_offline_packed(packed, cu)
            assert torch.equal(log_prob_cu, out_cu)
    assert out_cu.diff().tolist() == out_lens.tolist()
    worst = 0.0
    for i, (a, b) in enumerate(zip(packed_hidden.split(out_cu.diff().tolist()), hidden)):
        n = int(out_lens[i])
        assert torch.isfinite(a).all()
        worst = max(worst, (a - b[:n]).abs().max().item() if n else 0.0)
        if not kw and n:
            lp = packed_log_probs[int(out_cu[i]) : int(out_cu[i + 1])]
            torch.testing.assert_close(lp, log_probs[i, :n], atol=1e-4, rtol=0)
            assert torch.equal(lp.argmax(-1), log_probs[i, :n].argmax(-1))
    assert worst <= 1e-5, worst
    return out_lens


@pytest.mark.parametrize("name", sorted(PACKING))
def test_packed_rows_equal_the_padded_batch(name):
    model = _randomized(get_model_info(name).model_class().from_config(TINY_CONFIGS[name]()))
    assert model.supports_packing
    out_lens = _compare(model)
    assert len(set(out_lens.tolist())) >= 3  # really unequal rows


@pytest.mark.parametrize(
    "encoder,chunks",
    [
        (dict(causal=True, use_dynamic_chunk=True), (-1, 4)),  # WeNet's causal conv pads the module's input
        (dict(cnn_module_norm="layer_norm", normalize_before=False), (-1,)),
        (dict(use_dynamic_chunk=True), (3,)),
    ],
)
def test_wenet_variants_pack(encoder, chunks):
    cfg = ConformerEncoderConfig(
        input_dim=80, output_size=16, attention_heads=2, linear_units=32, num_blocks=2, cnn_module_kernel=7, **encoder
    )
    model = _randomized(ConformerModel(ConformerModelConfig(encoder=cfg, vocab_size=45)))
    for chunk in chunks:
        _compare(model, decoding_chunk_size=chunk, num_decoding_left_chunks=1 if chunk > 0 else -1)


@pytest.mark.parametrize("name", sorted(PACKING))
def test_rows_without_an_output_frame(name):
    model = _randomized(get_model_info(name).model_class().from_config(TINY_CONFIGS[name]()))
    n = _n_mels(model)
    with torch.no_grad():
        log_probs, cu = model.forward_offline_packed(torch.randn(3, n), torch.tensor([0, 2, 3]))
    assert log_probs.shape[0] == int(cu[-1]) and log_probs.shape[1] == model.vocab_size
    with pytest.raises(ValueError, match=r"\(N, F\)"):
        model.forward_offline_packed(torch.randn(1, 3, n), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="holds 4"):
        model.forward_offline_packed(torch.randn(3, n), torch.tensor([0, 4]))


def test_which_architectures_pack():
    for name in list_models():
        model = get_model_info(name).model_class().from_config(TINY_CONFIGS[name]())
        assert model.supports_packing == (name in PACKING), name
        if name not in PACKING and isinstance(model, CtcMixin):  # a CTC family whose encoder does not pack
            with pytest.raises(NotImplementedError, match="sequence packing"):
                model.forward_offline_packed(torch.zeros(4, 80), torch.tensor([0, 4]))
        elif name not in PACKING:  # no CTC head: the packed forward is not part of its contract
            assert not hasattr(model, "forward_offline_packed"), name
