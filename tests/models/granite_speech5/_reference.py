"""Builders shared by the Granite Speech 5 tests: a tiny BPE vocabulary whose id 0 is the CTC
blank, and tiny ``transformers.GraniteSpeech5ForCTC`` checkpoints saved by transformers'
own classes as released directories (config.json + model.safetensors + tokenizer files +
processor_config.json)."""

from __future__ import annotations

import itertools
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


def synthetic_tokenizer(vocab_size: int):
    """A CTC ``ParakeetTokenizer`` of exactly ``vocab_size`` pieces (the release has 16,384 BPE
    units; a few sentences cannot train that many): the blank and ``<unk>``, then word-initial
    (``▁``) and inner pieces of one to three letters. Decoding is all it is for."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import ParakeetTokenizer

    letters = "etaoinshrdlucmfwypvbgkjqxz"
    pieces = [*SPECIALS]
    for n in (1, 2, 3):
        for combo in itertools.product(letters, repeat=n):
            pieces += ["\u2581" + "".join(combo), "".join(combo)]
            if len(pieces) >= vocab_size:
                break
        if len(pieces) >= vocab_size:
            break
    tok = Tokenizer(models.BPE(vocab={p: i for i, p in enumerate(pieces[:vocab_size])}, merges=[], unk_token="<unk>"))
    tok.decoder = decoders.Metaspace()
    return ParakeetTokenizer(tokenizer_object=tok, pad_token="<blank>", unk_token="<unk>")


# granite-speech-5.0-470m-turboctc's shape (GraniteSpeech5EncoderConfig's defaults), for benchmarks.
RELEASED_ENCODER: dict[str, Any] = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 16,
    "num_attention_heads": 8,
    "num_mel_bins": 80,
    "max_position_embeddings": 512,
    "context_size": 128,
    "conv_kernel_size": 7,
}
RELEASED_VOCAB = 16384


def build_random_granite_speech5(
    out_dir: Path,
    *,
    seed: int,
    vocab_size: int = 64,
    blank_share_on=None,
    blank_share: float = 0.65,
    **encoder_overrides: Any,
) -> Path:
    """A random ``GraniteSpeech5ForCTC`` (tiny unless ``encoder_overrides`` say otherwise, e.g.
    ``RELEASED_ENCODER``) saved as a released Hugging Face directory. With ``blank_share_on``
    (a 16-kHz waveform) the blank's bias is set so that it wins on about ``blank_share`` of that
    clip's frames, as a trained English model's does (transcripts of a real model's length)."""
    from transformers import (
        GraniteSpeech5CTCConfig,
        GraniteSpeech5FeatureExtractor,
        GraniteSpeech5ForCTC,
        GraniteSpeech5Processor,
    )

    tokenizer = train_tokenizer(vocab_size) if vocab_size < 1000 else synthetic_tokenizer(vocab_size)
    encoder = {**TINY_ENCODER, **encoder_overrides, "vocab_size": len(tokenizer)}
    config = GraniteSpeech5CTCConfig(vocab_size=len(tokenizer), pad_token_id=0, encoder_config=encoder)
    extractor = GraniteSpeech5FeatureExtractor(num_mel_bins=encoder["num_mel_bins"])
    torch.manual_seed(seed)
    model = GraniteSpeech5ForCTC(config).eval()
    randomize_(model, seed)
    with torch.no_grad():
        # The features vary little over time next to their mean: a wider input projection and
        # CTC head make the random model emit varied tokens (a real sequence to compare).
        model.encoder.input_linear.weight.mul_(4.0)
        model.encoder.out.weight.mul_(3.0)  # tied: the CTC head too
        if blank_share_on is not None:
            logits = model(**extractor(blank_share_on, sampling_rate=16000, return_tensors="pt")).logits[0]
            margin = logits[:, 1:].max(dim=-1).values - logits[:, 0]
            model.encoder.out.bias[0] += torch.quantile(margin, blank_share)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    GraniteSpeech5Processor(extractor, tokenizer).save_pretrained(out_dir)
    return out_dir
