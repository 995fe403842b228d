"""Fixtures of the Qwen3-ASR tests: a tiny random transformers ``Qwen3ASRForConditionalGeneration``
saved the way a ``-hf`` release is laid out (config.json, model.safetensors,
generation_config.json, a trained byte-level BPE tokenizer.json carrying the family's special
tokens, the feature extractor's preprocessor_config.json), the same weights renamed into the
original release layout, and real clips of unequal lengths."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

# 2.9 s, 5.3 s (several attention windows of the tiny tower) and 0.44 s (shorter than the
# extractor's 0.5-s minimum, so it is zero-padded first).
CLIPS = (
    "speechbrain_spk1_snt1.wav",
    "sense_and_sensibility_01_austen_64kb-0890.wav",
    "bambatse_20_haggard_0331.wav",
)

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
)
ASR_TEXT = "<asr_text>"

# What the tiny tokenizer is trained on (multi-byte text included).
SENTENCES = (
    "language English<asr_text>and so my fellow americans ask not what your country can do for you",
    "language Chinese<asr_text>欢迎大家来体验达摩院推出的语音识别模型",
    "language German<asr_text>Der hinter diesem Portal liegenden Raum",
    "system\nuser\nassistant\n",
    "mister john dashwood had then leisure to consider how much there might be in his power",
    "the quick brown fox jumps over the lazy dog. The child almost hurt the small dog.",
    "客観的実在の判断的知識が成立するのである。",
)

# The tiny tower attends within windows of 26 encoder frames (2 s): the 5.3-s clip spans three.
TINY_AUDIO = dict(
    num_mel_bins=128,
    encoder_layers=2,
    encoder_attention_heads=2,
    encoder_ffn_dim=32,
    d_model=16,
    n_window=50,
    n_window_infer=200,
    downsample_hidden_size=8,
    output_dim=32,
)
TINY_TEXT = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=1024,
    tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
)


@dataclass
class Reference:
    """A saved tiny checkpoint, its transformers model (float64, eval) and tokenizer."""

    path: Path
    model: Any
    tokenizer: Any  # tokenizers.Tokenizer
    feature_extractor: Any

    def token_id(self, token: str) -> int:
        return int(self.tokenizer.token_to_id(token))


def train_tokenizer(vocab_size: int = 320):
    """A byte-level BPE with the Qwen3-ASR special tokens and ``<asr_text>`` as a plain added token."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES, trainer)
    tok.add_tokens([AddedToken(ASR_TEXT, special=False, normalized=False)])
    return tok


