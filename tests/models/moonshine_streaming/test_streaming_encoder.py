"""The incremental encoder (``moonshine_streaming/streaming.py``) against the offline one in
float64: fed in chunks of any size, the frames it emits before the end are the offline
encoder's first frames of the whole clip, and after ``finish`` all of them."""

from __future__ import annotations

import torch

from oasr.models.moonshine_streaming.streaming import encode_chunk, init_state


def test_chunked_encoder_equals_the_offline_one(loaded, waveforms):
    model = loaded.model
    clips = [waveforms[0][: 80 * 200 + 37], waveforms[1]]
    g = torch.Generator().manual_seed(0)
    for w in clips:
        audio = torch.from_numpy(w).double()
        with torch.no_grad():
            want, n = model.encode_offline(audio[None, :, None], torch.tensor([len(w)]))
            want = want[0, : int(n[0])]
            state, got, at = init_state(model.encoder), [], 0
            while at < len(w):
                size = int(torch.randint(1, 2000, (1,), generator=g))
                frames, state = encode_chunk(model.encoder, audio[at : at + size], state)
                at += size
                got.append(frames)
                so_far = torch.cat(got)
                torch.testing.assert_close(so_far, want[: so_far.shape[0]], rtol=1e-10, atol=1e-10)
            assert so_far.shape[0] < want.shape[0], "the last frames wait for their right context"
            frames, _ = encode_chunk(model.encoder, audio[:0], state, finish=True)
            got.append(frames)
        torch.testing.assert_close(torch.cat(got), want, rtol=1e-10, atol=1e-10)
