"""Hugging Face Nemotron 3.5 ASR checkpoints (``Nemotron3_5AsrForRNNT.save_pretrained`` directories),
and the English ``NemotronAsrStreamingForRNNT`` ones (``nemotron_asr_streaming``: no prompt projector).

A directory holds ``config.json`` (``model_type: nemotron3_5_asr`` with a nested
``encoder_config``), ``model.safetensors`` (or ``.bin`` / sharded), ``tokenizer.json`` and
``processor_config.json`` (the feature-extractor settings and the ``prompt_dictionary``:
language -> prompt id). Tensor names are mapped onto oasr's:

* attention projections as for Parakeet (``q_proj`` ... -> ``linear_q`` ...);
* ``decoder.`` -> ``predictor.``; ``encoder_projector.`` -> ``joiner.encoder_proj.``;
  ``joint.head.`` -> ``joiner.head.``;
* ``prompt_projector.linear_1`` (I, D + P) + bias -> ``linear_1`` (I, D) and the folded
  ``prompt_table.weight`` (P, I) = W[:, D:].T + b: the one-hot's columns are rows of a table.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from oasr.models.base import DecodeType, DecodingSpec, FeatureSpec, LoadError
from oasr.models.formats.hf import load_hf_weights, model_type, read_json
from oasr.models.formats.nemo import (
    ENCODER_FIELDS,
    mel_feature_spec,
    mel_params,
    tokenizer_spec,
    transducer_fields,
    transducer_state,
)
from oasr.models.nemotron.config import NemotronConfig, NemotronEncoderConfig
from oasr.models.registry import CheckpointBundle

ARCH = "nemotron"
MODEL_TYPE = "nemotron3_5_asr"
# The English streaming release: the same encoder and transducer without the prompt projector.
STREAMING_EN_MODEL_TYPE = "nemotron_asr_streaming"
MODEL_TYPES = (MODEL_TYPE, STREAMING_EN_MODEL_TYPE)


def _encoder_config(enc: Mapping[str, Any], where: str) -> NemotronEncoderConfig:
    heads = enc.get("num_attention_heads", NemotronEncoderConfig.num_attention_heads)
    if enc.get("num_key_value_heads", heads) != heads:
        raise LoadError(f"{where}: num_key_value_heads != num_attention_heads is not supported")
    if enc.get("subsampling_conv_stride", 2) != 2:
        raise LoadError(f"{where}: subsampling_conv_stride={enc['subsampling_conv_stride']} is not supported (2)")
    keys = (*ENCODER_FIELDS, "sliding_window", "default_num_lookahead_tokens")
    try:
        return NemotronEncoderConfig.from_dict({k: enc[k] for k in keys if k in enc})
    except (TypeError, ValueError) as e:
        raise LoadError(f"{where}: {e}") from e


def _feature_spec(fe: Mapping[str, Any], source: Path, num_mel_bins: int) -> FeatureSpec:
    params = mel_params(fe, source, num_mel_bins)
    if fe.get("mel_filters_dtype", "float32") != "float32":
        raise LoadError(f"{source}: mel_filters_dtype={fe['mel_filters_dtype']!r} is not supported (float32)")
    # The streaming front end is never normalised (transformers' NemotronAsrStreamingFeatureExtractor).
    params["normalize"] = False
    return mel_feature_spec(params, fe)


class HFNemotronConverter:
    """A transformers ``Nemotron3_5AsrForRNNT`` (config.json ``model_type: nemotron3_5_asr``) or
    ``NemotronAsrStreamingForRNNT`` (``nemotron_asr_streaming``) directory."""

    architecture = ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = ("encoder.encode_positions.",)
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        return Path(path).is_dir() and model_type(Path(path)) in MODEL_TYPES

    def load(self, path: Path) -> CheckpointBundle:
        path = Path(path)
        cfg_file = path / "config.json"
        hf = read_json(cfg_file)
        if hf.get("model_type") not in MODEL_TYPES:
            raise LoadError(f"{cfg_file}: model_type={hf.get('model_type')!r} is not one of {MODEL_TYPES}")
        prompted = hf["model_type"] == MODEL_TYPE
        if hf.get("hidden_act", "relu") != "relu":
            raise LoadError(f"{cfg_file}: joint hidden_act={hf['hidden_act']!r} is not supported (relu)")
        encoder = _encoder_config(hf.get("encoder_config") or {}, str(cfg_file))
        proc_file = path / "processor_config.json"
        proc = read_json(proc_file) if proc_file.is_file() else {}
        table = (proc.get("prompt_dictionary") or {}) if prompted else {}
        if not isinstance(table, dict):
            raise LoadError(f"{proc_file}: prompt_dictionary is not a mapping")
        vocab_size = int(hf.get("vocab_size", 13088))
        try:
            config = NemotronConfig(
                encoder=encoder,
                **transducer_fields(hf, vocab_size),
                num_prompts=int(hf.get("num_prompts", 128)) if prompted else 0,
                prompt_intermediate_size=int(hf.get("prompt_intermediate_size", 2048)),
                default_prompt_id=int(hf.get("default_prompt_id", 101)),
                prompt_dictionary={str(k): int(v) for k, v in table.items()},
            )
        except (TypeError, ValueError) as e:
            raise LoadError(f"{cfg_file} / {proc_file.name}: {e}") from e

        state = transducer_state(load_hf_weights(path))
        if prompted:
            self._fold_prompt_table(state, path, config)

        fe = proc.get("feature_extractor") if isinstance(proc.get("feature_extractor"), dict) else {}
        pre = path / "preprocessor_config.json"
        if pre.is_file():
            fe, fe_source = read_json(pre), pre
        else:
            fe_source = proc_file
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=tokenizer_spec(path, config.blank_id, vocab_size),
            features=_feature_spec(fe, fe_source, encoder.num_mel_bins),
            decoding=DecodingSpec(
                DecodeType.TRANSDUCER,
                params={
                    "blank_id": config.blank_id,
                    "max_symbols_per_step": config.max_symbols_per_step,
                    # The streaming release is English-only; Nemotron 3.5's languages are its
                    # prompt table's (``NemotronRnntModel.languages``).
                    **({} if prompted else {"languages": ("en",)}),
                },
            ),
            source=str(path),
            format="huggingface",
        )

    @staticmethod
    def _fold_prompt_table(state: dict[str, torch.Tensor], path: Path, config: NemotronConfig) -> None:
        """``linear_1`` (I, D + P) + bias -> ``linear_1`` (I, D) and ``prompt_table.weight`` (P, I)."""
        w1 = state.pop("prompt_projector.linear_1.weight", None)
        b1 = state.pop("prompt_projector.linear_1.bias", None)
        d, p, i = config.encoder.hidden_size, config.num_prompts, config.prompt_intermediate_size
        if w1 is None or b1 is None or tuple(w1.shape) != (i, d + p) or tuple(b1.shape) != (i,):
            got = None if w1 is None else tuple(w1.shape)
            raise LoadError(
                f"{path}: prompt_projector.linear_1 must be ({i}, {d} + {p}) with a bias (hidden + num_prompts "
                f"inputs), got weight {got}"
            )
        state["prompt_projector.linear_1.weight"] = w1[:, :d].contiguous()
        table = w1[:, d:].T.to(torch.float64) + b1.to(torch.float64)  # one rounding from the concat's
        state["prompt_projector.prompt_table.weight"] = table.to(w1.dtype)
