"""ParakeetFrontend against transformers' ``ParakeetFeatureExtractor`` on real clips."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.audio.frontends import build_frontend
from oasr.models.base import FeatureSpec
from oasr.models.parakeet.features import ParakeetFrontend
from tests.models.parakeet.conftest import hf_features

transformers = pytest.importorskip("transformers")


class _Float32Is64:
    """A module stand-in whose ``float32`` is float64 (everything else forwarded)."""

    def __init__(self, module, float64):
        self._module = module
        self.float32 = float64

    def __getattr__(self, name):
        return getattr(self._module, name)


def float64_reference(waveforms, monkeypatch) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ParakeetFeatureExtractor run in float64 end to end.

    Its code casts the waveform to float32 twice (its own ``.to(torch.float32)`` and the
    sequence padder's float64 -> float32), builds its window in the default dtype and its
    mel bank in float32. Here those casts become float64, the default dtype is float64 for
    the call, and the bank is transformers' own ``mel_filter_bank`` in float64: the same
    code path, without the float32 rounding.
    """
    import transformers.feature_extraction_sequence_utils as seq_utils
    import transformers.models.parakeet.feature_extraction_parakeet as fe_module
    from transformers import ParakeetFeatureExtractor
    from transformers.audio_utils import mel_filter_bank

    extractor = ParakeetFeatureExtractor()
    bank = mel_filter_bank(
        num_frequency_bins=extractor.n_fft // 2 + 1,
        num_mel_filters=extractor.feature_size,
        min_frequency=0.0,
        max_frequency=extractor.sampling_rate / 2,
        sampling_rate=extractor.sampling_rate,
        norm="slaney",
        mel_scale="slaney",
        dtype=np.float64,
    )
    extractor.mel_filters = torch.from_numpy(np.ascontiguousarray(bank.T))
    monkeypatch.setattr(fe_module, "torch", _Float32Is64(torch, torch.float64))
    monkeypatch.setattr(seq_utils, "np", _Float32Is64(np, np.float64))
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = extractor([w.astype(np.float64) for w in waveforms], sampling_rate=16000, return_tensors="pt")
    finally:
        torch.set_default_dtype(before)
    assert out.input_features.dtype == torch.float64
    return out.input_features, out.attention_mask.sum(-1)


def test_float64_path_matches_the_extractor_in_float64(waveforms, monkeypatch):
    ref, ref_lens = float64_reference(waveforms, monkeypatch)
    ours, lens = ParakeetFrontend(dtype=torch.float64).compute_batch(waveforms)
    assert ours.dtype == torch.float64
    assert torch.equal(lens, ref_lens)
    # transformers pads one STFT frame more (masked); everything past a row's count is zero.
    assert ref.shape[1] == ours.shape[1] + 1 and not ref[:, ours.shape[1] :].any()
    err = (ours - ref[:, : ours.shape[1]]).abs().max()
    assert err <= 1e-6, float(err)


def test_float32_path_matches_the_extractor(waveforms):
    from transformers import ParakeetFeatureExtractor

    frontend = ParakeetFrontend()
    ref, mask = hf_features(ParakeetFeatureExtractor(), waveforms)
    for row, wav in enumerate(waveforms):
        ours = frontend(wav)
        n = int(mask[row].sum())
        assert ours.dtype == torch.float32 and ours.shape == (n, 80)  # the same frame count
        err = (ours - ref[row, :n]).abs().max()
        assert err <= 2e-3, (row, float(err))


def test_batch_equals_one_at_a_time(waveforms):
    frontend = ParakeetFrontend(dtype=torch.float64)
    feats, lens = frontend.compute_batch(waveforms)
    for row, wav in enumerate(waveforms):
        alone = frontend(wav)
        assert alone.shape[0] == int(lens[row]) == len(wav) // 160
        torch.testing.assert_close(feats[row, : len(alone)], alone, rtol=0, atol=1e-12)
        assert not feats[row, len(alone) :].any()


def test_settings_come_from_the_spec(waveforms):
    from transformers import ParakeetFeatureExtractor

    params = dict(feature_size=64, hop_length=128, n_fft=400, win_length=320, preemphasis=0.9)
    frontend = build_frontend(FeatureSpec("parakeet_mel", 16000, params))
    assert isinstance(frontend, ParakeetFrontend)
    assert (frontend.n_features, frontend.frame_shift_s) == (64, 128 / 16000)
    ref, mask = hf_features(ParakeetFeatureExtractor(**params), waveforms[2:3])
    ours = frontend(waveforms[2])
    assert ours.shape == (int(mask.sum()), 64)
    assert (ours - ref[0, : ours.shape[0]]).abs().max() <= 2e-3


def test_bad_specs_are_refused():
    with pytest.raises(ValueError, match="unknown feature param"):
        ParakeetFrontend.from_spec(FeatureSpec("parakeet_mel", 16000, {"dither": 1e-5}))
    with pytest.raises(ValueError, match="parakeet_mel"):
        ParakeetFrontend.from_spec(FeatureSpec("kaldi_fbank"))
    with pytest.raises(ValueError, match="win_length"):
        ParakeetFrontend(n_fft=256, win_length=400)


def test_short_and_empty_input():
    frontend = ParakeetFrontend()
    assert frontend(np.zeros(0, np.float32)).shape == (0, 80)
    assert frontend(np.zeros(100, np.float32)).shape == (0, 80)  # under one hop: no valid frame
    one = frontend(np.random.default_rng(0).standard_normal(200).astype(np.float32))
    assert one.shape == (1, 80) and torch.isfinite(one).all()
