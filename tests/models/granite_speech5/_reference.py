"""Builders shared by the Granite Speech 5 tests: a tiny BPE vocabulary whose id 0 is the CTC
blank, and tiny ``transformers.GraniteSpeech5ForCTC`` checkpoints saved by transformers'
own classes as released directories (config.json + model.safetensors + tokenizer files +
processor_config.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.models.lasr._reference import TOKENIZER_SENTENCES, randomize_

SPECIALS = ("<blank>", "<unk>")

# Tiny encoder (the release: 1024 wide, 16 blocks, blocks of 128 frames). Blocks of 8 frames,
# so the clips span many blocks and their last block is padded; self-conditioning after block 1.
TINY_ENCODER: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_mel_bins": 80,
    "max_position_embeddings": 16,
    "context_size": 8,
    "conv_kernel_size": 7,
}


def train_tokenizer(vocab_size: int):
    """A CTC ``ParakeetTokenizer`` (merges repeats, drops the blank) over a BPE model trained
    on a few sentences, the blank at id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import ParakeetTokenizer

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS), show_progress=False)
    tok.train_from_iterator(list(TOKENIZER_SENTENCES), trainer)
    assert [tok.token_to_id(s) for s in SPECIALS] == [0, 1]
    return ParakeetTokenizer(tokenizer_object=tok, pad_token="<blank>", unk_token="<unk>")


def build_random_granite_speech5(out_dir: Path, *, seed: int, vocab_size: int = 64, **encoder_overrides: Any) -> Path:
    """A tiny random ``GraniteSpeech5ForCTC`` saved as a released Hugging Face directory."""
    from transformers import (
        GraniteSpeech5CTCConfig,
        GraniteSpeech5FeatureExtractor,
        GraniteSpeech5ForCTC,
        GraniteSpeech5Processor,
    )

    tokenizer = train_tokenizer(vocab_size)
    encoder = {**TINY_ENCODER, **encoder_overrides, "vocab_size": len(tokenizer)}
    config = GraniteSpeech5CTCConfig(vocab_size=len(tokenizer), pad_token_id=0, encoder_config=encoder)
    torch.manual_seed(seed)
    model = GraniteSpeech5ForCTC(config).eval()
    randomize_(model, seed)
    with torch.no_grad():
        # The features vary little over time next to their mean: a wider input projection and
        # CTC head make the random model emit varied tokens (a real sequence to compare).
        model.encoder.input_linear.weight.mul_(4.0)
        model.encoder.out.weight.mul_(3.0)  # tied: the CTC head too
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    extractor = GraniteSpeech5FeatureExtractor(num_mel_bins=encoder["num_mel_bins"])
    GraniteSpeech5Processor(extractor, tokenizer).save_pretrained(out_dir)
    return out_dir
