"""FeatureStream: features of a stream fed piece by piece equal the whole-array front end."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.audio.fbank import KaldiFbank
from oasr.audio.streaming import FeatureStream, Framing
from oasr.audio.whisper_frontend import WhisperMelFrontend


def _streamed(frontend, x: np.ndarray, piece: int) -> torch.Tensor:
    st = FeatureStream(frontend)
    outs = [st.push(x[i : i + piece]) for i in range(0, len(x), piece)]
    outs.append(st.finish())
    return torch.cat(outs)


@pytest.mark.parametrize("snip_edges", [True, False])
@pytest.mark.parametrize("n", [0, 399, 400, 401, 1234, 16000, 40037])
@pytest.mark.parametrize("piece", [1, 592, 16000])  # one sample, 37 ms, 1 s
def test_kaldi_fbank_streamed_equals_whole(snip_edges, n, piece):
    if piece == 1 and n > 2000:
        pytest.skip("one-sample pieces of a long signal: covered by the short ones")
    fe = KaldiFbank(snip_edges=snip_edges)
    x = (np.random.default_rng(n).standard_normal(n) * 0.1).astype(np.float32)
    whole = fe(x)
    got = _streamed(fe, x, piece)
    assert got.shape == whole.shape
    if whole.numel():
        assert (got - whole).abs().max().item() < 1e-4  # the same frames through another FFT batch


def test_frames_come_out_as_soon_as_their_samples_are_in():
    fe = KaldiFbank(snip_edges=True)  # frame i reads samples [160 i, 160 i + 400)
    st = FeatureStream(fe)
    assert st.push(np.zeros(399, np.float32)).shape[0] == 0
    assert st.push(np.zeros(1, np.float32)).shape[0] == 1
    assert st.push(np.zeros(159, np.float32)).shape[0] == 0
    assert st.push(np.zeros(1, np.float32)).shape[0] == 1


def test_framing_counts_stable_frames():
    f = Framing(length=400, hop=160, left_pad=120)
    assert f.stable(279) == 0 and f.stable(280) == 1 and f.stable(440) == 2


def test_a_front_end_that_normalises_the_whole_utterance_cannot_stream():
    with pytest.raises(ValueError, match="cannot run on a live stream"):
        FeatureStream(WhisperMelFrontend.__new__(WhisperMelFrontend))


def test_push_after_finish_is_refused():
    st = FeatureStream(KaldiFbank())
    st.finish()
    with pytest.raises(RuntimeError):
        st.push(np.zeros(10, np.float32))
