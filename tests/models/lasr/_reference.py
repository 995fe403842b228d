"""Builders shared by the LASR tests: a tiny Unigram vocabulary with MedASR's specials,
and tiny ``transformers.LasrForCTC`` checkpoints saved as real HF lasr directories
(config.json + model.safetensors + tokenizer.json / tokenizer_config.json +
processor_config.json)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

# MedASR's specials, in its id order: the CTC blank is the pad token "<epsilon>" (id 0).
SPECIALS = ("<epsilon>", "<s>", "</s>", "<unk>")

TOKENIZER_SENTENCES = (
    "and so my fellow americans ask not what your country can do for you",
    "ask what you can do for your country",
    "the quick brown fox jumps over the lazy dog",
    "speech recognition turns sound into words",
)

# Tiny encoder (the real one: 512 wide, 17 blocks, kernel 32). The kernel is even, as
# MedASR's, so the asymmetric "same" padding is exercised.
TINY_ENCODER: dict[str, Any] = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "conv_kernel_size": 8,
    "subsampling_conv_channels": 24,
    "num_mel_bins": 128,
    "dropout": 0.0,
    "dropout_positions": 0.0,
    "layerdrop": 0.0,
    "activation_dropout": 0.0,
    "attention_dropout": 0.0,
}


def train_tokenizer(sentences: Sequence[str], vocab_size: int):
    """A ``LasrTokenizer`` over a Unigram model trained on ``sentences``, specials at ids 0..3."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LasrTokenizer

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIALS), unk_token="<unk>", show_progress=False
    )
    tok.train_from_iterator(list(sentences), trainer)
    vocab = [(piece, float(score)) for piece, score in json.loads(tok.to_str())["model"]["vocab"]]
    assert [p for p, _ in vocab[:4]] == list(SPECIALS), vocab[:4]
    return LasrTokenizer(
        vocab=vocab, pad_token="<epsilon>", bos_token="<s>", eos_token="</s>", unk_token="<unk>", extra_ids=0
    )


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """Well-scaled random weights everywhere (HF's 0.02-std init would leave the encoder
    output nearly input-independent): fan-in scaled matrices, norms around 1, and batch-norm
    statistics away from the identity."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * p[0].numel() ** -0.5)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.2 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))


def lasr_config(tokenizer, encoder: Mapping[str, Any]):
    from transformers import LasrCTCConfig

    return LasrCTCConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, encoder_config=dict(encoder))


def save_lasr_directory(model, tokenizer, out_dir: Path) -> Path:
    """``save_pretrained`` of the model and of its processor (feature extractor + tokenizer)."""
    from transformers import LasrFeatureExtractor, LasrProcessor

    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    LasrProcessor(LasrFeatureExtractor(), tokenizer).save_pretrained(out_dir)
    return out_dir


def build_random_lasr(out_dir: Path, *, seed: int, vocab_size: int = 45, **encoder_overrides: Any) -> Path:
    """A tiny random ``LasrForCTC`` saved as an HF lasr directory."""
    from transformers import LasrForCTC

    tokenizer = train_tokenizer(TOKENIZER_SENTENCES, vocab_size)
    torch.manual_seed(seed)
    model = LasrForCTC(lasr_config(tokenizer, {**TINY_ENCODER, **encoder_overrides})).eval()
    randomize_(model, seed)
    return save_lasr_directory(model, tokenizer, out_dir)


def flat64(x: torch.Tensor) -> torch.Tensor:
    return x.detach().reshape(-1).to(torch.float64)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = flat64(a), flat64(b)
    return float(torch.dot(a, b) / (a.norm() * b.norm()))


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((flat64(a) - flat64(b)).abs().max())
