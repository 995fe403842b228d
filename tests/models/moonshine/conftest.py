"""Fixtures of the Moonshine tests: a tiny random transformers ``MoonshineForConditionalGeneration``
saved as a release is laid out (config.json, model.safetensors, generation_config.json, a trained
Metaspace BPE tokenizer.json with ``<unk> <s> </s>`` at 0, 1, 2 as the releases have them, its
tokenizer_config.json, the feature extractor's preprocessor_config.json), and real clips of
unequal lengths."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

# 2.9 s, 5.3 s and 0.44 s: one batch of unequal lengths.
CLIPS = (
    "speechbrain_spk1_snt1.wav",
    "sense_and_sensibility_01_austen_64kb-0890.wav",
    "bambatse_20_haggard_0331.wav",
)

SENTENCES = (
    "and so my fellow americans ask not what your country can do for you",
    "mister john dashwood had then leisure to consider how much there might be in his power",
    "the quick brown fox jumps over the lazy dog. The child almost hurt the small dog.",
    "Ever tried. Ever failed. No matter. Try again. Fail again. Fail better.",
)

# hidden 48 over 4 heads: head_dim 12, of which int(12 * 0.9) = 10 channels are rotated.
TINY = dict(
    hidden_size=48,
    intermediate_size=64,
    encoder_num_hidden_layers=2,
    decoder_num_hidden_layers=2,
    encoder_num_attention_heads=4,
    decoder_num_attention_heads=4,
)


@dataclass
class Reference:
    """A saved tiny checkpoint, its transformers model (float64, eval) and tokenizer."""

    path: Path
    model: Any
    tokenizer: Any  # tokenizers.Tokenizer


def train_tokenizer(vocab_size: int = 300):
    """A Metaspace BPE (Moonshine's tokenizer is a SentencePiece-style BPE) with ``<unk> <s> </s>``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")],
    )
    tok.train_from_iterator(SENTENCES, trainer)
    return tok


EMBED_SCALE = 0.2  # small against the residual stream, so the tied head does not echo the last token


def randomize_(model: torch.nn.Module, seed: int = 0) -> None:
    """Give every weight a non-trivial value (norms off identity, biases off zero), scaled so
    activations and logits stay O(1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if ("norm" in name) and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif "embed_tokens" in name:
                p.copy_(EMBED_SCALE * noise)
            elif p.dim() > 1:
                p.copy_(noise * (1.5 / p[0].numel() ** 0.5))
            else:
                p.copy_(0.2 * noise)


def save_checkpoint(path: Path, seed: int = 2, **overrides) -> Reference:
    """Build, randomise and save a tiny MoonshineForConditionalGeneration with its tokenizer and
    feature-extractor settings (as the releases: no normalisation, attention mask returned)."""
    from transformers import (
        MoonshineConfig,
        MoonshineForConditionalGeneration,
        PreTrainedTokenizerFast,
        Wav2Vec2FeatureExtractor,
        Wav2Vec2Processor,
    )

    tokenizer = train_tokenizer()
    config = MoonshineConfig(
        **{"vocab_size": tokenizer.get_vocab_size(), **TINY, **overrides},
        decoder_start_token_id=1,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(seed)
    model = MoonshineForConditionalGeneration(config).eval()
    randomize_(model, seed)
    model.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    # The releases' processor: the extractor and a fast tokenizer (AutoProcessor reads them back).
    extractor = Wav2Vec2FeatureExtractor(
        feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=False, return_attention_mask=True
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_file=str(path / "tokenizer.json"), unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    Wav2Vec2Processor(feature_extractor=extractor, tokenizer=fast).save_pretrained(path)
    return Reference(path, model.double(), tokenizer)


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> Reference:
    return save_checkpoint(tmp_path_factory.mktemp("moonshine_tiny"))


@pytest.fixture(scope="session")
def engine(reference):
    """An ``oasr.ASREngine`` of the reference directory, with the family's defaults."""
    import oasr

    return oasr.ASREngine(str(reference.path))


@pytest.fixture(scope="session")
def waveforms(manifest) -> list[np.ndarray]:
    from oasr.audio import load_audio

    by_name = {row["audio"]: row["path"] for row in manifest}
    return [load_audio(by_name[name]) for name in CLIPS]


def hf_generate(model, wave: np.ndarray, eos_token_id: int = 2) -> list[int]:
    """transformers' greedy ``generate`` on one clip alone with the model card's limit
    (``max_length = int(samples * 6.5 / 16000)``); the new ids, the end id dropped."""
    x = torch.from_numpy(np.asarray(wave, dtype=np.float32))[None].to(model.dtype)
    max_length = int(x.shape[1] * 6.5 / 16000)
    mask = torch.ones_like(x, dtype=torch.long)
    out = model.generate(input_values=x, attention_mask=mask, max_length=max_length, eos_token_id=eos_token_id)
    ids = out[0, 1:].tolist()
    return ids[:-1] if ids and ids[-1] == eos_token_id else ids


def parity(ours: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(cosine, max-abs) of two tensors, flattened, in float64."""
    a, b = ours.double().flatten(), ref.double().flatten()
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0)), float((a - b).abs().max())
