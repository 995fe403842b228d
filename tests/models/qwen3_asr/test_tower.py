"""The windowed audio tower: attention windows against transformers' ``Qwen3ASREncoder``
(its ``cu_seqlens`` windows are the block-diagonal mask), the dense single-window path, and
rows that do not depend on what they are batched with."""

from __future__ import annotations

import pytest
import torch

import oasr.models.qwen3_asr.model as qmodel
import oasr.models.whisper.model as wmodel  # the tower's layers are Whisper's (WhisperEncoderLayer)
from oasr.models.qwen3_asr import Qwen3AsrAudioConfig
from oasr.models.qwen3_asr.model import Qwen3AsrAudioEncoder, WindowLayout
from tests.models.qwen3_asr.conftest import TINY_AUDIO, hf_features, parity, randomize_


def _towers(n_window_infer: int):
    """A random transformers encoder and oasr's tower holding the same weights (float64)."""
    from transformers import Qwen3ASREncoder, Qwen3ASREncoderConfig

    audio = {**TINY_AUDIO, "n_window_infer": n_window_infer}
    hf = Qwen3ASREncoder(Qwen3ASREncoderConfig(**audio)).eval()
    randomize_(hf, seed=1)
    ours = Qwen3AsrAudioEncoder(Qwen3AsrAudioConfig(**audio)).eval()
    result = ours.load_state_dict(hf.state_dict(), strict=False)
    assert sorted(result.missing_keys) == ["proj1.bias", "proj1.weight", "proj2.bias", "proj2.weight"]
    assert result.unexpected_keys == []
    return hf.double(), ours.double()


@pytest.fixture(scope="module")
def long_and_short(manifest):
    """jfk (11 s: 143 encoder frames, two 104-frame windows) and a 2.9-s clip (37 frames)."""
    from oasr.audio import load_audio

    by_name = {row["audio"]: row["path"] for row in manifest}
    return [load_audio(by_name["jfk.wav"]), load_audio(by_name["speechbrain_spk1_snt1.wav"])]


@pytest.mark.parametrize("n_window_infer", [800, 200])  # windows of 104 (the releases) and 26 encoder frames
def test_several_windows_match_the_reference(reference, long_and_short, n_window_infer):
    hf, ours = _towers(n_window_infer)
    x, mask = hf_features(reference.feature_extractor, long_and_short)
    x = x.double()
    with torch.no_grad():
        ref = hf(input_features=x, input_features_mask=mask).last_hidden_state  # (N_total, D)
        states, n = ours(x, mask.sum(1), project=False)
    assert n.tolist() == [143, 37]
    layout = ours.layout(n)
    assert not layout.dense and layout.n_windows == -(-143 // ours.cfg.window_tokens) + -(-37 // ours.cfg.window_tokens)
    valid = torch.arange(states.shape[1])[None, :] < n[:, None]
    cos, err = parity(states[valid], ref)
    assert cos >= 0.99999 and err <= 1e-4, (cos, err)
    # Windowing is not a no-op: the same frames under one dense block differ.
    dense = WindowLayout.build(n, window=10**6)
    with torch.no_grad():
        x_emb, _ = ours.embed(x.transpose(1, 2), mask.sum(1))
        w = dense.pack(x_emb)
        for layer in ours.layers:
            w = layer(w, dense.key_lengths)
        unwindowed = dense.unpack(ours.ln_post(w), 2, x_emb.shape[1])
    assert parity(unwindowed[valid], ref)[1] > 1e-3


def test_a_single_window_is_one_dense_block(reference, long_and_short, monkeypatch):
    hf, ours = _towers(800)
    short = long_and_short[1:]
    x, mask = hf_features(reference.feature_extractor, short)
    calls = []
    real = wmodel.attention

    def spy(q, k, v, **kw):
        calls.append((tuple(q.shape), kw.get("key_lengths"), kw.get("mask")))
        return real(q, k, v, **kw)

    monkeypatch.setattr(wmodel, "attention", spy)
    with torch.no_grad():
        states, n = ours(x.double(), mask.sum(1), project=False)
        ref = hf(input_features=x.double(), input_features_mask=mask).last_hidden_state
    assert ours.layout(n).dense
    assert calls and all(shape[0] == 1 and shape[2] == int(n[0]) and kl is None and m is None for shape, kl, m in calls)
    cos, err = parity(states[0, : int(n[0])], ref)
    assert cos >= 0.99999 and err <= 1e-4


def test_window_layout():
    single = WindowLayout.build(torch.tensor([20]), window=26)
    assert single.dense and single.n_windows == 1 and single.key_lengths is None and single.width == 20
    ragged = WindowLayout.build(torch.tensor([20, 7]), window=26)
    assert ragged.dense and ragged.key_lengths.tolist() == [20, 7]
    many = WindowLayout.build(torch.tensor([60, 26, 3]), window=26)
    assert not many.dense and many.width == 26 and many.slots == 3
    assert many.index.tolist() == [0, 1, 2, 3, 6] and many.key_lengths.tolist() == [26, 26, 8, 26, 3]
    full = WindowLayout.build(torch.tensor([52, 26]), window=26)
    assert full.key_lengths is None and full.n_windows == 3
    x = torch.randn(3, 60, 4)
    back = many.unpack(many.pack(x), 3, 60)
    for row, n in enumerate((60, 26, 3)):
        assert torch.equal(back[row, :n], x[row, :n])


def test_rows_do_not_depend_on_their_batch(reference, long_and_short):
    _, ours = _towers(200)
    x, mask = hf_features(reference.feature_extractor, long_and_short)
    with torch.no_grad():
        batch, n = ours(x.double(), mask.sum(1))
        for i in range(2):
            alone, m = ours(x[i : i + 1, :, : int(mask[i].sum())].double(), mask[i : i + 1].sum(1))
            assert int(m) == int(n[i])
            assert torch.allclose(alone[0], batch[i, : int(m)], atol=1e-12)


def test_placeholder_count_matches_the_processor():
    """``n_tokens`` agrees with the transformers processor's placeholder count for any length."""
    from transformers.models.qwen3_asr.processing_qwen3_asr import Qwen3ASRProcessor

    cfg = Qwen3AsrAudioConfig(**TINY_AUDIO)
    frames = torch.tensor([1, 7, 8, 9, 50, 99, 100, 101, 199, 200, 287, 530, 1100, 12345])
    expected = Qwen3ASRProcessor._get_audio_token_length(None, frames).tolist()
    assert [cfg.n_tokens(int(n)) for n in frames] == expected
    assert qmodel.post_cnn_lengths(frames % 100).tolist() == [cfg.n_tokens(int(n) % 100) for n in frames]
