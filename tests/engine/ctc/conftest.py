"""Tiny in-test CTC models for the strategy tests.

``ToneCtcModel`` reads kaldi fbank features: its "encoder" stacks frame pairs
(subsampling 2) and its head turns the mean log energy of the low / high mel bins
into the logits of two words, against a constant blank logit. A 300 Hz tone burst
is therefore decoded as one word, a 3 kHz burst as another, and silence as blank,
at known times. With ``noise=True`` the head gets random weights over all units
instead, for long, busy hypotheses (batching checks).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from oasr.models.base import BaseAsrModel, BaseEncoder, DecodeType, DecodingSpec, FeatureSpec, LoadReport, TokenizerSpec
from oasr.models.ctc import CtcMixin
from oasr.models.loaders import LoadedModel
from oasr.tokenizers import TableTokenizer

SR = 16000
N_MELS = 16
UNITS = ["<blank>", "<unk>", "\u2581hello", "\u2581world", "\u2581wor", "ld", "你", "好", "<sos/eos>"]
BLANK, UNK, HELLO, WORLD, WOR, LD, NI, HAO, EOS = range(len(UNITS))
LOW_HZ, HIGH_HZ = 300.0, 3000.0


class StackEncoder(BaseEncoder):
    """Pairs of frames concatenated (subsampling 2): each output frame sees only its own two inputs."""

    def __init__(self, n_feats: int) -> None:
        super().__init__()
        self.n_feats = n_feats

    @property
    def subsampling_rate(self) -> int:
        return 2

    @property
    def output_size(self) -> int:
        return 2 * self.n_feats

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, f = feats.shape
        t2 = t // 2
        return feats[:, : 2 * t2].reshape(b, t2, 2 * f), feat_lens // 2


class FakeDecoder(nn.Module):
    """``score_hypotheses`` that likes one token: ``bonus`` per occurrence, minus 0.1 per token."""

    def __init__(self, liked: int, bonus: float) -> None:
        super().__init__()
        self.liked = liked
        self.bonus = bonus
        self.calls: list[tuple[int, list[list[int]], float]] = []

    def score_hypotheses(self, encoder_out, encoder_len, hyps, reverse_weight):
        assert encoder_out.dim() == 3 and encoder_out.shape[0] == 1 and encoder_out.shape[1] == encoder_len
        self.calls.append((encoder_len, [list(h) for h in hyps], reverse_weight))
        return torch.tensor([self.bonus * h.count(self.liked) - 0.1 * len(h) for h in hyps], dtype=torch.float64)


class ToneCtcModel(CtcMixin, BaseAsrModel):
    architecture = "test_tone_ctc"
    capabilities = frozenset({DecodeType.CTC, DecodeType.CTC_AED_RESCORING})
    default_decode_type = DecodeType.CTC

    def __init__(self, noise: bool = False, seed: int = 0) -> None:
        super().__init__(config=None)
        self.encoder = StackEncoder(N_MELS)
        self.head = nn.Linear(2 * N_MELS, len(UNITS))
        self.decoder = FakeDecoder(liked=WORLD, bonus=0.0)
        with torch.no_grad():
            self.head.weight.zero_()
            self.head.bias.fill_(-30.0)
            if noise:
                g = torch.Generator().manual_seed(seed)
                self.head.weight.copy_(torch.randn(len(UNITS), 2 * N_MELS, generator=g) * 0.5)
                self.head.bias.copy_(torch.randn(len(UNITS), generator=g))
            else:
                # logit = 3 * (mean log energy of the band over both frames - 12.5): the int16-scaled
                # fbank of the faint noise is ~5, of a burst in its own band ~15-17, in the other < 11.
                half = N_MELS // 2
                for k in (0, N_MELS):  # both stacked frames
                    self.head.weight[HELLO, k : k + half] = 3.0 / N_MELS
                    self.head.weight[WORLD, k + half : k + N_MELS] = 3.0 / N_MELS
                self.head.bias[BLANK] = 0.0
                self.head.bias[HELLO] = -37.5
                self.head.bias[WORLD] = -37.5

    @property
    def blank_id(self) -> int:
        return BLANK

    def encode_offline(self, feats, feat_lens):
        return self.encoder(feats, feat_lens)

    def ctc_log_probs(self, enc: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.head(enc).float(), dim=-1)

    def forward_offline(self, feats, feat_lens):
        enc, lens = self.encoder(feats, feat_lens)
        return self.ctc_log_probs(enc), lens


def make_loaded(tmp_path, *, noise: bool = False, seed: int = 0, params: dict | None = None) -> LoadedModel:
    units = tmp_path / "units.txt"
    units.write_text("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)), encoding="utf-8")
    tok_spec = TokenizerSpec("table", str(units), special_ids=(UNK, EOS))
    model = ToneCtcModel(noise=noise, seed=seed).eval()
    return LoadedModel(
        model=model,
        tokenizer=TableTokenizer.from_file(units),
        tokenizer_spec=tok_spec,
        feature_spec=FeatureSpec("kaldi_fbank", SR, {"num_mel_bins": N_MELS}),
        decoding_spec=DecodingSpec(DecodeType.CTC, {"languages": ["en", "zh"]} if params is None else params),
        report=LoadReport.build([], []),
        source=str(tmp_path),
        format="test",
        name="tone-ctc",
    )


def tone_audio(bursts: list[tuple[float, float, float]], duration: float, seed: int = 0) -> np.ndarray:
    """Silence (faint noise) with sine bursts ``(start_s, end_s, hz)`` (20 ms raised-cosine ramps)."""
    rng = np.random.default_rng(seed)
    audio = rng.normal(0.0, 1e-5, int(duration * SR)).astype(np.float32)
    ramp = int(0.02 * SR)
    for start, end, hz in bursts:
        a, b = int(start * SR), int(end * SR)
        t = np.arange(b - a) / SR
        env = np.ones(b - a)
        env[:ramp] = 0.5 - 0.5 * np.cos(np.pi * np.arange(ramp) / ramp)
        env[-ramp:] = env[:ramp][::-1]
        audio[a:b] += (0.5 * env * np.sin(2 * np.pi * hz * t)).astype(np.float32)
    return audio


def babble(duration: float, seed: int) -> np.ndarray:
    """Random tones of random pitch, loudness and length (40-120 ms) over noise: busy features."""
    rng = np.random.default_rng(seed)
    n = int(duration * SR)
    audio = rng.normal(0.0, 0.01, n)
    start = 0
    while start < n:
        length = int(rng.uniform(0.04, 0.12) * SR)
        t = np.arange(min(length, n - start)) / SR
        audio[start : start + len(t)] += rng.uniform(0.0, 0.5) * np.sin(2 * np.pi * rng.uniform(100, 6000) * t)
        start += length
    return audio.astype(np.float32)


@pytest.fixture
def tone_loaded(tmp_path) -> LoadedModel:
    return make_loaded(tmp_path)
