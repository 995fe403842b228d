"""A tiny random MMS checkpoint as facebook/mms-1b-all is laid out, written by transformers' own
classes: ``Wav2Vec2ForCTC`` with ``adapter_attn_dim`` (its own language's adapters and head in
``model.safetensors``), one ``adapter.<lang>.safetensors`` per language (the model's
``_get_adapters()`` state dict, as MMS ships them), a nested ``vocab.json`` saved by
``Wav2Vec2CTCTokenizer`` with ``target_lang``, and the feature extractor."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.models.wav2vec2._reference import _SHAPE as SHAPE
from tests.models.wav2vec2._reference import VARIANTS

_SPECIAL = ["<pad>", "<s>", "</s>", "<unk>", "|"]
# Each language's characters: vocabularies of different sizes, as MMS's are.
VOCABS = {
    "eng": [*_SPECIAL, *"etaonis'"],
    "fra": [*_SPECIAL, *"esaitnruléèç"],
    "deu": [*_SPECIAL, *"enisräöß"[:6]],
}
DEFAULT = "eng"  # the tokenizer's target_lang, and the language of model.safetensors' adapters

# The wav2vec2 family's tiny stable-layer-norm encoder (mms-1b's kind), with adapters.
_SHAPE = {**SHAPE, **VARIANTS["wav2vec2_stable"][2], "adapter_attn_dim": 4}


def _randomise(model, vocab_size: int, generator: torch.Generator) -> None:
    """A fresh head of ``vocab_size`` rows and random adapters (lively, unlike the initialiser's)."""
    model.lm_head = torch.nn.Linear(model.config.hidden_size, vocab_size)
    model.config.vocab_size = vocab_size
    with torch.no_grad():
        for name, p in model._get_adapters().items():
            scale = 8.0 if name.startswith("lm_head.weight") else 0.5
            p.copy_(torch.randn(p.shape, generator=generator) * scale + (1.0 if name.endswith("norm.weight") else 0.0))


def build_mms(directory: Path, seed: int = 0) -> Path:
    """Save the checkpoint to ``directory`` and return it."""
    import transformers
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = transformers.Wav2Vec2Config(
        **_SHAPE, vocab_size=len(VOCABS[DEFAULT]), pad_token_id=0, bos_token_id=1, eos_token_id=2
    )
    model = transformers.Wav2Vec2ForCTC(config).eval()
    for lang in sorted(VOCABS, key=lambda x: x == DEFAULT):  # the default last: model.safetensors holds it
        _randomise(model, len(VOCABS[lang]), gen)
        state = {k: v.detach().contiguous() for k, v in model._get_adapters().items()}
        save_file(state, directory / f"adapter.{lang}.safetensors")
    model.save_pretrained(directory)
    vocab = directory / "vocab.json"
    vocab.write_text(json.dumps({lang: {c: i for i, c in enumerate(chars)} for lang, chars in VOCABS.items()}))
    tokenizer = transformers.Wav2Vec2CTCTokenizer(str(vocab), target_lang=DEFAULT)
    extractor = transformers.Wav2Vec2FeatureExtractor(do_normalize=True, return_attention_mask=True)
    transformers.Wav2Vec2Processor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(directory)
    return directory
