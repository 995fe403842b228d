"""Fixtures of the Nemotron tests: a tiny random transformers ``Nemotron3_5AsrForRNNT`` saved the
way a Hugging Face Nemotron 3.5 ASR release is laid out (config.json, model.safetensors, a trained
tokenizer.json whose pieces stop just before the blank, processor_config.json with the feature
settings and a prompt table of several languages), and helpers to read transformers' ``generate``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "Nemotron3_5AsrForRNNT"):
    pytest.skip("transformers >= 5.24 (Nemotron3_5AsrForRNNT) is needed", allow_module_level=True)

from tests.models.parakeet.conftest import CLIPS, hf_features, parity, randomize_, train_tokenizer  # noqa: E402

__all__ = ["CLIPS", "hf_features", "parity"]

# A prompt table in the release's shape: bare codes, locales, an xx-XX spelling, a code whose
# locales share one slot (vi) and one whose locales disagree (pt), and "auto" as the default.
PROMPTS = {
    "en-US": 0,
    "en": 0,
    "en-GB": 1,
    "de-DE": 2,
    "de": 2,
    "zh-CN": 3,
    "zh-ZH": 3,
    "zh-TW": 4,
    "vi-VN": 5,
    "pt-BR": 6,
    "pt-PT": 7,
    "auto": 9,
}
NUM_PROMPTS = 10
DEFAULT_PROMPT = 9

# sliding_window 13 with 3 lookahead frames: chunks of 4, 3 chunks of history (12 frames).
TINY_ENCODER = dict(
    model_type="nemotron_asr_streaming_encoder",
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    subsampling_conv_channels=8,
    num_mel_bins=80,
    conv_kernel_size=9,
    sliding_window=13,
    default_num_lookahead_tokens=3,
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
        return int(self.model.config.blank_token_id)


def shape_transducer_(model: torch.nn.Module, seed: int = 1, blank_bias: float = 8.0) -> None:
    """Make a random transducer's greedy search non-trivial: a stronger predictor (labels change
    the joint's input), a zero-mean head and a blank bias, so rows mix blanks, single labels and
    runs up to ``max_symbols_per_step`` instead of emitting the cap on every frame."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.decoder.decoder_projector.weight.mul_(4)
        model.decoder.embedding.weight.mul_(3)
        head = model.joint.head
        head.weight.copy_(
            torch.randn(head.weight.shape, generator=g, dtype=head.weight.dtype) * 2 / head.in_features**0.5
        )
        head.bias.zero_()
        head.bias[model.config.blank_token_id] = blank_bias


def save_nemotron_checkpoint(path: Path, seed: int = 0, tags: tuple[str, ...] = (), tag_bias: float = 0.0) -> Reference:
    """The tiny checkpoint; ``tags`` are added to the tokenizer as special tokens (as a release's
    language tags, ``<en-US>``), and the joint's bias for each is raised by ``tag_bias`` so the
    model emits them."""
    from tokenizers import AddedToken
    from transformers import (
        Nemotron3_5AsrConfig,
        Nemotron3_5AsrForRNNT,
        Nemotron3_5AsrProcessor,
        NemotronAsrStreamingFeatureExtractor,
        ParakeetTokenizer,
    )

    tokenizer = train_tokenizer()
    if tags:
        tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in tags], special_tokens=True)
    config = Nemotron3_5AsrConfig(
        encoder_config=TINY_ENCODER,
        vocab_size=len(tokenizer) + 1,
        blank_token_id=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        decoder_hidden_size=24,
        num_prompts=NUM_PROMPTS,
        prompt_intermediate_size=40,
        default_prompt_id=DEFAULT_PROMPT,
        max_symbols_per_step=5,
    )
    torch.manual_seed(seed)
    model = Nemotron3_5AsrForRNNT(config).eval()
    randomize_(model, seed)
    shape_transducer_(model, seed + 1)
    with torch.no_grad():
        for tag in tags:
            model.joint.head.bias[tokenizer.convert_tokens_to_ids(tag)] += tag_bias
    model.save_pretrained(path)
    feature_extractor = NemotronAsrStreamingFeatureExtractor()
    Nemotron3_5AsrProcessor(
        feature_extractor=feature_extractor, tokenizer=tokenizer, prompt_dictionary=PROMPTS, num_prompts=NUM_PROMPTS
    ).save_pretrained(path)
    saved = ParakeetTokenizer.from_pretrained(path)
    assert len(saved) == len(tokenizer) == config.blank_token_id
    return Reference(path, model.double(), saved, feature_extractor)


def generated_labels(sequences: torch.Tensor, durations: torch.Tensor, enc_lens, blank: int):
    """transformers' greedy transducer ``generate`` output -> per-row (tokens, frames, durations).

    ``sequences[:, 0]`` is the start token; step ``s`` (column ``s + 1``) was taken at frame
    ``sum(durations[:, 1:s + 1])``; a row stops counting once that frame passes its length
    (transformers pads finished rows)."""
    rows = []
    for seq, dur, n in zip(sequences.tolist(), durations.tolist(), [int(x) for x in enc_lens]):
        frame, toks, frames, durs = 0, [], [], []
        for tok, d in zip(seq[1:], dur[1:]):
            if frame >= n:
                break
            if tok != blank:
                toks.append(tok)
                frames.append(frame)
                durs.append(d)
            frame += d
        assert frame >= n, "generate stopped before the row's last frame: raise max_new_tokens"
        rows.append((toks, frames, durs))
    return rows


@pytest.fixture(scope="session")
def nemotron_reference(tmp_path_factory) -> Reference:
    return save_nemotron_checkpoint(tmp_path_factory.mktemp("nemotron_tiny"))


@pytest.fixture(scope="session")
def waveforms(manifest) -> list:
    from oasr.audio import load_audio

    by_name = {row["audio"]: row["path"] for row in manifest}
    return [load_audio(by_name[name]) for name in CLIPS]
