"""Moonshine Streaming's encoder run incrementally: samples in, the encoder frames whose inputs
are all there out, equal to the offline encoder's frames of the whole clip.

Why it can: every stage is local in time. A 5-ms frame depends on its own 80 samples; a causal
convolution output ``t`` reads inputs ``2t-4 .. 2t``; layer ``l`` reads frames
``t - left + 1 .. t + right - 1`` (``sliding_windows[l]``). So each stage keeps the few inputs
its next outputs still read and emits an output once its last input has arrived; the frames
come out ``sum(right - 1)`` layer frames (plus the convolutions' reach) behind the audio, and
``finish`` flushes the rest as the offline encoder ends a clip (the partial last 5-ms frame
dropped, the convolutions' last outputs reading zeros past the clip, the last frames
attending only to the frames there are).

The state is explicit (``EncoderStreamState``: one stream's buffers); ``encode_chunk`` is a
pure function of the model, the samples and the state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["EncoderStreamState", "encode_chunk", "from_tensors", "init_state", "to_tensors"]


@dataclass
class _Conv:
    """One causal (k5, s2) convolution's inputs still to be read, from input ``2 * done - 4``."""

    tail: torch.Tensor  # (C, n) frames, the first ``2 * done - 4`` (zeros before the clip)
    done: int = 0  # outputs emitted
    seen: int = 0  # inputs received


@dataclass
class _Layer:
    """One encoder layer's input frames from ``start``, and the outputs emitted."""

    frames: torch.Tensor  # (n, D)
    start: int = 0
    done: int = 0


@dataclass
class EncoderStreamState:
    """One stream of ``encode_chunk`` (the encoder is ``model.MoonshineStreamingEncoder``; this module
    imports nothing of it, which calls it).

    Attributes:
        rest: samples of the 5-ms frame not yet complete.
        convs: the two convolutions' pending inputs.
        layers: each layer's pending inputs.
        finished: ``finish`` was called (no more audio).
    """

    rest: torch.Tensor
    convs: list[_Conv] = field(default_factory=list)
    layers: list[_Layer] = field(default_factory=list)
    finished: bool = False


def init_state(encoder: Any, *, device=None, dtype=None) -> EncoderStreamState:
    """The state before a stream's first sample."""
    w = encoder.embedder.linear.weight
    device, dtype = device or w.device, dtype or w.dtype
    d = encoder.cfg.encoder_hidden_size
    convs = [_Conv(torch.zeros(c, 4, device=device, dtype=dtype)) for c in (d, 2 * d)]
    layers = [_Layer(torch.zeros(0, d, device=device, dtype=dtype)) for _ in encoder.layers]
    return EncoderStreamState(torch.zeros(0, device=device, dtype=dtype), convs, layers)


def _conv(conv, st: _Conv, new: torch.Tensor, last: int | None) -> torch.Tensor:
    """Feed ``new`` (C, n) inputs; emit every output whose window is complete, or with ``last``
    (the final output count) every output up to it, reading zeros past the inputs. -> (C_out, m)"""
    st.tail = torch.cat([st.tail, new], dim=1)
    st.seen += new.shape[1]
    if last is None:
        n_out = (st.tail.shape[1] - 5) // 2 + 1 if st.tail.shape[1] >= 5 else 0
    else:
        n_out = max(last - st.done, 0)
        need = 2 * (n_out - 1) + 5 if n_out else 0
        if need > st.tail.shape[1]:
            st.tail = F.pad(st.tail, (0, need - st.tail.shape[1]))
    if n_out == 0:
        return st.tail.new_zeros(conv.weight.shape[0], 0)
    y = conv(st.tail[None, :, : 2 * (n_out - 1) + 5])[0]
    st.tail = st.tail[:, 2 * n_out :]
    st.done += n_out
    return y


def _valid_after_conv(total: int, valid: int) -> tuple[int, int]:
    total = (total - 1) // 2 + 1
    return total, (min(total, (valid + 5) // 2) if valid > 0 else 0)


def encode_chunk(
    encoder: Any, samples: torch.Tensor, state: EncoderStreamState, *, finish: bool = False
) -> tuple[torch.Tensor, EncoderStreamState]:
    """Feed ``samples`` (any number, 16 kHz); with ``finish`` the clip ends after them.

    Returns:
        the encoder frames completed by them, (m, D) after the final norm, and the state
        (the same object, updated). All frames a stream emits, in order, are the offline
        encoder's frames of all its samples.
    """
    if state.finished:
        raise ValueError("the stream is finished")
    n = encoder.cfg.frame_len
    buf = torch.cat([state.rest, samples.to(state.rest.dtype)])
    full = buf.shape[0] // n
    state.rest = buf[full * n :]
    x = encoder.embedder.embed_frames(buf[: full * n].view(full, n)).T  # (D, n)
    last1 = last2 = None
    if finish:
        state.finished = True
        frames = state.convs[0].seen + full  # valid 5-ms frames; a partial one counts in the total only
        total1, last1 = _valid_after_conv(frames + (1 if state.rest.numel() else 0), frames)
        _, last2 = _valid_after_conv(total1, last1)
    emb = encoder.embedder
    x = F.silu(_conv(emb.conv1, state.convs[0], x, last1))
    x = _conv(emb.conv2, state.convs[1], x, last2).T  # (m, D)
    for layer, st, (left, right) in zip(encoder.layers, state.layers, encoder.cfg.sliding_windows):
        st.frames = torch.cat([st.frames, x])
        avail = st.start + st.frames.shape[0]
        end = avail if finish else max(avail - max(right - 1, 0), st.done)  # keys up to t + right - 1
        if end == st.done:
            x = x[:0]
            continue
        pos = torch.arange(st.start, avail, device=x.device)
        dist = pos[:, None] - pos[None, :]
        band = ((dist >= 0) & (dist < left)) | ((dist < 0) & (-dist < right))
        out = layer(st.frames[None], band[None, None])[0]
        x = out[st.done - st.start : end - st.start]
        st.done = end
        keep_from = max(end - left + 1, st.start)
        st.frames = st.frames[keep_from - st.start :]
        st.start = keep_from
    return encoder.final_norm(x), state


def to_tensors(state: EncoderStreamState) -> list[torch.Tensor]:
    """The state as the flat tensor list of the stateful streaming form (the runtime stacks,
    moves and measures those): rest, each convolution's tail and (done, seen), each layer's
    frames and (start, done), finished."""

    def ints(*v: int) -> torch.Tensor:
        return torch.tensor(v, dtype=torch.long)

    out = [state.rest]
    for c in state.convs:
        out += [c.tail, ints(c.done, c.seen)]
    for la in state.layers:
        out += [la.frames, ints(la.start, la.done)]
    return [*out, ints(int(state.finished))]


def from_tensors(tensors: list[torch.Tensor], n_layers: int) -> EncoderStreamState:
    """``to_tensors``' inverse."""
    convs = [_Conv(tensors[1 + 2 * i], *(int(v) for v in tensors[2 + 2 * i])) for i in range(2)]
    at = 5
    layers = [_Layer(tensors[at + 2 * i], *(int(v) for v in tensors[at + 1 + 2 * i])) for i in range(n_layers)]
    return EncoderStreamState(tensors[0], convs, layers, bool(int(tensors[-1][0])))
