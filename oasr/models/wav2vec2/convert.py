"""Hugging Face ``Wav2Vec2ForCTC`` / ``HubertForCTC`` / ``Data2VecAudioForCTC`` directories, as
``save_pretrained`` writes them: config.json, the weights (safetensors, sharded or not, or
``pytorch_model.bin``), preprocessor_config.json (``Wav2Vec2FeatureExtractor``) and the character
vocabulary (vocab.json + tokenizer_config.json, ``Wav2Vec2CTCTokenizer``).

Tensor names: the base model's prefix (``wav2vec2.``, ``hubert.``, ``data2vec_audio.``) goes
under ``encoder.``, its own ``encoder.`` merged into it (``wav2vec2.encoder.layers.0`` ->
``encoder.layers.0``, ``wav2vec2.feature_extractor`` -> ``encoder.feature_extractor``);
``lm_head`` stays. The position convolution's weight norm, stored as ``weight_g`` / ``weight_v``
(older checkpoints) or ``parametrizations.weight.original0`` / ``original1``, is folded into one
weight: ``g * v / ||v||``, the norm over every axis but the kernel's (``weight_norm(dim=2)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from oasr.models.base import DecodeType, DecodingSpec, FeatureSpec, LoadError, TokenizerSpec
from oasr.models.formats.hf import feature_extractor_config, read_json
from oasr.models.formats.hf import load_hf_weights as _load_weights
from oasr.models.formats.hf import model_type as hf_model_type
from oasr.models.registry import CheckpointBundle
from oasr.models.wav2vec2.config import Wav2Vec2Config

ARCH = "wav2vec2"
# model_type -> the base model's tensor prefix in a *ForCTC checkpoint.
BASE_PREFIX = {"wav2vec2": "wav2vec2", "hubert": "hubert", "data2vec-audio": "data2vec_audio"}
# Fields read 1:1 into Wav2Vec2Config.
_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "layer_norm_eps",
    "feat_extract_norm",
    "feat_extract_activation",
    "conv_dim",
    "conv_stride",
    "conv_kernel",
    "conv_bias",
    "feat_proj_layer_norm",
    "do_stable_layer_norm",
)
# transformers' names of activations oasr knows under another name.
_ACTIVATION_ALIASES = {"swish": "silu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
WEIGHT_NORM = ((".weight_g", ".weight_v"), (".parametrizations.weight.original0", ".parametrizations.weight.original1"))


def config_fields(hf: Mapping[str, Any], where: str = "config.json") -> dict[str, Any]:
    """The ``Wav2Vec2Config`` fields of a wav2vec2-lineage config.json dict (the model type
    unchecked: a family that builds on this one adds its own fields and builds its config).

    Raises:
        LoadError: an option oasr does not run.
    """
    kind = hf.get("model_type")
    if hf.get("add_adapter"):
        raise LoadError(f"{where}: add_adapter=true (a strided adapter after the encoder) is not supported")
    if hf.get("adapter_attn_dim") is not None:
        raise LoadError(f"{where}: adapter_attn_dim is set (MMS attention adapters), which this family does not run")
    fields = {k: hf[k] for k in _FIELDS if hf.get(k) is not None}
    for key in ("hidden_act", "feat_extract_activation"):
        if key in fields:
            fields[key] = _ACTIVATION_ALIASES.get(fields[key], fields[key])
    fields["model_type"] = kind
    fields["blank_id"] = hf.get("pad_token_id", 0)
    fields["pos_conv_groups"] = hf.get("num_conv_pos_embedding_groups", 16)
    if kind == "data2vec-audio":  # layer-norm conv layers, a stack of position convolutions
        fields.update(
            feat_extract_norm="layer",
            pos_conv_style="data2vec",
            pos_conv_kernel=hf.get("conv_pos_kernel_size", 19),
            pos_conv_layers=hf.get("num_conv_pos_embeddings", 5),
            do_stable_layer_norm=False,
        )
    else:
        fields["pos_conv_kernel"] = hf.get("num_conv_pos_embeddings", 128)
        fields["pos_conv_batch_norm"] = bool(hf.get("conv_pos_batch_norm", False))
    return fields


def config_from_hf(hf: Mapping[str, Any], where: str = "config.json") -> Wav2Vec2Config:
    """``Wav2Vec2Config`` from a wav2vec2 / hubert / data2vec-audio config.json dict.

    Raises:
        LoadError: a model type, an option or a field value oasr does not run.
    """
    if hf.get("model_type") not in BASE_PREFIX:
        raise LoadError(f"{where}: model_type={hf.get('model_type')!r} is not one of {sorted(BASE_PREFIX)}")
    try:
        return Wav2Vec2Config.from_dict(config_fields(hf, where))
    except (TypeError, ValueError) as e:
        raise LoadError(f"{where}: {e}") from e


def rename(name: str, prefix: str) -> str | None:
    """oasr's name of a checkpoint tensor (None: not the model's: a pre-training leftover)."""
    if name.startswith("lm_head."):
        return name
    if not name.startswith(prefix + "."):
        return None
    rest = name[len(prefix) + 1 :]
    if rest.startswith(("feature_extractor.", "feature_projection.")):
        return "encoder." + rest
    if rest.startswith("encoder."):
        return rest
    return None


def fold_weight_norm(state: dict[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    """Every weight-normed pair (g, v) replaced by its weight ``g * v / ||v||`` (norm over all
    axes but the one ``g`` keeps, as ``torch.nn.utils.weight_norm``).

    Raises:
        LoadError: a half of a pair without the other, or shapes that do not pair.
    """
    out = dict(state)
    for g_suffix, v_suffix in WEIGHT_NORM:
        for name in [n for n in state if n.endswith(g_suffix)]:
            base = name[: -len(g_suffix)]
            v_name = base + v_suffix
            if v_name not in state:
                raise LoadError(f"{where}: {name} has no {v_suffix[1:]} beside it")
            g, v = out.pop(name).double(), out.pop(v_name).double()
            if g.dim() != v.dim() or any(a not in (1, b) for a, b in zip(g.shape, v.shape)):
                raise LoadError(f"{where}: weight-norm shapes {tuple(g.shape)} and {tuple(v.shape)} do not pair")
            axes = [i for i, n in enumerate(g.shape) if n == 1 and v.shape[i] != 1]
            norm = v.norm(dim=axes, keepdim=True) if axes else v.abs()
            out[base + ".weight"] = (g * v / norm).to(state[v_name].dtype)
        stray = [n for n in out if n.endswith(v_suffix)]
        if stray:
            raise LoadError(f"{where}: {stray[0]} has no {g_suffix[1:]} beside it")
    return out


def _tokenizer_spec(directory: Path, config: Wav2Vec2Config) -> TokenizerSpec:
    """The character vocabulary; only the blank is declared not text (transformers' CTC decoding
    writes ``<s>``, ``</s>`` and ``<unk>`` out)."""
    vocab = directory / "vocab.json"
    if not vocab.is_file():
        raise LoadError(f"{directory} has no vocab.json (the Wav2Vec2CTCTokenizer vocabulary)")
    from oasr.tokenizers.chars import CharTokenizer

    try:
        tok = CharTokenizer.from_file(vocab)
    except (ValueError, OSError) as e:
        raise LoadError(f"{vocab}: {e}") from e
    if tok.vocab_size > config.vocab_size:
        raise LoadError(f"{vocab}: {tok.vocab_size} tokens, but the CTC head has {config.vocab_size} outputs")
    if tok.pad_id is not None and tok.pad_id != config.blank_id:
        raise LoadError(
            f"{directory}: the tokenizer's pad token is id {tok.pad_id}, the config's pad_token_id {config.blank_id}"
        )
    return TokenizerSpec(kind="chars", path=str(vocab), special_ids=(config.blank_id,))


def waveform_feature_spec(directory: Path) -> FeatureSpec:
    """transformers' ``Wav2Vec2FeatureExtractor`` settings as the ``wav2vec2_waveform`` front end
    (its defaults for what the file omits; Moonshine reads its samples through it too)."""
    pre, _ = feature_extractor_config(directory)
    kind = pre.get("feature_extractor_type", "Wav2Vec2FeatureExtractor")
    if kind != "Wav2Vec2FeatureExtractor":
        raise LoadError(f"{directory}: feature_extractor_type={kind!r} is not Wav2Vec2FeatureExtractor")
    if int(pre.get("feature_size", 1)) != 1:
        raise LoadError(f"{directory}: feature_size={pre['feature_size']}: the encoder reads one sample a frame")
    return FeatureSpec(
        kind="wav2vec2_waveform",
        sampling_rate=int(pre.get("sampling_rate", 16000)),
        params={"do_normalize": bool(pre.get("do_normalize", True))},
    )


class HFWav2Vec2Converter:
    """A transformers ``Wav2Vec2ForCTC`` / ``HubertForCTC`` / ``Data2VecAudioForCTC`` directory.

    A family of the same lineage (WavLM) subclasses it: its ``architecture``, its ``base_prefix``
    table (model_type -> tensor prefix) and ``make_config``; the weights, vocabulary and front
    end are read as here.
    """

    architecture = ARCH
    base_prefix: Mapping[str, str] = BASE_PREFIX
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = tuple(f"{p}.masked_spec_embed" for p in BASE_PREFIX.values())
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        if not (path.is_dir() and hf_model_type(path) in self.base_prefix and (path / "vocab.json").is_file()):
            return False
        return read_json(path / "config.json").get("adapter_attn_dim") is None  # MMS: mms_convert.py

    def make_config(self, hf: Mapping[str, Any], where: str) -> Wav2Vec2Config:
        """The family config of a config.json dict (``LoadError`` for what oasr does not run)."""
        return config_from_hf(hf, where)

    def load(self, path: Path) -> CheckpointBundle:
        hf = read_json(path / "config.json")
        where = str(path / "config.json")
        if hf.get("model_type") not in self.base_prefix:
            raise LoadError(f"{where}: model_type={hf.get('model_type')!r} is not one of {sorted(self.base_prefix)}")
        config = self.make_config(hf, where)
        prefix = self.base_prefix[hf["model_type"]]
        state: dict[str, torch.Tensor] = {}
        for name, t in fold_weight_norm(_load_weights(path), str(path)).items():
            new = rename(name, prefix)
            state[new if new is not None else name] = t  # unknown names reach the load report
        if "lm_head.weight" not in state:
            raise LoadError(f"{path}: no lm_head.weight: not a CTC checkpoint ({hf.get('architectures')})")
        return CheckpointBundle(
            architecture=self.architecture,
            config=config,
            state_dict=state,
            tokenizer=_tokenizer_spec(path, config),
            features=waveform_feature_spec(path),
            decoding=DecodingSpec(decode_type=DecodeType.CTC, params={"blank_id": config.blank_id}),
            source=str(path),
            format="huggingface",
        )
