"""MMS checkpoint directories (facebook/mms-1b-all's layout; see ``adapters.py``): a
``Wav2Vec2ForCTC`` directory whose config sets ``adapter_attn_dim``, with
``adapter.<lang>.safetensors`` files and a nested ``vocab.json`` beside the weights.

The encoder, the weights of the checkpoint's own language and the front end are read as the
wav2vec2 family reads them (``convert.py``); the adapter tensors keep their names under
``encoder.`` (``wav2vec2.encoder.layers.0.adapter_layer.norm.weight`` ->
``encoder.layers.0.adapter_layer.norm.weight``). Every adapter file is checked at load, from
its header (names and shapes), and a language is offered when it has both an adapter file and a
vocabulary (or is the tokenizer's ``target_lang``, the checkpoint's own weights).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oasr.models.base import LoadError
from oasr.models.formats.hf import model_type as hf_model_type
from oasr.models.formats.hf import read_json, read_json_if_present
from oasr.models.wav2vec2.adapters import adapter_files, check_adapter_file, read_vocabularies
from oasr.models.wav2vec2.convert import HFWav2Vec2Converter, config_fields
from oasr.models.wav2vec2.mms import MmsConfig

ARCH = "mms"


def is_mms(path: Path) -> bool:
    """A wav2vec2 directory whose config sets ``adapter_attn_dim`` (MMS's attention adapters)."""
    if not path.is_dir() or hf_model_type(path) != "wav2vec2":
        return False
    return read_json(path / "config.json").get("adapter_attn_dim") is not None


def mms_config(path: Path, hf: Mapping[str, Any]) -> MmsConfig:
    """The model config of ``path`` (its config.json read into ``hf``): the wav2vec2 fields, the
    adapters' width, the tokenizer's ``target_lang`` and the adapter files the load checked.

    Raises:
        LoadError: a flat vocab.json, no ``target_lang`` or one it lacks, or an adapter file
            that does not fit the model.
    """
    where = str(path / "config.json")
    fields = config_fields({**hf, "adapter_attn_dim": None}, where)
    attn_dim = int(hf["adapter_attn_dim"])
    try:
        vocabs = read_vocabularies(path / "vocab.json")
    except (OSError, ValueError) as e:
        raise LoadError(f"{path / 'vocab.json'}: {e}") from e
    if vocabs is None:
        raise LoadError(f"{path}: adapter_attn_dim is set but vocab.json is not one vocabulary per language (MMS's)")
    target = read_json_if_present(path / "tokenizer_config.json").get("target_lang")
    if target is None:
        raise LoadError(
            f"{path}: tokenizer_config.json names no target_lang, so the language of the checkpoint's own "
            f"head is unknown; set it (transformers' processor.tokenizer.set_target_lang + save_pretrained)"
        )
    if target not in vocabs:
        raise LoadError(f"{path}: the tokenizer's target_lang {target!r} has no vocabulary in vocab.json")
    try:
        config = MmsConfig.from_dict({**fields, "adapter_attn_dim": attn_dim, "target_lang": target})
    except (TypeError, ValueError) as e:
        raise LoadError(f"{where}: {e}") from e
    files = adapter_files(path)
    sizes = {}
    for lang, file in files.items():
        if lang in vocabs:
            try:
                sizes[lang] = check_adapter_file(file, config.num_hidden_layers, config.hidden_size, attn_dim)
            except (OSError, ValueError) as e:
                raise LoadError(f"{path}: {e}") from e
    unmatched = sorted(set(files) - set(sizes))
    if unmatched:
        warnings.warn(
            f"{path}: adapter files without a vocabulary in vocab.json are not offered: {unmatched[:10]}",
            UserWarning,
            stacklevel=4,
        )
    return dataclasses.replace(config, adapter_dir=str(path), adapter_vocab_sizes=sizes)


class HFMmsConverter(HFWav2Vec2Converter):
    """A transformers ``Wav2Vec2ForCTC`` directory with MMS adapters: read as the wav2vec2 family
    reads it, into an ``MmsConfig``; the vocabulary is the ``target_lang`` one (the own head's)."""

    architecture = ARCH
    base_prefix: Mapping[str, str] = {"wav2vec2": "wav2vec2"}

    def can_load(self, path: Path) -> bool:
        return is_mms(path) and (path / "vocab.json").is_file()

    def make_config(self, hf: Mapping[str, Any], where: str) -> MmsConfig:
        return mms_config(Path(where).parent, hf)


__all__ = ["HFMmsConverter", "is_mms", "mms_config"]
