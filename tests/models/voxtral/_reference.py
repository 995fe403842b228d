"""Builders shared by the Voxtral tests.

The reference is a tiny random ``transformers.VoxtralForConditionalGeneration`` saved with
``save_pretrained``, with a tiny byte-level BPE tokenizer trained here whose first ids are
the tekken special tokens at the release's ranks (``<s>`` 1, ``</s>`` 2, ``[INST]`` 3,
``[/INST]`` 4, ``[AUDIO]`` 24, ``[BEGIN_AUDIO]`` 25, ``[TRANSCRIBE]`` 34, fillers between),
as transformers' tekken converter lays them out, and Whisper's feature extractor. The audio
geometry is the real one (128 mel bins, 30-s windows of 1500 positions, four frames per
audio token); only the widths are tiny.

transformers' Voxtral processor builds its prompts through mistral-common (not installed
here); ``transcription_ids`` / ``chat_ids`` write the same ids as mistral-common's
``encode_transcription`` / ``encode_chat_completion`` (instruct tokenizer v7) do, from its
source: ``<s>[INST][BEGIN_AUDIO][AUDIO]x n[/INST]`` + ``lang:xx`` + ``[TRANSCRIBE]``, and
``<s>[INST][BEGIN_AUDIO][AUDIO]x n<text>[/INST]``; and ``features`` is the processor's
``_retrieve_input_features`` (the extractor padding to a multiple of 480000 samples, split
into 3000-frame windows).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

# The tekken special tokens at their ranks (fillers where Voxtral's list has others).
SPECIALS = {0: "<unk>", 1: "<s>", 2: "</s>", 3: "[INST]", 4: "[/INST]", 11: "<pad>", 17: "[SYSTEM_PROMPT]"}
SPECIALS |= {18: "[/SYSTEM_PROMPT]", 24: "[AUDIO]", 25: "[BEGIN_AUDIO]", 34: "[TRANSCRIBE]"}
N_SPECIAL = 36
SPECIAL_TOKENS = [SPECIALS.get(i, f"<SPECIAL_{i}>") for i in range(N_SPECIAL)]
BPE_VOCAB = 420  # special tokens included

AUDIO = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
TEXT = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "rope_theta": 100000000.0,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 2048,
}
INIT_STD = 0.2  # wide enough that greedy choices are not near-ties
SEED = 2507

CORPUS = (
    "And so my fellow Americans, ask not what your country can do for you.",
    "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "lang:en lang:fr lang:de lang:es lang:it lang:pt lang:nl lang:hi",
    "What is said in this audio? Summarize it. Who speaks?",
    "Bonjour à tous, ceci est un essai de reconnaissance vocale.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein.",
    "नमस्ते, यह एक परीक्षण है।",
)


def build_tokenizer():
    """The tiny byte-level BPE (``tokenizers.Tokenizer``), special tokens at ids 0..35."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        show_progress=False,
    )
    tok.train_from_iterator(list(CORPUS) * 4, trainer)
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(N_SPECIAL))
    return tok


def tiny_hf_model(tok):
    """The tiny random transformers model (float32, eval), seeded; every parameter redrawn
    (norm gains around 1) so that a miswired gain or bias shows in the parity figures."""
    from transformers import GenerationConfig, VoxtralConfig, VoxtralForConditionalGeneration

    config = VoxtralConfig(
        audio_config={**AUDIO, "num_mel_bins": 128, "max_source_positions": 1500},
        text_config={**TEXT, "vocab_size": tok.get_vocab_size()},
        audio_token_id=24,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = VoxtralForConditionalGeneration(config).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name and name.endswith("weight"):
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                else:
                    p.normal_(0.0, INIT_STD)
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=11)
    return model


def feature_extractor():
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=128)


def build_tiny_voxtral(out_dir: Path) -> Path:
    """Save the tiny reference (safetensors, config, generation config), its tokenizer.json
    and the feature extractor's preprocessor_config.json into ``out_dir``."""
    tok = build_tokenizer()
    model = tiny_hf_model(tok)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save(str(out_dir / "tokenizer.json"))
    feature_extractor().save_pretrained(out_dir)
    return out_dir


def features(clip) -> torch.Tensor:
    """The Voxtral processor's input features of one clip: (windows, 128, 3000)."""
    fe = feature_extractor()
    x = fe(clip, sampling_rate=16000, padding=True, truncation=False, pad_to_multiple_of=480000, return_tensors="pt")
    return x["input_features"].reshape(128, -1, 3000).transpose(0, 1)


def transcription_ids(tok, n_audio: int, language: str | None = None) -> list[int]:
    """mistral-common's transcription request ids."""
    ids = [1, 3, 25] + [24] * n_audio + [4]
    if language is not None:
        ids += tok.encode(f"lang:{language}").ids
    return ids + [34]


def chat_ids(tok, n_audio: int, text: str) -> list[int]:
    """mistral-common's chat ids of one user turn: the audio, then the text."""
    return [1, 3, 25] + [24] * n_audio + tok.encode(text).ids + [4]


def parity(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(cosine similarity, max |a - b|) of the flattened tensors, in float64."""
    x = a.detach().reshape(-1).to(torch.float64)
    y = b.detach().reshape(-1).to(torch.float64)
    if x.shape != y.shape:
        raise AssertionError(f"shape mismatch: {tuple(a.shape)} vs {tuple(b.shape)}")
    return float(torch.nn.functional.cosine_similarity(x, y, dim=0)), float((x - y).abs().max())


COS_MIN = 0.9999999
MAX_ABS = 1e-9  # float64 on both sides
FIGURES: dict[str, tuple[float, float]] = {}


# transformers' Llama rotary embedding takes its angles in float32 even in a float64 model
# (``position_ids.float() * inv_freq.float()``), so the LM stages match to float32 rounding of
# cos / sin (at positions up to ~770 with theta 1e8), not to float64's.
LM_MAX_ABS = 1e-5


def assert_parity(a: torch.Tensor, b: torch.Tensor, what: str, max_abs: float = MAX_ABS) -> None:
    cos, mad = parity(a, b)
    FIGURES[what] = (cos, mad)
    assert cos >= COS_MIN and mad <= max_abs, f"{what}: cosine {cos:.10f} (>= {COS_MIN}), max-abs {mad:.3e}"


def write_figures(path: str) -> None:
    Path(path).write_text(json.dumps(FIGURES, indent=1), encoding="utf-8")


# GPT-2's pre-tokenizer split (the tiny BPE's ByteLevel regex), as a tekken "pattern".
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def write_tekken(tok, path: Path) -> Path:
    """The tiny tokenizer as a release-style ``tekken.json``: the special tokens by rank, then
    every byte-level piece as raw bytes ranked in the tokenizer's id order."""
    import base64

    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    vocab = sorted(((i, t) for t, i in tok.get_vocab().items() if i >= N_SPECIAL))
    entries = []
    for rank, (_, piece) in enumerate(vocab):
        raw = bytes(byte_of[c] for c in piece)
        entries.append({"rank": rank, "token_bytes": base64.b64encode(raw).decode(), "token_str": None})
    data = {
        "config": {
            "pattern": GPT2_PATTERN,
            "num_vocab_tokens": len(entries) + N_SPECIAL,
            "default_vocab_size": len(entries) + N_SPECIAL,
            "default_num_special_tokens": N_SPECIAL,
            "version": "v7",
        },
        "vocab": entries,
        "special_tokens": [{"rank": i, "token_str": t, "is_control": True} for i, t in enumerate(SPECIAL_TOKENS)],
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path
