"""Fixtures of the Voxtral Realtime tests: a tiny random transformers
``VoxtralRealtimeForConditionalGeneration`` saved the way the release is laid out (config.json,
model.safetensors, generation_config.json, preprocessor_config.json and a ``tekken.json`` whose
byte-level BPE is trained here on a few sentences and which carries the release's audio
section), the reference processor built on it, and real clips."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("mistral_common")

# 2.9 s and 0.44 s (shorter than one left-pad + delay window).
CLIPS = ("speechbrain_spk1_snt1.wav", "bambatse_20_haggard_0331.wav")

SENTENCES = (
    "and so my fellow americans ask not what your country can do for you",
    "mister john dashwood had then leisure to consider how much there might be in his power",
    "the quick brown fox jumps over the lazy dog. The child almost hurt the small dog.",
    "Der hinter diesem Portal liegenden Raum",
)
PATTERN = "|".join(  # the release's pre-tokenizer
    (
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
        r"\p{N}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    )
)
N_SPECIAL = 40
VOCAB = 300  # 256 bytes + 44 merges

# The release's audio section, with fewer left-pad tokens (32 in the release) to keep the tiny
# clips short.
AUDIO = {
    "sampling_rate": 16000,
    "frame_rate": 12.5,
    "audio_encoding_config": {"num_mel_bins": 128, "hop_length": 160, "window_size": 400},
    "chunk_length_s": None,
    "transcription_format": "streaming",
    "transcription_delay_ms": 480,
    "streaming_look_ahead_ms": 2.5,
    "streaming_look_back_ms": 52.5,
    "streaming_n_left_pad_tokens": 4,
}

# The tiny tower attends within 12 encoder frames (0.24 s), so the clips span many windows.
TINY_AUDIO = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    head_dim=8,
    num_mel_bins=128,
    sliding_window=12,
    max_position_embeddings=1500,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
)
TINY_TEXT = dict(
    vocab_size=N_SPECIAL + VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=4096,
    sliding_window=8192,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
)


def _special_tokens() -> list[dict]:
    from mistral_common.tokens.tokenizers.base import SpecialTokens

    return [{"rank": i, "token_str": str(t), "is_control": True} for i, t in enumerate(SpecialTokens)]


def write_tekken(path: Path) -> None:
    """A ``tekken.json`` with a byte-level BPE trained on ``SENTENCES`` (tiktoken's trainer)."""
    from tiktoken._educational import bpe_train

    ranks = bpe_train(" ".join(SENTENCES), VOCAB, PATTERN, visualise=None)
    vocab = [
        {"rank": r, "token_bytes": base64.b64encode(b).decode(), "token_str": b.decode("utf-8", "replace")}
        for b, r in sorted(ranks.items(), key=lambda kv: kv[1])
    ]
    data = {
        "config": {
            "pattern": PATTERN,
            "num_vocab_tokens": len(vocab),
            "default_vocab_size": N_SPECIAL + len(vocab),
            "default_num_special_tokens": N_SPECIAL,
            "version": "v13",
        },
        "vocab": vocab,
        "special_tokens": _special_tokens(),
        "audio": AUDIO,
    }
    path.write_text(json.dumps(data))


@dataclass
class TinyVoxtralRealtime:
    path: Path  # the release-layout directory
    model: torch.nn.Module  # the transformers model, float64, eval
    processor: object  # transformers' VoxtralRealtimeProcessor on the same files
    clips: list[np.ndarray]  # 16-kHz float32 mono


def save_checkpoint(path: Path, audio: dict = TINY_AUDIO, text: dict = TINY_TEXT):
    """Save a random checkpoint of the ``audio`` / ``text`` config shapes (the tiny ones, or a
    larger one for benchmarks) into ``path`` in the release's layout.
    -> (transformers model, float32, eval; its processor)"""
    from transformers import (
        MistralCommonBackend,
        VoxtralRealtimeConfig,
        VoxtralRealtimeFeatureExtractor,
        VoxtralRealtimeForConditionalGeneration,
        VoxtralRealtimeProcessor,
    )

    write_tekken(path / "tekken.json")
    tokenizer = MistralCommonBackend(tokenizer_path=str(path / "tekken.json"))
    special = {t["token_str"]: t["rank"] for t in _special_tokens()}
    text = dict(text, bos_token_id=special["<s>"], eos_token_id=special["</s>"], pad_token_id=special["<pad>"])
    config = VoxtralRealtimeConfig(audio_config=audio, text_config=text)
    torch.manual_seed(0)
    model = VoxtralRealtimeForConditionalGeneration(config)
    with torch.no_grad():  # larger than the init's 0.02 so that greedy picks vary with the audio
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.3 if "embed" not in name else 1.0)
    model.eval()
    model.save_pretrained(path)
    extractor = VoxtralRealtimeFeatureExtractor()
    extractor.save_pretrained(path)
    return model, VoxtralRealtimeProcessor(extractor, tokenizer)


@pytest.fixture(scope="session")
def tiny_voxtral_realtime(tmp_path_factory, audio_dir) -> TinyVoxtralRealtime:
    from oasr.audio import load_audio

    path = tmp_path_factory.mktemp("voxtral-realtime-tiny")
    model, processor = save_checkpoint(path)
    clips = [load_audio(str(audio_dir / name), 16000) for name in CLIPS]
    return TinyVoxtralRealtime(path, model.double(), processor, clips)
