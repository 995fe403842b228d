"""What the NeMo-lineage families (Parakeet, Nemotron; next: ``.nemo`` checkpoints, Canary) share
when they are read from a Hugging Face directory: the FastConformer ``encoder_config`` fields, the
tensor renames (attention projections; the transducer's predictor and joint), the
``ParakeetFeatureExtractor`` settings and the ``tokenizer.json`` spec.

Family-neutral on purpose: a family's converter imports this module, never another family's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from oasr.models.base import FeatureSpec, LoadError, TokenizerSpec
from oasr.models.formats.hf import read_json

# encoder_config keys that become the FastConformer encoder config's fields (same names).
ENCODER_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "attention_bias",
    "convolution_bias",
    "conv_kernel_size",
    "subsampling_factor",
    "subsampling_conv_channels",
    "num_mel_bins",
    "subsampling_conv_kernel_size",
    "subsampling_conv_stride",
    "scale_input",
)

# Hugging Face attention projection names -> oasr's.
ATTENTION_RENAMES = (
    (re.compile(r"\.self_attn\.q_proj\."), ".self_attn.linear_q."),
    (re.compile(r"\.self_attn\.k_proj\."), ".self_attn.linear_k."),
    (re.compile(r"\.self_attn\.v_proj\."), ".self_attn.linear_v."),
    (re.compile(r"\.self_attn\.o_proj\."), ".self_attn.linear_out."),
    (re.compile(r"\.self_attn\.relative_k_proj\."), ".self_attn.linear_pos."),
)

# The transducer's predictor and joint, Hugging Face names -> oasr's.
TRANSDUCER_RENAMES = (
    (re.compile(r"^decoder\."), "predictor."),
    (re.compile(r"^encoder_projector\."), "joiner.encoder_proj."),
    (re.compile(r"^joint\.head\."), "joiner.head."),
)

# Hugging Face ParakeetFeatureExtractor defaults, for keys a preprocessor_config.json omits; the
# keys are the ``parakeet_mel`` front end's parameters, in its order.
FEATURE_DEFAULTS: dict[str, Any] = {
    "feature_size": 80,
    "hop_length": 160,
    "n_fft": 512,
    "win_length": 400,
    "preemphasis": 0.97,
}


def transducer_fields(hf: Mapping[str, Any], vocab_size: int) -> dict[str, Any]:
    """The predictor / joint fields of a transducer config from a Hugging Face ``config.json``
    (NeMo's defaults where it is silent: blank last, 640 hidden, 2 LSTM layers, 10 symbols a frame).

    Raises:
        TypeError, ValueError: a value that is not a number (the caller names the file).
    """
    return {
        "vocab_size": vocab_size,
        "blank_id": int(hf.get("blank_token_id", vocab_size - 1)),
        "decoder_hidden_size": int(hf.get("decoder_hidden_size", 640)),
        "num_decoder_layers": int(hf.get("num_decoder_layers", 2)),
        "max_symbols_per_step": int(hf.get("max_symbols_per_step", 10)),
    }


def rename(weights: Mapping[str, torch.Tensor], renames) -> dict[str, torch.Tensor]:
    """The tensors under oasr's names: each ``(pattern, replacement)`` of ``renames`` applied in turn."""
    state: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        for pattern, repl in renames:
            name = pattern.sub(repl, name)
        state[name] = tensor
    return state


def transducer_state(weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face NeMo-transducer tensor names -> oasr's (encoder attention, predictor, joint)."""
    return rename(weights, (*ATTENTION_RENAMES, *TRANSDUCER_RENAMES))


def mel_params(fe: Mapping[str, Any], source: Path, num_mel_bins: int) -> dict[str, Any]:
    """The ``parakeet_mel`` parameters of a feature-extractor config, defaults filled in.

    Raises:
        LoadError: its ``feature_size`` is not the encoder's ``num_mel_bins``.
    """
    params = {k: fe.get(k, default) for k, default in FEATURE_DEFAULTS.items()}
    if int(params["feature_size"]) != num_mel_bins:
        raise LoadError(
            f"{source}: feature_size={params['feature_size']} but the encoder expects num_mel_bins={num_mel_bins}"
        )
    return params


def mel_feature_spec(params: Mapping[str, Any], fe: Mapping[str, Any]) -> FeatureSpec:
    """The ``parakeet_mel`` feature spec for ``params`` at the config's sampling rate (16 kHz if unsaid)."""
    return FeatureSpec(kind="parakeet_mel", sampling_rate=int(fe.get("sampling_rate", 16000)), params=dict(params))


def tokenizer_spec(path: Path, blank_id: int, vocab_size: int) -> TokenizerSpec:
    """The ``tokenizer.json`` beside the weights, its special tokens and the blank marked special.

    Raises:
        LoadError: no ``tokenizer.json`` in ``path``.
    """
    tok = path / "tokenizer.json"
    if not tok.is_file():
        raise LoadError(f"{path}: no tokenizer.json beside the weights (a Parakeet directory carries one)")
    added = read_json(tok).get("added_tokens") or []
    special = {int(t["id"]) for t in added if t.get("special", False)}
    special.add(blank_id)
    return TokenizerSpec(
        kind="huggingface", path=str(tok), special_ids=tuple(sorted(i for i in special if 0 <= i < vocab_size))
    )
