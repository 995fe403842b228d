"""Builders and helpers shared by the Qwen2-Audio parity tests.

The reference is a tiny random ``transformers.Qwen2AudioForConditionalGeneration``
saved with ``save_pretrained``, with a tiny byte-level BPE tokenizer trained here
that carries the family's special tokens (``<|endoftext|>``, ``<|im_start|>``,
``<|im_end|>``, ``<|AUDIO|>``, ``<|audio_bos|>``, ``<|audio_eos|>``) after its
regular pieces, as the release vocabulary does, and a config whose ids match it.
The audio geometry is the real one (128 mel bins, a 30-s window of 1500 positions);
only the widths are tiny.
"""

from __future__ import annotations

from pathlib import Path

import torch

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>")
BPE_VOCAB = 400  # regular pieces; the special tokens follow
ASR_INSTRUCTION = "Detect the language and recognize the speech:"

# Tiny widths; the GQA LM has 4 query heads over 2 K/V heads.
AUDIO = {"d_model": 16, "encoder_layers": 2, "encoder_attention_heads": 2, "encoder_ffn_dim": 32}
TEXT = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 2048,
}
INIT_STD = 0.2  # wide enough that greedy choices are not near-ties (0.02 would be)
SEED = 4321

# A fixed corpus: the tokenizer (and so every id) is the same on every machine. The
# non-Latin lines make multi-byte characters span several byte-level pieces.
CORPUS = (
    "And so my fellow Americans, ask not what your country can do for you.",
    "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background.",
    "It is easy to tell the depth of a well. These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls. The juice of lemons makes fine punch.",
    "Detect the language and recognize the speech: <|en|> <|zh|> <|fr|> <|de|>",
    "You are a helpful assistant. Audio 1: system user assistant",
    "and mister john dashwood had then leisure to consider how much there might be",
    "欢迎大家来体验达摩院推出的语音识别模型",
    "Привет, как дела? Это тест распознавания речи.",
    "こんにちは、音声認識のテストです。",
    "Bonjour à tous, ceci est un essai de reconnaissance vocale.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein.",
)


def build_tokenizer(corpus: tuple[str, ...] = CORPUS, special_tokens: tuple[str, ...] = SPECIAL_TOKENS):
    """The tiny byte-level BPE (``tokenizers.Tokenizer``) trained on ``corpus``, with the special
    tokens appended (the defaults: Qwen2-Audio's; other speech-LLM tests pass theirs)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(list(corpus) * 4, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens])
    return tok


def hf_tokenizer(tok):
    """The transformers wrapper the processor needs (left padding for batched generate)."""
    from transformers import PreTrainedTokenizerFast

    ht = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    ht.padding_side = "left"
    return ht


def processor(tok):
    """transformers' Qwen2-Audio processor over the tiny tokenizer (its default chat template)."""
    from transformers import Qwen2AudioProcessor, WhisperFeatureExtractor

    return Qwen2AudioProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=128), tokenizer=hf_tokenizer(tok))


def tiny_hf_model(tok):
    """The tiny random transformers model (float32, eval), seeded.

    Every parameter is redrawn (LayerNorm / RMSNorm gains around 1, biases random) so a
    wrongly wired bias or gain shows up in the parity figures.
    """
    from transformers import GenerationConfig, Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    text = {"model_type": "qwen2", "vocab_size": tok.get_vocab_size(), **TEXT}
    config = Qwen2AudioConfig(
        audio_config={**AUDIO, "num_mel_bins": 128, "max_source_positions": 1500},
        text_config=text,
        audio_token_index=ids["<|AUDIO|>"],
    )
    with torch.random.fork_rng(devices=[]):  # seeded without disturbing anyone else's RNG
        torch.manual_seed(SEED)
        model = Qwen2AudioForConditionalGeneration(config).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name and name.endswith("weight"):
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                else:
                    p.normal_(0.0, INIT_STD)
    model.generation_config = GenerationConfig(
        eos_token_id=[ids["<|endoftext|>"], ids["<|im_end|>"]], pad_token_id=ids["<|endoftext|>"]
    )
    return model


def build_tiny_qwen2_audio(out_dir: Path, *, omit: tuple[str, ...] = ()) -> Path:
    """Save the tiny reference (safetensors, config, generation config) with its processor
    (tokenizer.json, tokenizer / processor configs, chat template) into ``out_dir``.

    Args:
        omit: text_config keys left out of the saved config.json (read back as defaults).
    """
    import json

    tok = build_tokenizer()
    model = tiny_hf_model(tok)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    processor(tok).save_pretrained(out_dir)
    if omit:
        cfg_file = out_dir / "config.json"
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
        for key in omit:
            cfg["text_config"].pop(key, None)
        cfg_file.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return out_dir


def chat_prompt(proc, *, language_code: str | None = None, system: str | None = None) -> str:
    """The processor's chat-template rendering of one user turn (audio + ASR instruction)."""
    instruction = ASR_INSTRUCTION if language_code is None else f"{ASR_INSTRUCTION} <|{language_code}|>"
    conversation = []
    if system is not None:
        conversation.append({"role": "system", "content": system})
    conversation.append(
        {"role": "user", "content": [{"type": "audio", "audio_url": "clip"}, {"type": "text", "text": instruction}]}
    )
    return proc.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)


def base_prompt(language_code: str | None = None) -> str:
    """The pretrained checkpoint's plain ASR prompt."""
    tail = "" if language_code is None else f" <|{language_code}|>"
    return f"<|audio_bos|><|AUDIO|><|audio_eos|>{ASR_INSTRUCTION}{tail}"


# ---------------------------------------------------------------------------
# Metrics


def parity(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(cosine similarity, max |a - b|) of the flattened tensors, in float64."""
    x = a.detach().reshape(-1).to(torch.float64)
    y = b.detach().reshape(-1).to(torch.float64)
    if x.shape != y.shape:
        raise AssertionError(f"shape mismatch: {tuple(a.shape)} vs {tuple(b.shape)}")
    cos = float(torch.nn.functional.cosine_similarity(x, y, dim=0))
    return cos, float((x - y).abs().max())


COS_MIN = 0.99999
MAX_ABS = 1e-4

# Every figure checked in this session: what -> (cosine, max-abs). Written to the JSON
# file named by $OASR_PARITY_FIGURES at the end of the package (see conftest.py).
FIGURES: dict[str, tuple[float, float]] = {}


def assert_parity(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    cos, mad = parity(a, b)
    FIGURES[what] = (cos, mad)
    assert cos >= COS_MIN and mad <= MAX_ABS, (
        f"{what}: cosine {cos:.8f} (>= {COS_MIN}), max-abs {mad:.3e} (<= {MAX_ABS})"
    )
