"""Tiny random wav2vec2-family CTC checkpoints, built and saved by transformers' own classes
(``Wav2Vec2ForCTC``, ``HubertForCTC``, ``Data2VecAudioForCTC``) with a character vocabulary
saved by ``Wav2Vec2CTCTokenizer`` and the feature extractor by ``Wav2Vec2FeatureExtractor``."""

from __future__ import annotations

import json
from pathlib import Path

import torch

# A character vocabulary as wav2vec2-base-960h's: <pad> (the blank) 0, <s>, </s>, <unk>, "|", letters.
CHARS = ["<pad>", "<s>", "</s>", "<unk>", "|", *"ETAONIHSRDLUMWCFGYPBVK'"]

# A small encoder whose conv strides make 320 samples a frame (20 ms), as the released ones.
_SHAPE = dict(
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    conv_dim=(8, 8, 8),
    conv_stride=(5, 8, 8),
    conv_kernel=(10, 8, 8),
    num_conv_pos_embedding_groups=4,
)

WAVLM_BUCKETS = dict(num_buckets=16, max_bucket_distance=40)

# name -> (transformers model class, config class, config fields)
VARIANTS = {
    # wav2vec2-base style: GroupNorm on the first conv layer, post-norm layers, even pos kernel
    "wav2vec2_group": ("Wav2Vec2ForCTC", "Wav2Vec2Config", dict(feat_extract_norm="group", num_conv_pos_embeddings=8)),
    # wav2vec2-large-lv60 style: LayerNorm conv layers with biases, pre-norm layers, odd pos kernel
    "wav2vec2_stable": (
        "Wav2Vec2ForCTC",
        "Wav2Vec2Config",
        dict(feat_extract_norm="layer", do_stable_layer_norm=True, conv_bias=True, num_conv_pos_embeddings=7),
    ),
    "hubert": ("HubertForCTC", "HubertConfig", dict(feat_extract_norm="group", num_conv_pos_embeddings=8)),
    "data2vec_audio": (
        "Data2VecAudioForCTC",
        "Data2VecAudioConfig",
        dict(num_conv_pos_embeddings=2, conv_pos_kernel_size=5, conv_bias=True),
    ),
    # WavLM, both layer orders; buckets exact to 4 frames, logarithmic to 40 (the 3-s clip's 150 frames pass it)
    "wavlm": ("WavLMForCTC", "WavLMConfig", dict(WAVLM_BUCKETS, feat_extract_norm="group", num_conv_pos_embeddings=8)),
    "wavlm_stable": (
        "WavLMForCTC",
        "WavLMConfig",
        dict(WAVLM_BUCKETS, feat_extract_norm="layer", do_stable_layer_norm=True, num_conv_pos_embeddings=7),
    ),
}


def build_random(directory: Path, variant: str, seed: int = 0, **overrides) -> Path:
    """Save a random tiny ``variant`` checkpoint (model, vocabulary, feature extractor) to
    ``directory`` as transformers does, and return it (``overrides``: more config fields)."""
    import transformers

    model_name, config_name, fields = VARIANTS[variant]
    directory.mkdir(parents=True, exist_ok=True)
    config = getattr(transformers, config_name)(
        **{**_SHAPE, **fields, **overrides}, vocab_size=len(CHARS), pad_token_id=0, bos_token_id=1, eos_token_id=2
    )
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():  # livelier logits than the initialiser's near-uniform head, and words:
        head = model.lm_head  # the delimiter about one logit deviation (||W_row||) up
        head.weight.mul_(8.0)
        head.bias[CHARS.index("|")] += head.weight.norm(dim=1).mean()
        for name, p in model.named_parameters():  # WavLM's bias table and gates: off their ~0 / 1 start
            if ".rel_attn_embed." in name or ".gru_rel_pos_" in name:
                p.normal_(0.0, 1.0)
    model.save_pretrained(directory)
    vocab = directory / "vocab.json"
    vocab.write_text(json.dumps({c: i for i, c in enumerate(CHARS)}))
    tokenizer = transformers.Wav2Vec2CTCTokenizer(str(vocab), do_lower_case=True)
    extractor = transformers.Wav2Vec2FeatureExtractor(
        do_normalize=True, return_attention_mask=getattr(config, "feat_extract_norm", "layer") == "layer"
    )
    transformers.Wav2Vec2Processor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(directory)
    return directory


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0))


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())
