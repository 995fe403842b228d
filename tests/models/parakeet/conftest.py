"""Fixtures of the Parakeet tests: a tiny random transformers ``ParakeetForCTC`` saved the way a
Hugging Face Parakeet CTC release is laid out (config.json, model.safetensors, a trained
tokenizer.json whose last id is the ``<pad>`` blank, the processor's feature-extractor
settings), and a few real clips of unequal lengths."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

# Unequal lengths: 11 s, 5.3 s, 2.9 s and a 0.5 s one (a handful of encoder frames).
CLIPS = (
    "jfk.wav",
    "sense_and_sensibility_01_austen_64kb-0890.wav",
    "speechbrain_spk1_snt1.wav",
    "bambatse_15_haggard_0247.wav",
)

# What the tiny tokenizer is trained on.
SENTENCES = (
    "and so my fellow americans ask not what your country can do for you",
    "ask what you can do for your country",
    "mister john dashwood had then leisure to consider how much there might be in his power",
    "the quick brown fox jumps over the lazy dog",
    "she sells sea shells by the sea shore",
)

TINY_ENCODER = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    subsampling_conv_channels=8,
    num_mel_bins=80,
    conv_kernel_size=9,
)


@dataclass
class Reference:
    """A saved tiny checkpoint and its transformers objects (model in float64, eval)."""

    path: Path
    model: Any
    tokenizer: Any
    feature_extractor: Any

    @property
    def blank_id(self) -> int:
        return int(self.model.config.pad_token_id)


def train_tokenizer(vocab_size: int = 48):
    """A unigram tokenizer (Metaspace, ``<unk>`` at 0) with ``<pad>`` appended as the last id,
    as the transformers NeMo conversion lays out a CTC vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import ParakeetTokenizer

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(SENTENCES, trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["<unk>"]))
    out = ParakeetTokenizer(tokenizer_object=tok, clean_up_tokenization_spaces=False)
    out.add_special_tokens(
        {
            "pad_token": AddedToken("<pad>", normalized=False, special=True),
            "unk_token": AddedToken("<unk>", normalized=False, special=True),
        }
    )
    return out


def randomize_(model: torch.nn.Module, seed: int = 0) -> None:
    """Give every weight and BatchNorm statistic a non-trivial value (transformers' init leaves
    norms at identity, biases and u / v near zero, BatchNorm at mean 0 / var 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif p.dim() > 1:
                p.copy_(noise * (1.5 / p[0].numel() ** 0.5))
            else:
                p.copy_(0.2 * noise)
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.3 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))


def save_ctc_checkpoint(path: Path, seed: int = 0, **encoder_overrides) -> Reference:
    """Build, randomise and save a tiny ParakeetForCTC with its processor files."""
    from transformers import (
        ParakeetCTCConfig,
        ParakeetFeatureExtractor,
        ParakeetForCTC,
        ParakeetProcessor,
        ParakeetTokenizer,
    )

    tokenizer = train_tokenizer()
    config = ParakeetCTCConfig(
        encoder_config={**TINY_ENCODER, **encoder_overrides},
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = ParakeetForCTC(config).eval()
    randomize_(model, seed)
    model.save_pretrained(path)
    feature_extractor = ParakeetFeatureExtractor()
    ParakeetProcessor(feature_extractor=feature_extractor, tokenizer=tokenizer, decoder_type="ctc").save_pretrained(
        path
    )
    # The reference reads its tokenizer back from the directory, as a user would: the saved
    # unigram vocabulary may order equal-score pieces differently from the trained object.
    saved = ParakeetTokenizer.from_pretrained(path)
    assert len(saved) == len(tokenizer) and saved.pad_token_id == tokenizer.pad_token_id == len(tokenizer) - 1
    return Reference(path, model.double(), saved, feature_extractor)


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> Reference:
    return save_ctc_checkpoint(tmp_path_factory.mktemp("parakeet_ctc_tiny"))


@pytest.fixture(scope="session")
def waveforms(manifest) -> list[np.ndarray]:
    from oasr.audio import load_audio

    by_name = {row["audio"]: row["path"] for row in manifest}
    return [load_audio(by_name[name]) for name in CLIPS]


def hf_features(feature_extractor, waveforms) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' padded features (float32) and attention mask for a list of waveforms."""
    out = feature_extractor(list(waveforms), sampling_rate=16000, return_tensors="pt")
    return out.input_features, out.attention_mask


def ctc_collapse(ids, blank: int) -> list[int]:
    """Greedy CTC: merge repeats, drop blanks."""
    out, prev = [], None
    for i in (int(x) for x in ids):
        if i != prev and i != blank:
            out.append(i)
        prev = i
    return out


def parity(ours: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(cosine, max-abs) of two tensors, flattened, in float64."""
    a, b = ours.double().flatten(), ref.double().flatten()
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0)), float((a - b).abs().max())
