"""Fixtures of the punctuation tests: the CT-Transformer's released layout written from oasr's
own random model (no funasr needed), over any word list."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.postprocess._funasr_punc import config


def write_oasr_punc_dir(directory: Path, words: list[str], seed: int = 0) -> Path:
    """A random CT-Transformer over ``words`` in FunASR's layout (config.yaml, model.pt,
    tokens.json), its head biased as the funasr fixture's so that every mark occurs."""
    import yaml

    from oasr.postprocess.punctuation import CtTransformer, _model_config

    tokens = ["<blank>", "<s>", "</s>", *words, "<unk>"]
    cfg = config()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    torch.manual_seed(seed)
    model = CtTransformer(_model_config(directory / "config.yaml", cfg, len(tokens)))
    with torch.no_grad():
        model.embed.weight.mul_(0.5)
        model.decoder.weight.mul_(4.0)
        model.decoder.bias.copy_(torch.tensor([-3.0, 1.5, 0.5, 0.5, 0.0, -0.5]))
    torch.save(model.state_dict(), directory / "model.pt")
    (directory / "tokens.json").write_text(json.dumps(tokens, ensure_ascii=False), encoding="utf-8")
    return directory
