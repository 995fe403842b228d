"""Hugging Face ``LasrForCTC`` checkpoints (config.json ``model_type: lasr_ctc``).

A directory holds config.json (CTC fields + a nested ``encoder_config``), the weights
(safetensors, sharded or not, or ``pytorch_model.bin``), the tokenizer (tokenizer.json,
or a sentencepiece ``.model``) and the feature-extractor settings (preprocessor_config.json,
or the ``feature_extractor`` entry of processor_config.json).

Tensor names are the model's own after the CTC head's k=1 kernel axis is squeezed;
the head is widened to its aligned width by ``LasrModel.load_weights``.
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
from oasr.models.lasr.config import LasrConfig
from oasr.models.registry import CheckpointBundle

ARCH = "lasr"
MODEL_TYPE = "lasr_ctc"

# Encoder config fields read 1:1 into LasrConfig.
_ENCODER_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "head_dim",
    "intermediate_size",
    "hidden_act",
    "attention_bias",
    "convolution_bias",
    "conv_kernel_size",
    "num_mel_bins",
    "subsampling_conv_channels",
    "subsampling_conv_kernel_size",
    "subsampling_conv_stride",
    "max_position_embeddings",
    "layer_norm_eps",
    "feed_forward_residual_weights",
    "conv_residual_weights",
)
# transformers' names of activations oasr knows under another name.
_ACTIVATION_ALIASES = {"swish": "silu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
# The extractor's fixed mel band (not in preprocessor_config.json).
_MEL_F_MIN, _MEL_F_MAX = 125.0, 7500.0


def config_from_hf(hf: Mapping[str, Any], where: str = "config.json") -> LasrConfig:
    """``LasrConfig`` from a ``lasr_ctc`` config.json dict.

    Raises:
        LoadError: a rotary scaling, a key/value head count or a field value oasr does not run.
    """
    enc = dict(hf.get("encoder_config") or {})
    rope = dict(enc.get("rope_parameters") or {})
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise LoadError(f"{where}: rope_type={rope_type!r} is not supported (LASR uses plain rotary, 'default')")
    heads = enc.get("num_attention_heads", 8)
    if enc.get("num_key_value_heads", heads) != heads:
        raise LoadError(f"{where}: num_key_value_heads={enc['num_key_value_heads']} != num_attention_heads={heads}")
    fields = {k: enc[k] for k in _ENCODER_FIELDS if enc.get(k) is not None}
    if "hidden_act" in fields:
        fields["hidden_act"] = _ACTIVATION_ALIASES.get(fields["hidden_act"], fields["hidden_act"])
    fields["rope_theta"] = rope.get("rope_theta", enc.get("rope_theta", 10000.0))
    fields["vocab_size"] = hf.get("vocab_size", 512)
    fields["blank_id"] = hf.get("pad_token_id", 0)
    try:
        return LasrConfig.from_dict(fields)
    except (TypeError, ValueError) as e:
        raise LoadError(f"{where}: {e}") from e


def _special_ids(directory: Path, tokenizer_json: Path | None, lookup) -> set[int]:
    """Ids the tokenizer treats as special: added tokens marked special (tokenizer.json,
    tokenizer_config.json) and the tokens tokenizer_config.json names (bos / eos / unk /
    pad, additional specials), resolved with ``lookup(token) -> id or None``."""
    ids: set[int] = set()
    if tokenizer_json is not None:
        for tok in read_json(tokenizer_json).get("added_tokens", []):
            if tok.get("special", False):
                ids.add(int(tok["id"]))
    cfg_file = directory / "tokenizer_config.json"
    if not cfg_file.is_file():
        return ids
    cfg = read_json(cfg_file)
    for k, v in (cfg.get("added_tokens_decoder") or {}).items():
        if v.get("special", False):
            ids.add(int(k))
    named = [cfg.get(k) for k in ("bos_token", "eos_token", "unk_token", "pad_token")]
    for key in ("additional_special_tokens", "extra_special_tokens"):
        extra = cfg.get(key) or []
        named.extend(extra.values() if isinstance(extra, dict) else extra)
    for tok in named:
        content = tok.get("content") if isinstance(tok, dict) else tok
        if isinstance(content, str) and (i := lookup(content)) is not None:
            ids.add(int(i))
    return ids


def _sentencepiece_file(directory: Path) -> Path | None:
    if (directory / "spiece.model").is_file():
        return directory / "spiece.model"
    models = sorted(directory.glob("*.model"))
    return models[0] if len(models) == 1 else None


def _tokenizer_spec(directory: Path, blank_id: int) -> TokenizerSpec:
    """tokenizer.json if present, else a sentencepiece model; specials (the blank included)
    are declared so the decoder never emits them as text."""
    tok_json = directory / "tokenizer.json"
    if tok_json.is_file():
        from tokenizers import Tokenizer

        ids = _special_ids(directory, tok_json, Tokenizer.from_file(str(tok_json)).token_to_id)
        return TokenizerSpec(kind="huggingface", path=str(tok_json), special_ids=tuple(sorted(ids | {blank_id})))
    spm = _sentencepiece_file(directory)
    if spm is None:
        raise LoadError(f"{directory} has no LASR vocabulary: expected tokenizer.json or a sentencepiece .model")
    try:
        import sentencepiece
    except ImportError as e:
        raise LoadError(f"{spm}: reading a sentencepiece vocabulary needs the 'sentencepiece' package") from e
    proc = sentencepiece.SentencePieceProcessor(model_file=str(spm))

    def lookup(token: str) -> int | None:
        i = proc.piece_to_id(token)
        return i if proc.id_to_piece(i) == token else None

    ids = _special_ids(directory, None, lookup)
    ids |= {i for i in range(proc.get_piece_size()) if proc.is_control(i) or proc.is_unknown(i)}
    return TokenizerSpec(kind="sentencepiece", path=str(spm), special_ids=tuple(sorted(ids | {blank_id})))


def _feature_spec(directory: Path, config: LasrConfig) -> FeatureSpec:
    pre, _ = feature_extractor_config(directory)
    kind = pre.get("feature_extractor_type", "LasrFeatureExtractor")
    if kind != "LasrFeatureExtractor":
        raise LoadError(f"{directory}: feature_extractor_type={kind!r} is not LASR's (LasrFeatureExtractor)")
    n_mels = int(pre.get("feature_size", config.num_mel_bins))
    if n_mels != config.num_mel_bins:
        raise LoadError(
            f"{directory}: the feature extractor makes {n_mels} mel bins, the encoder reads {config.num_mel_bins}"
        )
    return FeatureSpec(
        kind="lasr_mel",
        sampling_rate=int(pre.get("sampling_rate", 16000)),
        params={
            "n_mels": n_mels,
            "n_fft": int(pre.get("n_fft", 512)),
            "hop_length": int(pre.get("hop_length", 160)),
            "win_length": int(pre.get("win_length", 400)),
            "f_min": _MEL_F_MIN,
            "f_max": _MEL_F_MAX,
        },
    )


class HFLasrConverter:
    """A transformers ``LasrForCTC`` directory (google/medasr layout)."""

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
        state: dict[str, torch.Tensor] = {}
        for name, t in _load_weights(path).items():
            if name == "ctc_head.weight":
                if t.dim() != 3 or t.shape[-1] != 1:
                    raise LoadError(f"{path}: ctc_head.weight has shape {tuple(t.shape)}; expected (V, D, 1)")
                t = t[..., 0]  # the k=1 convolution is a (V, D) projection
            state[name] = t
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=_tokenizer_spec(path, config.blank_id),
            features=_feature_spec(path, config),
            # MedASR / LASR releases are English-only: language="en" is accepted, others refused.
            decoding=DecodingSpec(
                decode_type=DecodeType.CTC, params={"blank_id": config.blank_id, "languages": ("en",)}
            ),
            source=str(path),
            format="huggingface",
        )
