"""Fixtures of the Moonshine Streaming tests: a tiny random transformers
``MoonshineStreamingForConditionalGeneration`` saved as a release is laid out (config.json,
model.safetensors, generation_config.json, a trained sentencepiece-style BPE tokenizer.json
with byte fallback and Moonshine's ``<unk> <s> </s>`` ids, the Wav2Vec2 feature extractor's
preprocessor_config.json), and real clips."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from tests.models.qwen3_asr.conftest import randomize_  # noqa: E402

# 2.9 s (ends mid-frame: a partial 5-ms frame the mask drops) and 0.44 s.
CLIPS = ("speechbrain_spk1_snt1.wav", "bambatse_20_haggard_0331.wav")
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
SENTENCES = (
    "and so my fellow americans ask not what your country can do for you",
    "mister john dashwood had then leisure to consider how much there might be in his power",
    "the quick brown fox jumps over the lazy dog. The child almost hurt the small dog.",
    "Der hinter diesem Portal liegenden Raum",
)
# Encoder and decoder widths differ (the adapter projects); K/V heads fewer than heads in the
# encoder; a decoder head of 12 rotates int(12 * 0.8) = 9 -> 10 interleaved dimensions.
TINY = dict(
    encoder_config=dict(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_windows=[[5, 3], [4, 0], [6, 2]],
    ),
    hidden_size=24,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,  # a released config.json carries it; the decoder reads it
    max_position_embeddings=512,
)


@dataclass
class Reference:
    """A saved tiny checkpoint, its transformers model (float64, eval) and tokenizer."""

    path: Path
    model: Any
    tokenizer: Any  # tokenizers.Tokenizer


def train_tokenizer(vocab_size: int = 300):
    """A BPE over ``▁``-marked words (Moonshine's tokenizer kind; without its byte fallback, whose
    pieces a random model would scatter into invalid UTF-8), ids 0-2 ``<unk> <s> </s>``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )
    tok.train_from_iterator(SENTENCES, trainer)
    return tok


def save_checkpoint(path: Path, seed: int = 0, shape: dict | None = None) -> Reference:
    """Save a random checkpoint of ``TINY``'s shape (``shape``: ``MoonshineStreamingConfig``
    fields in its place, e.g. ``{}`` for the config's defaults, for benchmarks) into ``path``."""
    from transformers import (
        MoonshineStreamingConfig,
        MoonshineStreamingForConditionalGeneration,
        Wav2Vec2FeatureExtractor,
    )

    tokenizer = train_tokenizer()
    config = MoonshineStreamingConfig(
        **(TINY if shape is None else shape),
        vocab_size=tokenizer.get_vocab_size(),
        decoder_start_token_id=1,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = MoonshineStreamingForConditionalGeneration(config).eval()
    randomize_(model, seed)
    model.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    Wav2Vec2FeatureExtractor(
        feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=False, return_attention_mask=True
    ).save_pretrained(path)
    return Reference(path, model.double(), tokenizer)


def hf_inputs(waveform: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """What MoonshineStreamingProcessor gives one clip: the samples zero-padded to a multiple
    of 80 and the mask of the real ones. -> (1, S') float64, (1, S') long"""
    n = len(waveform)
    padded = -(-n // 80) * 80
    x = torch.zeros(1, padded, dtype=torch.float64)
    x[0, :n] = torch.from_numpy(np.asarray(waveform, dtype=np.float32)).double()
    mask = torch.zeros(1, padded, dtype=torch.long)
    mask[0, :n] = 1
    return x, mask


def hf_generate(model, waveform: np.ndarray, max_new_tokens: int) -> list[int]:
    """transformers' greedy ``generate`` of ``model`` on one clip: the new ids (the start token
    dropped, up to and without the end token)."""
    x, mask = hf_inputs(waveform)
    with torch.no_grad():
        out = model.generate(
            input_values=x.to(model.dtype), attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False
        )
    ids = out[0, 1:].tolist()
    return ids[: ids.index(2)] if 2 in ids else ids


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Reference:
    return save_checkpoint(tmp_path_factory.mktemp("moonshine_streaming_tiny"))


@pytest.fixture(scope="module")
def hf32(reference):
    """The reference directory read back by transformers in float32 (what the engine runs)."""
    from transformers import MoonshineStreamingForConditionalGeneration

    return MoonshineStreamingForConditionalGeneration.from_pretrained(reference.path, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def engine(reference):
    """An ``oasr.ASREngine`` of the reference directory (float32, the family's defaults)."""
    import oasr

    return oasr.ASREngine(str(reference.path))


@pytest.fixture(scope="module")
def loaded(reference):
    """oasr's load of the reference directory, in float64."""
    from oasr.models import load_pretrained

    out = load_pretrained(reference.path)
    out.model.double()
    return out


@pytest.fixture(scope="module")
def waveforms(manifest) -> list[np.ndarray]:
    from oasr.audio import load_audio

    by_name = {row["audio"]: row["path"] for row in manifest}
    return [load_audio(by_name[name]) for name in CLIPS]
