"""Front ends fed piece by piece: the frames of a live stream, equal to the whole-array pass.

A front end whose frames each depend on a fixed span of samples (kaldi fbank with or
without ``snip_edges``, NeMo-style centred STFT mels without whole-utterance
normalisation) declares that span as a ``Framing``; ``FeatureStream`` then recomputes the
front end over a short trailing buffer and hands out each frame once, as soon as every
sample it reads has arrived. Frames next to the buffer's own start (where the front end
would pad or pre-emphasise against samples it no longer holds) are never taken from it:
the buffer keeps enough history that they were handed out earlier. ``finish()`` computes
the last frames with the front end's own end-of-signal padding, so the concatenation of
``push`` and ``finish`` outputs equals ``frontend(whole_waveform)`` frame for frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["FeatureStream", "Framing"]


@dataclass(frozen=True)
class Framing:
    """Which samples a front end's frame reads.

    Frame ``i`` reads samples ``[i * hop - left_pad, i * hop - left_pad + length)`` (indices
    outside the signal are the front end's padding) and the whole signal of ``n`` samples
    has ``count(n)`` frames.

    Attributes:
        length: samples per frame window (the STFT window, or n_fft when centred on it).
        hop: samples between frames.
        left_pad: samples the first frame starts before sample 0.
        history: extra samples a frame reads to the left of its window (pre-emphasis: 1).
    """

    length: int
    hop: int
    left_pad: int = 0
    history: int = 0

    def stable(self, n: int) -> int:
        """Frames whose every sample lies inside the first ``n`` samples (no end padding)."""
        last = n - self.length + self.left_pad  # the latest frame start that still fits
        return 0 if last < 0 else last // self.hop + 1


class FeatureStream:
    """Incremental features of one stream.

    Args:
        frontend: an ``oasr.audio.frontends.Frontend`` with a ``framing`` (a ``Framing``).
        count: the number of frames the front end gives ``n`` samples (``frontend.num_frames``).

    ``push`` returns the new frames (F, possibly zero rows); ``finish`` the rest.
    """

    def __init__(self, frontend) -> None:
        framing = getattr(frontend, "framing", None)
        if framing is None:
            raise ValueError(
                f"{type(frontend).__name__} cannot run on a live stream: its frames depend on the whole "
                f"utterance (it declares no framing)"
            )
        self.frontend = frontend
        self.framing: Framing = framing
        f = framing
        # Sub-buffer frames this close to the buffer's start read padding / missing history.
        self._skip = -(-(f.left_pad + f.history) // f.hop)
        self._buf = np.zeros(0, dtype=np.float32)
        self._start = 0  # global sample index of _buf[0] (a multiple of hop)
        self._received = 0
        self.emitted = 0  # frames handed out so far
        self.finished = False

    @property
    def received_samples(self) -> int:
        return self._received

    def push(self, samples: np.ndarray) -> torch.Tensor:
        """Append samples (float32 mono at the front end's rate) -> the frames now complete."""
        if self.finished:
            raise RuntimeError("push after finish")
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if samples.size:
            self._buf = np.concatenate([self._buf, samples])
            self._received += samples.size
        ready = self.framing.stable(self._received)
        return self._take(ready, final=False)

    def finish(self) -> torch.Tensor:
        """The frames that read the end of the signal (the front end's end padding)."""
        if self.finished:
            return torch.zeros(0, self.frontend.n_features)
        self.finished = True
        total = self.frontend.num_frames(self._received)
        out = self._take(total, final=True)
        self._buf = np.zeros(0, dtype=np.float32)
        return out

    def _take(self, upto: int, final: bool) -> torch.Tensor:
        n_new = upto - self.emitted
        if n_new <= 0:
            return torch.zeros(0, self.frontend.n_features)
        hop = self.framing.hop
        first_local = self.emitted - self._start // hop  # sub-buffer frame index of the next frame
        if self._start > 0 and first_local < self._skip:  # never: _trim keeps _skip frames of history
            raise AssertionError("feature stream lost history it still needed")
        feats = self.frontend(self._buf)
        if final:
            out = feats[first_local:]
        else:
            out = feats[first_local : first_local + n_new]
        if out.shape[0] != n_new:
            raise AssertionError(f"feature stream expected {n_new} frames, front end gave {out.shape[0]}")
        self.emitted = upto
        self._trim()
        return out

    def _trim(self) -> None:
        """Drop samples no future frame reads, keeping ``_skip`` frames of history."""
        hop = self.framing.hop
        keep_from_frame = max(0, self.emitted - self._skip)
        new_start = keep_from_frame * hop
        if new_start > self._start:
            self._buf = self._buf[new_start - self._start :]
            self._start = new_start
