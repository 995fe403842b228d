"""A tiny random FunASR SenseVoiceSmall built by funasr's own classes and written as the
released directory: config.yaml, model.pt, am.mvn, a sentencepiece model with SenseVoice's
tags as user-defined pieces (trained here on the repository's own transcripts), and
configuration.json naming them, which is how funasr finds the tokenizer and CMVN."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch

from oasr.models.sensevoice.tags import ALL_TAGS, spell
from tests.conftest import load_manifest
from tests.models.paraformer._funasr_format import config as paraformer_config
from tests.models.paraformer._funasr_format import write_am_mvn

BPE = "chn_jpn_yue_eng_ko_spectok.bpe.model"
# SenseVoice's tags, plus two of the vocabulary's other language tags that funasr's postprocessing
# leaves in the text.
TAGS = [spell(t) for t in ALL_TAGS] + ["<|de|>", "<|fr|>"]
VOCAB = 160


def write_bpe(path: Path) -> Path:
    """A sentencepiece model of ``VOCAB`` pieces over the manifest's transcripts: ``<unk>`` (0,
    SenseVoice's blank), ``<s>``, ``</s>``, then the tags as user-defined pieces."""
    import sentencepiece as spm

    text = path.with_suffix(".txt")
    lines = [row["text"] for row in load_manifest() if row["language"] in ("en", "zh", "ja", "ko")]
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(path.with_suffix("")),
        vocab_size=VOCAB,
        model_type="unigram",
        character_coverage=0.98,
        hard_vocab_limit=False,
        user_defined_symbols=TAGS,
        num_threads=1,
        minloglevel=2,
    )
    path.with_suffix(".vocab").unlink()
    text.unlink()
    return path


def without(conf: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in conf.items() if k != key}


def config() -> dict[str, Any]:
    """SenseVoiceSmall's config.yaml (as a dict) at a tiny width, training sections included."""
    return {
        "encoder": "SenseVoiceEncoderSmall",
        # the tiny SANM geometry of Paraformer's fixture, plus the tp blocks
        "encoder_conf": {**paraformer_config()["encoder_conf"], "tp_blocks": 2},
        "model": "SenseVoiceSmall",
        "model_conf": {"length_normalized_loss": True, "sos": 1, "eos": 2, "ignore_id": -1},
        "tokenizer": "SentencepiecesTokenizer",
        "tokenizer_conf": {"bpemodel": None, "unk_symbol": "<unk>", "split_with_space": True},
        "frontend": "WavFrontend",
        # as released: no dither (funasr's WavFrontend then dithers by its default, 1.0)
        "frontend_conf": {**without(paraformer_config()["frontend_conf"], "dither"), "cmvn_file": None},
        "dataset": "SenseVoiceCTCDataset",
        "train_conf": {"accum_grad": 1, "grad_clip": 5, "max_epoch": 20},
        "optim": "adamw",
        "optim_conf": {"lr": 0.00002},
    }


CONFIGURATION = {
    "framework": "pytorch",
    "task": "auto-speech-recognition",
    "model": {"type": "funasr"},
    "pipeline": {"type": "funasr-pipeline"},
    "file_path_metas": {
        "init_param": "model.pt",
        "config": "config.yaml",
        "tokenizer_conf": {"bpemodel": BPE},
        "frontend_conf": {"cmvn_file": "am.mvn"},
    },
}


def build_reference(seed: int = 0) -> tuple[torch.nn.Module, dict[str, Any]]:
    """funasr's SenseVoiceSmall from ``config()`` with random weights."""
    import funasr.models.sense_voice.model  # noqa: F401  (registers the classes)
    from funasr.register import tables

    cfg = config()
    torch.manual_seed(seed)
    cls = tables.model_classes.get("SenseVoiceSmall")
    model = cls(
        encoder=cfg["encoder"],
        encoder_conf=copy.deepcopy(cfg["encoder_conf"]),
        input_size=cfg["frontend_conf"]["n_mels"] * cfg["frontend_conf"]["lfr_m"],
        vocab_size=VOCAB,
        **cfg["model_conf"],
    ).eval()
    with torch.no_grad():
        for p in model.parameters():  # larger than the default init, so the stages differ from row to row
            p.mul_(1.5)
    return model, cfg


def write_funasr_dir(directory: Path, seed: int = 0) -> Path:
    """Write a tiny random SenseVoiceSmall directory as released; returns it."""
    import yaml

    model, cfg = build_reference(seed)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    (directory / "configuration.json").write_text(json.dumps(CONFIGURATION, indent=2), encoding="utf-8")
    torch.save(model.state_dict(), directory / "model.pt")
    write_bpe(directory / BPE)
    g = torch.Generator().manual_seed(seed + 1)
    dim = cfg["frontend_conf"]["n_mels"] * cfg["frontend_conf"]["lfr_m"]
    write_am_mvn(
        directory / "am.mvn", -(8.0 + 4.0 * torch.rand(dim, generator=g)), 0.2 + 0.2 * torch.rand(dim, generator=g)
    )
    return directory
