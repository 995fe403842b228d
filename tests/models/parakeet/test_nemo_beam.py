"""NeMo's transducer beam searches, held token for token to NeMo's own decoding classes.

The tiny RNN-T, TDT and hybrid TDT + CTC archives of ``nemo_reference`` (NeMo's classes, NeMo's
``save_to``) are loaded through oasr's loader; NeMo's decoding (``change_decoding_strategy`` with
the strategy and its ``beam`` section, then the decoding object ``transcribe()`` runs) and oasr's
``transducer_search`` search the same encoder output in float64: a batch of rows of different
lengths (NeMo's encoder over noise, and random frames that drive many labels per frame, so that
the labels-per-frame bound forces blanks). Then the archive's ``decoding`` section as the
default through ``ASREngine`` against NeMo's ``transcribe()``. Skipped where ``nemo-toolkit`` is
not installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

KINDS = ("rnnt", "tdt", "hybrid_tdt_ctc")
SEEDS = {"rnnt": 0, "tdt": 0, "hybrid_tdt_ctc": 1}  # the hybrid's transducer other than the TDT's


def _nemo():
    return pytest.importorskip(
        "nemo.collections.asr", reason="nemo-toolkit is not installed (the reference of the beam parity tests)"
    )


@pytest.fixture(scope="module")
def transducers(tmp_path_factory):
    """kind -> (.nemo path, NeMo model in float64, eval, oasr's model in float64)."""
    _nemo()
    import logging

    from oasr.models.loaders import load_pretrained
    from tests.models.parakeet import nemo_reference

    logging.getLogger("nemo_logger").setLevel(logging.ERROR)
    root = tmp_path_factory.mktemp("nemo_beam")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in KINDS:
            path, ref = nemo_reference.build(kind, root, seed=SEEDS[kind])
            out[kind] = (path, ref.double().eval(), load_pretrained(path).model.double())
    return out


def _encoder_batch(ref, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """NeMo's encoder over noise clips of different lengths in one batch: (B, D, T), (B,)."""
    g = np.random.default_rng(seed)
    waves = [0.1 * g.standard_normal(n) for n in (7000, 21000, 36000, 12500)]
    x = torch.zeros(len(waves), max(len(w) for w in waves), dtype=torch.float64)
    for i, w in enumerate(waves):
        x[i, : len(w)] = torch.from_numpy(w)
    with torch.no_grad():
        feats, n = ref.preprocessor(input_signal=x, length=torch.tensor([len(w) for w in waves]))
        return ref.encoder(audio_signal=feats, length=n)


def _random_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random encoder frames (B, D, T): many labels per frame, the labels-per-frame bound reached."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 32, 30, generator=g, dtype=torch.float64), torch.tensor([30, 9, 22, 1])


def nemo_search(ref, kind: str, strategy: str, enc, lens, **beam) -> list[list[int]]:
    """NeMo's decoding of ``strategy`` with the ``beam`` section ``beam`` over encoder output (B, D, T)."""
    from omegaconf import open_dict

    cfg = copy.deepcopy(ref.cfg.decoding)
    with open_dict(cfg):
        cfg.strategy = strategy
        cfg.beam = beam
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "hybrid_tdt_ctc":
            ref.change_decoding_strategy(cfg, decoder_type="rnnt", verbose=False)
        else:
            ref.change_decoding_strategy(cfg, verbose=False)
        with torch.no_grad():
            hyps = ref.decoding.rnnt_decoder_predictions_tensor(
                encoder_output=enc, encoded_lengths=lens, return_hypotheses=True
            )
    return [[int(t) for t in h.y_sequence] for h in hyps]


def oasr_search(model, search: str, enc, lens, beam_size: int, **params) -> list[list[int]]:
    res = model.transducer_search(
        enc.transpose(1, 2),
        lens,
        search=search,
        beam_size=beam_size,
        max_sym_per_frame=None,
        blank_penalty=0.0,
        params=params,
    )
    return [list(t) for t in res.tokens]


@pytest.mark.parametrize("kind", KINDS)
def test_malsd_tokens_equal_nemos_malsd_batch(transducers, kind):
    _, ref, model = transducers[kind]
    emitted = 0
    for enc, lens in (_encoder_batch(ref, 0), _random_batch(1)):
        for beam in (2, 4):
            want = nemo_search(ref, kind, "malsd_batch", enc, lens, beam_size=beam)
            assert oasr_search(model, "malsd", enc, lens, beam) == want, (kind, beam)
            emitted += sum(map(len, want))
    # NeMo's other switches: no length normalisation, a tighter labels-per-frame bound.
    enc, lens = _random_batch(2)
    want = nemo_search(ref, kind, "malsd_batch", enc, lens, beam_size=3, score_norm=False, max_symbols=2)
    assert oasr_search(model, "malsd", enc, lens, 3, score_norm=False, max_symbols=2) == want, kind
    assert emitted > 40, "the comparison is vacuous without labels"