def randomize_(model: torch.nn.Module, seed: int = 0) -> None:
    """Give every weight a non-trivial value (transformers' init leaves norms at identity and
    biases at zero), scaled so activations and logits stay O(1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif "embed_tokens" in name:
                p.copy_(noise)
            elif p.dim() > 1:
                p.copy_(noise * (1.5 / p[0].numel() ** 0.5))
            else:
                p.copy_(0.2 * noise)


def hf_config(tokenizer, **audio_overrides):
    from transformers import Qwen3ASRConfig

    vocab = tokenizer.get_vocab_size()
    ids = {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS}
    return Qwen3ASRConfig(
        audio_config={**TINY_AUDIO, **audio_overrides},
        text_config={**TINY_TEXT, "vocab_size": vocab},
        audio_token_id=ids["<|audio_pad|>"],
        pad_token_id=ids["<|im_end|>"],
        eos_token_id=[ids["<|endoftext|>"], ids["<|im_end|>"]],
    )


def save_checkpoint(path: Path, seed: int = 0) -> Reference:
    """Build, randomise and save a tiny Qwen3ASRForConditionalGeneration with its tokenizer
    and feature-extractor settings."""
    from transformers import Qwen3ASRFeatureExtractor, Qwen3ASRForConditionalGeneration

    tokenizer = train_tokenizer()
    torch.manual_seed(seed)
    model = Qwen3ASRForConditionalGeneration(hf_config(tokenizer)).eval()
    randomize_(model, seed)
    model.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    feature_extractor = Qwen3ASRFeatureExtractor()
    feature_extractor.save_pretrained(path)
    return Reference(path, model.double(), tokenizer, feature_extractor)


def save_original_layout(ref: Reference, path: Path) -> None:
    """The same weights as the original release lays them out: ``thinker_config`` in
    config.json, ``thinker.*`` tensors, the projector inside the audio tower, an explicit
    (tied) ``lm_head``."""
    from safetensors.torch import load_file, save_file

    hf = json.loads((ref.path / "config.json").read_text())
    audio = {k: v for k, v in hf["audio_config"].items() if k not in ("model_type", "max_position_embeddings")}
    text = {k: v for k, v in hf["text_config"].items() if k not in ("model_type", "rope_parameters", "layer_types")}
    text.update(
        model_type="qwen3_asr_text",
        rope_theta=hf["text_config"]["rope_parameters"]["rope_theta"],
        rope_scaling={"rope_type": "default", "mrope_section": [2, 1, 1], "interleaved": True},
    )
    config = {
        "architectures": ["Qwen3ASRForConditionalGeneration"],
        "model_type": "qwen3_asr",
        "support_languages": ["Chinese", "English", "German"],
        "thinker_config": {
            "model_type": "qwen3_asr_thinker",
            "audio_config": {**audio, "model_type": "qwen3_asr_audio_encoder", "max_source_positions": 1500},
            "text_config": text,
            "audio_token_id": hf["audio_token_id"],
            "audio_start_token_id": ref.token_id("<|audio_start|>"),
            "audio_end_token_id": ref.token_id("<|audio_end|>"),
        },
    }
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    renames = (
        ("model.audio_tower.", "thinker.audio_tower."),
        ("model.multi_modal_projector.linear_1.", "thinker.audio_tower.proj1."),
        ("model.multi_modal_projector.linear_2.", "thinker.audio_tower.proj2."),
        ("model.language_model.", "thinker.model."),
    )
    state = {}
    for name, t in load_file(str(ref.path / "model.safetensors")).items():
        for old, new in renames:
            if name.startswith(old):
                name = new + name[len(old) :]
                break
        state[name] = t
    state["thinker.lm_head.weight"] = state["thinker.model.embed_tokens.weight"].clone()
    save_file(state, str(path / "model.safetensors"))
    for name in ("tokenizer.json", "preprocessor_config.json", "generation_config.json"):
        (path / name).write_bytes((ref.path / name).read_bytes())


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> Reference:
    return save_checkpoint(tmp_path_factory.mktemp("qwen3_asr_tiny"))


@pytest.fixture(scope="session")
def original_dir(tmp_path_factory, reference) -> Path:
    path = tmp_path_factory.mktemp("qwen3_asr_original")
    save_original_layout(reference, path)
    return path


@pytest.fixture(scope="session")
def loaded(reference):
    """oasr's load of the reference directory, in float64."""
    from oasr.models import load_pretrained

    out = load_pretrained(reference.path)
    out.model.double()
    return out


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


def hf_features(feature_extractor, waveforms) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' features of each clip on its own, zero-padded to a common length (a
    multiple of the stem chunk), with the valid-frame mask: what the model sees of a batch
    whose clips were featurised one at a time."""
    feats, masks = [], []
    for w in waveforms:
        out = feature_extractor(w, sampling_rate=16000, return_tensors="pt", padding=True, return_attention_mask=True)
        feats.append(out.input_features[0])
        masks.append(out.attention_mask[0])
    t = max(f.shape[-1] for f in feats)
    x = torch.zeros(len(feats), feats[0].shape[0], t)
    m = torch.zeros(len(feats), t, dtype=torch.long)
    for i, (f, a) in enumerate(zip(feats, masks)):
        x[i, :, : f.shape[-1]] = f
        m[i, : a.shape[-1]] = a
    return x, m


def parity(ours: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(cosine, max-abs) of two tensors, flattened, in float64."""
    a, b = ours.double().flatten(), ref.double().flatten()
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0)), float((a - b).abs().max())
