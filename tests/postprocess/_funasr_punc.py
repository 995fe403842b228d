"""A tiny random FunASR CT-Transformer punctuation model built by funasr's own classes and written
as its released directory (config.yaml, model.pt, tokens.json)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch

from tests.models.paraformer._funasr_format import config as paraformer_config

D = 16
PUNC_LIST = ["<unk>", "_", "，", "。", "？", "、"]
CHARS = list("我们都是木头人不会讲话动今天气很好你在做什么吗他说的对")
WORDS = ["hello", "world", "how", "are", "you", "today", "i", "am", "fine", "thank", "the", "weather", "is", "nice"]
TOKENS = ["<blank>", "<s>", "</s>", *CHARS, *WORDS, "<unk>"]
# A word-level model's extra words (ct-punc's kind: jieba cuts Chinese into words), and its
# jieba_usr_dict ("word frequency tag" lines; one word jieba's own dictionary lacks).
ZH_WORDS = ["我们", "都是", "木头人", "不会", "讲话", "今天", "天气", "很好", "什么", "他说", "木头人不会"]
USER_DICT = "木头人不会 50 n\n木头人 100 n\n"


def config() -> dict[str, Any]:
    """A FunASR CT-Transformer config.yaml (as a dict) of the released layout at a tiny width."""
    return {
        "model": "CTTransformer",
        "model_conf": {
            "ignore_id": 0,
            "embed_unit": D,
            "att_unit": D,
            "dropout_rate": 0.1,
            "punc_list": PUNC_LIST,
            "punc_weight": [1.0] * len(PUNC_LIST),
            "sentence_end_id": 3,
        },
        "encoder": "SANMEncoder",
        # Paraformer's SANM encoder options (tests/models/paraformer), at this width, over embeddings.
        "encoder_conf": {
            **paraformer_config()["encoder_conf"],
            "input_size": D,
            "output_size": D,
            "attention_heads": 2,
            "linear_units": 24,
            "num_blocks": 2,
            "attention_dropout_rate": 0.0,
            "padding_idx": 0,
        },
        "tokenizer": "CharTokenizer",
        "tokenizer_conf": {"unk_symbol": "<unk>"},
    }


def build_reference(
    seed: int = 0, bias: list[float] | None = None, tokens: list[str] = TOKENS
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """funasr's ``CTTransformer`` from ``config()`` with random weights, scaled up so that the
    punctuation it predicts differs from token to token (commas, periods and questions all occur);
    ``bias``: the head's bias per mark (the default makes ``<unk>`` rare and no mark the commonest)."""
    import funasr.models.ct_transformer.model  # noqa: F401  (registers the class)
    import funasr.models.sanm.encoder  # noqa: F401
    from funasr.register import tables

    cfg = config()
    torch.manual_seed(seed)
    cls = tables.model_classes.get("CTTransformer")
    kwargs = copy.deepcopy(cfg)
    model = cls(
        encoder=kwargs["encoder"], encoder_conf=kwargs["encoder_conf"], vocab_size=len(tokens), **kwargs["model_conf"]
    ).eval()
    with torch.no_grad():
        model.embed.weight.mul_(2.0)
        model.decoder.weight.mul_(4.0)
        model.decoder.bias.copy_(torch.tensor(bias or [-3.0, 1.5, 0.5, 0.5, 0.0, -0.5]))
    return model, cfg


def write_funasr_punc_dir(
    directory: Path, seed: int = 0, bias: list[float] | None = None, word_level: bool = False
) -> Path:
    """Write the tiny random punctuation model's directory (``word_level``: with ``ZH_WORDS``
    and a ``jieba_usr_dict``, as ct-punc ships); returns it."""
    import yaml

    tokens = [*TOKENS[:-1], *ZH_WORDS, TOKENS[-1]] if word_level else TOKENS
    model, cfg = build_reference(seed, bias, tokens)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    torch.save(model.state_dict(), directory / "model.pt")
    (directory / "tokens.json").write_text(json.dumps(tokens, ensure_ascii=False), encoding="utf-8")
    if word_level:
        (directory / "jieba_usr_dict").write_text(USER_DICT, encoding="utf-8")
    return directory
