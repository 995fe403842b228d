"""PyanNet, pyannote's local segmentation model, and its powerset output.

    waveform (B, 1, S) -> InstanceNorm -> SincNet: |parametric sinc filters (80, 251 taps, stride 10)|,
    max-pool 3, InstanceNorm, leaky ReLU; two Conv1d(5) blocks alike (60 channels) -> (B, 60, T)
    -> BiLSTM stack -> linears with leaky ReLU -> classifier -> log-softmax over the powerset classes

The powerset classes of ``K`` local speakers with at most ``M`` at once are the subsets of size 0..M
in ``itertools.combinations`` order ({}, {0}, {1}, {2}, {0,1}, {0,2}, {1,2} for K=3, M=2); a frame's
speakers are the members of its most likely class (``powerset_mapping`` x one-hot of the argmax).

Frames: each output frame sees ``receptive_field`` samples; frame ``t`` starts at
``start + t * step`` seconds (``frames()``), the timing pyannote's aggregation uses.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from oasr.diarization.pyannote.checkpoint import ModelCheckpoint

# SincNet's fixed layout: (kernel, stride) of conv / pool layers in order; the first stride is the hparam.
_SINC_FILTERS, _SINC_KERNEL, _MIN_LOW_HZ, _MIN_BAND_HZ = 80, 251, 50.0, 50.0


@dataclass(frozen=True)
class Frames:
    """A regular frame grid in seconds (pyannote.core's ``SlidingWindow`` without an end)."""

    start: float
    duration: float
    step: float

    def closest_frame(self, t: float) -> int:
        return int(round_half_even((t - self.start - 0.5 * self.duration) / self.step))

    def middle(self, i: int) -> float:
        s = self.start + i * self.step
        return 0.5 * (s + (s + self.duration))


def round_half_even(x: float) -> float:
    """numpy's ``rint`` (ties to even), which pyannote's frame arithmetic uses."""
    return float(round(x))


def powerset_mapping(num_classes: int, max_set_size: int) -> torch.Tensor:
    """(num_powerset_classes, num_classes) 0/1 matrix: row i marks the members of powerset class i."""
    rows = [
        [1.0 if k in subset else 0.0 for k in range(num_classes)]
        for size in range(max_set_size + 1)
        for subset in itertools.combinations(range(num_classes), size)
    ]
    return torch.tensor(rows)


class SincConv(nn.Module):
    """asteroid's ``ParamSincFB`` as SincNet's first layer uses it: 40 cosine (even) and 40 sine (odd)
    band-pass filters from learnt low / band frequencies, Hamming-windowed, no padding."""

    def __init__(self, stride: int, sample_rate: int) -> None:
        super().__init__()
        half = _SINC_KERNEL // 2
        self.stride, self.sample_rate = stride, float(sample_rate)
        self.low_hz_ = nn.Parameter(torch.zeros(_SINC_FILTERS // 2, 1))
        self.band_hz_ = nn.Parameter(torch.zeros(_SINC_FILTERS // 2, 1))
        self.register_buffer("window_", torch.zeros(half))
        self.register_buffer("n_", torch.zeros(1, half))

    def filters(self) -> torch.Tensor:
        """(80, 1, 251) filters: cosine ones then sine ones."""
        low = _MIN_LOW_HZ + self.low_hz_.abs()
        high = torch.clamp(low + _MIN_BAND_HZ + self.band_hz_.abs(), _MIN_LOW_HZ, self.sample_rate / 2)
        band = (high - low)[:, 0]
        ft_low, ft_high = low @ self.n_, high @ self.n_  # (40, 125)
        cos_left = (torch.sin(ft_high) - torch.sin(ft_low)) / (self.n_ / 2) * self.window_
        sin_left = (torch.cos(ft_low) - torch.cos(ft_high)) / (self.n_ / 2) * self.window_
        cos = torch.cat([cos_left, 2 * band[:, None], cos_left.flip(1)], dim=1)
        sin = torch.cat([sin_left, torch.zeros_like(band)[:, None], -sin_left.flip(1)], dim=1)
        bank = torch.cat([cos, sin], dim=0) / (2 * band.repeat(2)[:, None])
        return bank[:, None, :]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.filters(), stride=self.stride)


class SincNet(nn.Module):
    def __init__(self, stride: int, sample_rate: int) -> None:
        super().__init__()
        if sample_rate != 16000:
            raise ValueError(f"SincNet runs at 16 kHz only (pyannote's restriction), got {sample_rate}")
        self.stride = stride
        self.wav_norm1d = nn.InstanceNorm1d(1, affine=True)
        self.conv1d = nn.ModuleList([SincConv(stride, sample_rate), nn.Conv1d(80, 60, 5), nn.Conv1d(60, 60, 5)])
        self.norm1d = nn.ModuleList([nn.InstanceNorm1d(c, affine=True) for c in (80, 60, 60)])

    def layers(self) -> list[tuple[int, int]]:
        """(kernel, stride) of every conv and pool, input to output."""
        return [(_SINC_KERNEL, self.stride), (3, 3), (5, 1), (3, 3), (5, 1), (3, 3)]

    def forward(self, waveforms: torch.Tensor) -> torch.Tensor:
        """(B, 1, S) -> (B, 60, T)"""
        x = self.wav_norm1d(waveforms)
        for c, (conv, norm) in enumerate(zip(self.conv1d, self.norm1d)):
            x = conv(x)
            if c == 0:
                x = x.abs()
            x = F.leaky_relu(norm(F.max_pool1d(x, 3, stride=3)))
        return x


class PyanNet(nn.Module):
    """pyannote's PyanNet with a powerset head; ``forward`` returns log-probabilities (B, T, classes)."""

    def __init__(
        self,
        *,
        stride: int,
        hidden: int,
        num_layers: int,
        bidirectional: bool,
        monolithic: bool,
        linear_hidden: int,
        linear_layers: int,
        num_outputs: int,
        sample_rate: int = 16000,
    ) -> None:
        super().__init__()
        self.sample_rate = sample_rate
        self.sincnet = SincNet(stride, sample_rate)
        self.monolithic = monolithic
        width = hidden * (2 if bidirectional else 1)
        if monolithic:
            self.lstm = nn.LSTM(60, hidden, num_layers=num_layers, bidirectional=bidirectional, batch_first=True)
        else:
            self.lstm = nn.ModuleList(
                [
                    nn.LSTM(60 if i == 0 else width, hidden, bidirectional=bidirectional, batch_first=True)
                    for i in range(num_layers)
                ]
            )
        sizes = [width] + [linear_hidden] * linear_layers
        self.linear = nn.ModuleList([nn.Linear(a, b) for a, b in itertools.pairwise(sizes)])
        self.classifier = nn.Linear(sizes[-1], num_outputs)

    def forward(self, waveforms: torch.Tensor) -> torch.Tensor:
        """(B, 1, S) waveforms -> (B, T, num_powerset_classes) log-probabilities"""
        x = self.sincnet(waveforms).transpose(1, 2)  # (B, T, 60)
        if self.monolithic:
            x, _ = self.lstm(x)
        else:
            for lstm in self.lstm:  # dropout between layers is inactive at inference
                x, _ = lstm(x)
        for linear in self.linear:
            x = F.leaky_relu(linear(x))
        return F.log_softmax(self.classifier(x), dim=-1)

    def num_frames(self, num_samples: int) -> int:
        for kernel, stride in self.sincnet.layers():
            num_samples = 1 + (num_samples - kernel) // stride
        return num_samples

    def frames(self) -> Frames:
        """The output frame grid in seconds, as pyannote's ``Model.receptive_field``."""

        def size(n: int) -> int:
            for kernel, stride in reversed(self.sincnet.layers()):
                n = kernel + (n - 1) * stride
            return n

        center = 0
        for kernel, stride in reversed(self.sincnet.layers()):
            center = center * stride + (kernel - 1) // 2
        one, two = size(1), size(2)
        sr = self.sample_rate
        return Frames(start=(center - (one - 1) / 2) / sr, duration=one / sr, step=(two - one) / sr)


def build_pyannet(ckpt: ModelCheckpoint) -> tuple[PyanNet, torch.Tensor, float]:
    """PyanNet from its checkpoint. -> (model, powerset mapping (classes, speakers), window seconds)"""
    if ckpt.class_name != "PyanNet":
        raise ValueError(f"{ckpt.path}: the segmentation model is {ckpt.architecture}; oasr reads PyanNet")
    spec = ckpt.specifications
    if spec is None or not spec.powerset or not spec.classes:
        raise ValueError(
            f"{ckpt.path}: only powerset segmentation models (pyannote 3.x / 4.x, e.g. segmentation-3.0) are supported"
        )
    hp = ckpt.hyper_parameters
    sincnet = {"stride": 10, **(hp.get("sincnet") or {})}
    lstm = {"hidden_size": 128, "num_layers": 2, "bidirectional": True, "monolithic": True, **(hp.get("lstm") or {})}
    linear = {"hidden_size": 128, "num_layers": 2, **(hp.get("linear") or {})}
    if linear["num_layers"] < 1:
        raise ValueError(f"{ckpt.path}: PyanNet without linear layers is not supported")
    mapping = powerset_mapping(len(spec.classes), spec.powerset_max_classes)
    model = PyanNet(
        stride=int(sincnet["stride"]),
        hidden=int(lstm["hidden_size"]),
        num_layers=int(lstm["num_layers"]),
        bidirectional=bool(lstm["bidirectional"]),
        monolithic=bool(lstm["monolithic"]),
        linear_hidden=int(linear["hidden_size"]),
        linear_layers=int(linear["num_layers"]),
        num_outputs=mapping.shape[0],
        sample_rate=int(hp.get("sample_rate", 16000)),
    )
    state = {k.replace(".filterbank.", "."): v for k, v in ckpt.state_dict.items()}
    model.load_state_dict(state, strict=True)
    if not math.isfinite(spec.duration) or spec.duration <= 0:
        raise ValueError(f"{ckpt.path}: bad segmentation window {spec.duration}")
    return model.eval(), mapping, spec.duration
