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

import warnings
from pathlib import Path

from oasr.models.base import DecodeType, DecodingSpec, LoadError
from oasr.models.formats.hf import load_hf_weights, read_json, read_json_if_present
from oasr.models.formats.hf import model_type as hf_model_type
from oasr.models.registry import CheckpointBundle
from oasr.models.wav2vec2.adapters import adapter_files, check_adapter_file, read_vocabularies
from oasr.models.wav2vec2.convert import (
    HFWav2Vec2Converter,
    _feature_spec,
    _tokenizer_spec,
    config_from_hf,
    fold_weight_norm,
    rename,
)
from oasr.models.wav2vec2.mms import MmsConfig

ARCH = "mms"


def is_mms(path: Path) -> bool:
    """A wav2vec2 directory whose config sets ``adapter_attn_dim`` (MMS's attention adapters)."""
    if not path.is_dir() or hf_model_type(path) != "wav2vec2":
        return False
    return read_json(path / "config.json").get("adapter_attn_dim") is not None


def mms_config(path: Path) -> MmsConfig:
    """The model config: the wav2vec2 one, the adapters' width, the tokenizer's ``target_lang``
    and the adapter files the load checked.

    Raises:
        LoadError: a flat vocab.json, a ``target_lang`` it lacks, or an adapter file that does
            not fit the model.
    """
    hf = read_json(path / "config.json")
    base = config_from_hf({**hf, "adapter_attn_dim": None}, str(path / "config.json"))
    try:
        vocabs = read_vocabularies(path / "vocab.json")
    except (OSError, ValueError) as e:
        raise LoadError(f"{path / 'vocab.json'}: {e}") from e
    if vocabs is None:
        raise LoadError(f"{path}: adapter_attn_dim is set but vocab.json is not one vocabulary per language (MMS's)")
    target = read_json_if_present(path / "tokenizer_config.json").get("target_lang")
    if target is not None and target not in vocabs:
        raise LoadError(f"{path}: the tokenizer's target_lang {target!r} has no vocabulary in vocab.json")
    if target is None:
        raise LoadError(
            f"{path}: tokenizer_config.json names no target_lang, so the language of the checkpoint's own "
            f"head is unknown; set it (transformers' processor.tokenizer.set_target_lang + save_pretrained)"
        )
    sizes = {}
    files = adapter_files(path)
    for lang, file in files.items():
        if lang not in vocabs:
            continue
        try:
            sizes[lang] = check_adapter_file(
                file, base.num_hidden_layers, base.hidden_size, int(hf["adapter_attn_dim"])
            )
        except (OSError, ValueError) as e:
            raise LoadError(f"{path}: {e}") from e
    unmatched = sorted(set(files) - set(sizes))
    if unmatched:
        warnings.warn(
            f"{path}: adapter files without a vocabulary in vocab.json are not offered: {unmatched[:10]}",
            UserWarning,
            stacklevel=3,
        )
    try:
        return MmsConfig.from_dict(
            {
                **base.to_dict(),
                "adapter_attn_dim": int(hf["adapter_attn_dim"]),
                "target_lang": target,
                "adapter_dir": str(path),
                "adapter_vocab_sizes": sizes,
            }
        )
    except (TypeError, ValueError) as e:
        raise LoadError(f"{path / 'config.json'}: {e}") from e


class HFMmsConverter(HFWav2Vec2Converter):
    """A transformers ``Wav2Vec2ForCTC`` directory with MMS adapters."""

    architecture = ARCH

    def can_load(self, path: Path) -> bool:
        return is_mms(path) and (path / "vocab.json").is_file()

    def load(self, path: Path) -> CheckpointBundle:
        config = mms_config(path)
        state = {}
        for name, t in fold_weight_norm(load_hf_weights(path), str(path)).items():
            new = rename(name, "wav2vec2")
            state[new if new is not None else name] = t  # unknown names reach the load report
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=_tokenizer_spec(path, config),  # the target_lang vocabulary, the own head's
            features=_feature_spec(path),
            decoding=DecodingSpec(decode_type=DecodeType.CTC, params={"blank_id": config.blank_id}),
            source=str(path),
            format="huggingface",
        )


__all__ = ["HFMmsConverter", "is_mms", "mms_config"]
