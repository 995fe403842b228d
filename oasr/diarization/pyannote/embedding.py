"""WeSpeaker's ResNet speaker embedding, as pyannote.audio 4 wraps it (``WeSpeakerResNet34`` and kin).

    waveform (B, S) -> kaldi fbank of the int16-scaled samples (hamming window, 25 / 10 ms, no energy)
    minus its mean over time -> (B, 1, mels, T) -> conv3x3 + BN + ReLU -> 4 stages of residual blocks
    (Basic for ResNet34, Bottleneck for 152 / 221 / 293; channels m, 2m, 4m, 8m; stride 2 from stage 2)
    -> (B, C * mels / 8, T / 8) -> statistics pooling (weighted mean and unbiased std over time)
    -> linear -> (B, 256)

The pooling weights are a speaker's frame activity from the segmentation (nearest-neighbour resized to
the ResNet's frame count), so one ResNet pass over a chunk serves every speaker of that chunk: oasr
pools once per speaker from the same feature map where pyannote runs the network once per
(chunk, speaker) pair. The architecture (block type, blocks per stage, width, embedding size) is read
off the checkpoint's tensors, so any depth of the family loads.
"""

from __future__ import annotations

import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from oasr.audio.fbank import kaldi_fbank
from oasr.diarization.pyannote.checkpoint import ModelCheckpoint
from oasr.models.base import ComputeDtypeModule


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, 4 * planes, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(4 * planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != 4 * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, 4 * planes, 1, stride=stride, bias=False), nn.BatchNorm2d(4 * planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        return F.relu(self.bn3(self.conv3(out)) + self.shortcut(x))


def stats_pool(features: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """pyannote's weighted statistics pooling.

    The weight sums and their 1e-8 guards stay in the weights' dtype (float32 masks, as pyannote passes
    them) while the products promote to the features' dtype: with one active frame the guard vanishes
    in float32 and the deviation is exactly 0, where a float64 guard would leave ~6e-5 of the value.

    Shapes:
        features (B, D, T), weights (B, K, T) -> (B, K, 2D): per weight row, the weighted mean and the
        unbiased weighted standard deviation.
    """
    w = weights[:, :, None, :]  # (B, K, 1, T)
    x = features[:, None]  # (B, 1, D, T)
    v1 = w.sum(dim=3) + 1e-8  # (B, K, 1)
    mean = (x * w).sum(dim=3) / v1  # (B, K, D)
    v2 = w.square().sum(dim=3)
    var = ((x - mean[..., None]).square() * w).sum(dim=3) / (v1 - v2 / v1 + 1e-8)
    return torch.cat([mean, var.sqrt()], dim=-1)


class WeSpeakerResNet(nn.Module):
    """The ResNet trunk and embedding layer (``resnet.*`` in pyannote's checkpoints)."""

    def __init__(self, block: type[nn.Module], num_blocks: list[int], m: int, feat_dim: int, embed_dim: int):
        super().__init__()
        self.conv1 = nn.Conv2d(1, m, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(m)
        cin = m
        for i, (n, planes) in enumerate(zip(num_blocks, (m, 2 * m, 4 * m, 8 * m))):
            layers = []
            for j in range(n):
                layers.append(block(cin, planes, 2 if (j == 0 and i > 0) else 1))
                cin = planes * block.expansion
            setattr(self, f"layer{i + 1}", nn.Sequential(*layers))
        self.seg_1 = nn.Linear((feat_dim // 8) * m * 8 * block.expansion * 2, embed_dim)

    def frames(self, fbank: torch.Tensor) -> torch.Tensor:
        """(B, T, mels) -> (B, C * mels / 8, T / 8) feature map, flattened over channels and frequency"""
        x = F.relu(self.bn1(self.conv1(fbank.transpose(1, 2)[:, None])))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return x.flatten(1, 2)

    def embed(self, frames: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """(B, D, T') frames and (B, K, T) weights -> (B, K, embed_dim)"""
        if weights.shape[-1] != frames.shape[-1]:
            weights = F.interpolate(weights, size=frames.shape[-1], mode="nearest")
        return self.seg_1(stats_pool(frames, weights))


class WeSpeakerEmbedding(ComputeDtypeModule):
    """Fbank front end + ResNet: ``forward(waveforms, weights)`` -> (B, K, 256)."""

    def __init__(self, resnet: WeSpeakerResNet, fbank: dict, sample_rate: int) -> None:
        super().__init__()
        self.resnet = resnet
        self.fbank = fbank
        self.sample_rate = sample_rate

    @property
    def window_samples(self) -> int:
        """Samples of one fbank frame: the shortest input the model embeds (pyannote's ``min_num_samples``)."""
        return int(self.sample_rate * self.fbank["frame_length_ms"] * 0.001)

    def features(self, waveforms: torch.Tensor) -> torch.Tensor:
        """(B, S) -> (B, T, mels) mean-normalised fbank in the model's dtype"""
        feats = torch.stack([kaldi_fbank(w, dtype=self.compute_dtype, **self.fbank) for w in waveforms])
        return feats - feats.mean(dim=1, keepdim=True)

    def forward(self, waveforms: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """(B, S) waveforms, optional (B, K, T) activity weights -> (B, K, dim) ((B, 1, dim) unweighted)"""
        frames = self.resnet.frames(self.features(waveforms))
        if weights is None:
            mean = frames.mean(dim=-1)
            std = frames.std(dim=-1, correction=1)
            return self.resnet.seg_1(torch.cat([mean, std], dim=-1))[:, None]
        return self.resnet.embed(frames, weights)


def build_wespeaker(ckpt: ModelCheckpoint) -> WeSpeakerEmbedding:
    """WeSpeaker ResNet from a pyannote checkpoint (``WeSpeakerResNet34`` / 152 / 221 / 293)."""
    if not re.fullmatch(r"WeSpeakerResNet\d+", ckpt.class_name):
        raise ValueError(f"{ckpt.path}: the embedding model is {ckpt.architecture}; oasr reads WeSpeakerResNet*")
    hp = ckpt.hyper_parameters
    if hp.get("fbank_centering_span") is not None:
        raise ValueError(f"{ckpt.path}: fbank_centering_span is not supported (released models leave it unset)")
    if hp.get("use_energy", False):
        raise ValueError(f"{ckpt.path}: use_energy=True is not supported (released models leave it off)")
    state = {k[len("resnet.") :]: v for k, v in ckpt.state_dict.items() if k.startswith("resnet.")}
    if len(state) != len(ckpt.state_dict):
        extra = sorted(set(ckpt.state_dict) - {f"resnet.{k}" for k in state})
        raise ValueError(f"{ckpt.path}: unexpected tensors outside resnet.*: {extra[:5]}")
    bottleneck = any(".conv3." in k for k in state)
    num_blocks = [len({k.split(".")[1] for k in state if k.startswith(f"layer{i}.")}) for i in range(1, 5)]
    m = state["conv1.weight"].shape[0]
    embed_dim = state["seg_1.weight"].shape[0]
    num_mel_bins = int(hp.get("num_mel_bins", 80))
    resnet = WeSpeakerResNet(Bottleneck if bottleneck else BasicBlock, num_blocks, m, num_mel_bins, embed_dim)
    resnet.load_state_dict(state, strict=True)
    sample_rate = int(hp.get("sample_rate", 16000))
    fbank = {
        "sampling_rate": sample_rate,
        "num_mel_bins": num_mel_bins,
        "frame_length_ms": float(hp.get("frame_length", 25)),
        "frame_shift_ms": float(hp.get("frame_shift", 10)),
        "dither": 0.0,  # inference: pyannote's models are saved with dither 0
        "window_type": hp.get("window_type", "hamming"),
        "round_to_power_of_two": bool(hp.get("round_to_power_of_two", True)),
        "snip_edges": bool(hp.get("snip_edges", True)),
    }
    return WeSpeakerEmbedding(resnet, fbank, sample_rate).eval()
