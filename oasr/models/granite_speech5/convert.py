"""Hugging Face ``GraniteSpeech5ForCTC`` checkpoints (config.json ``model_type: granite_speech5_ctc``).

A directory holds config.json (CTC fields + a nested ``encoder_config``), the weights
(safetensors, sharded or not, or ``pytorch_model.bin``), the tokenizer (tokenizer.json, or a
sentencepiece ``.model``) and the feature-extractor settings (preprocessor_config.json, or the
``feature_extractor`` entry of processor_config.json).

Tensor names are the model's own. The release ties the CTC head to the encoder's
self-conditioning head ``encoder.out`` (``tie_word_embeddings``), so its file holds only the
latter: the head is filled from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from oasr.models.base import DecodeType, DecodingSpec, FeatureSpec, LoadError
from oasr.models.formats.hf import feature_extractor_config, read_json
from oasr.models.formats.hf import load_hf_weights as _load_weights
from oasr.models.formats.hf import model_type as hf_model_type
from oasr.models.granite_speech5.config import GraniteSpeech5Config
from oasr.models.lasr.convert import _tokenizer_spec  # the same HF CTC tokenizer layout
from oasr.models.registry import CheckpointBundle

ARCH = "granite_speech5"
MODEL_TYPE = "granite_speech5_ctc"

# Encoder config fields read 1:1 into GraniteSpeech5Config.
_ENCODER_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "head_dim",
    "num_mel_bins",
    "hidden_act",
    "max_position_embeddings",
    "context_size",
    "conv_kernel_size",
    "conv_expansion_factor",
    "subsample_layers",
    "attention_bias",
)
# transformers' names of activations oasr knows under another name.
_ACTIVATION_ALIASES = {"swish": "silu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
# preprocessor_config.json fields -> the front end's parameters.
_FEATURE_FIELDS = {
    "num_mel_bins": "n_mels",
    "n_fft": "n_fft",
    "win_length": "win_length",
    "hop_length": "hop_length",
    "delta_win_length": "delta_win_length",
    "logmel_floor_db": "logmel_floor_db",
}


def config_from_hf(hf: Mapping[str, Any], where: str = "config.json") -> GraniteSpeech5Config:
    """``GraniteSpeech5Config`` from a ``granite_speech5_ctc`` config.json dict.

    Raises:
        LoadError: grouped key/value heads, a vocabulary the encoder does not share, or a
            field value oasr does not run.
    """
    enc = dict(hf.get("encoder_config") or {})
    heads = enc.get("num_attention_heads", 8)
    if enc.get("num_key_value_heads") not in (None, heads):
        raise LoadError(f"{where}: num_key_value_heads={enc['num_key_value_heads']} != num_attention_heads={heads}")
    vocab = hf.get("vocab_size", 16384)
    if enc.get("vocab_size", vocab) != vocab:
        raise LoadError(f"{where}: encoder vocab_size={enc['vocab_size']} != CTC vocab_size={vocab}")
    fields = {k: enc[k] for k in _ENCODER_FIELDS if enc.get(k) is not None}
    if "hidden_act" in fields:
        fields["hidden_act"] = _ACTIVATION_ALIASES.get(fields["hidden_act"], fields["hidden_act"])
    fields["vocab_size"] = vocab
    fields["blank_id"] = hf.get("pad_token_id", 0)
    try:
        return GraniteSpeech5Config.from_dict(fields)
    except (TypeError, ValueError) as e:
        raise LoadError(f"{where}: {e}") from e


def _feature_spec(directory: Path, config: GraniteSpeech5Config) -> FeatureSpec:
    pre, _ = feature_extractor_config(directory)
    kind = pre.get("feature_extractor_type", "GraniteSpeech5FeatureExtractor")
    if kind != "GraniteSpeech5FeatureExtractor":
        raise LoadError(f"{directory}: feature_extractor_type={kind!r} is not GraniteSpeech5FeatureExtractor")
    params = {ours: pre[theirs] for theirs, ours in _FEATURE_FIELDS.items() if pre.get(theirs) is not None}
    n_mels = int(params.setdefault("n_mels", config.num_mel_bins))
    if n_mels != config.num_mel_bins:
        raise LoadError(
            f"{directory}: the feature extractor makes {n_mels} mel bins, the encoder reads {config.num_mel_bins}"
        )
    return FeatureSpec(kind="granite_speech5_mel", sampling_rate=int(pre.get("sampling_rate", 16000)), params=params)


class HFGraniteSpeech5Converter:
    """A transformers ``GraniteSpeech5ForCTC`` directory (ibm-granite/granite-speech-5.0-470m-turboctc layout)."""

    architecture = ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = ()
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        return path.is_dir() and hf_model_type(path) == MODEL_TYPE

    def load(self, path: Path) -> CheckpointBundle:
        hf = read_json(path / "config.json")
        if hf.get("model_type") != MODEL_TYPE:
            raise LoadError(f"{path}: model_type={hf.get('model_type')!r} is not {MODEL_TYPE!r}")
        config = config_from_hf(hf, str(path / "config.json"))
        state: dict[str, torch.Tensor] = dict(_load_weights(path))
        for part in ("weight", "bias"):
            if f"ctc_head.{part}" not in state and f"encoder.out.{part}" in state:
                if not hf.get("tie_word_embeddings", True):
                    raise LoadError(f"{path}: ctc_head.{part} is missing and the config does not tie it to encoder.out")
                state[f"ctc_head.{part}"] = state[f"encoder.out.{part}"]
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=_tokenizer_spec(path, config.blank_id),
            features=_feature_spec(path, config),
            # The TurboCTC releases are English-only: language="en" is accepted, others refused.
            decoding=DecodingSpec(
                decode_type=DecodeType.CTC, params={"blank_id": config.blank_id, "languages": ("en",)}
            ),
            source=str(path),
            format="huggingface",
        )
