"""Hugging Face Parakeet checkpoints (``ParakeetForCTC`` / ``ParakeetForRNNT`` / ``ParakeetForTDT``
``save_pretrained`` directories).

A directory holds ``config.json`` (``model_type: parakeet_ctc`` with a nested
``encoder_config``), ``model.safetensors`` (or ``.bin`` / sharded), ``tokenizer.json``
and ``preprocessor_config.json``. Tensor names are kept except the attention
projections (``q_proj`` / ``k_proj`` / ``v_proj`` / ``o_proj`` / ``relative_k_proj``
-> ``linear_q`` / ``linear_k`` / ``linear_v`` / ``linear_out`` / ``linear_pos``) and the
CTC head, a kernel-1 Conv1d (V, D, 1) stored here as a (V, D) projection.

The transducer layouts (``parakeet_rnnt``, ``parakeet_tdt``) load as the
``parakeet_transducer`` architecture: the predictor and joint are renamed as for Nemotron
(``decoder.`` -> ``predictor.``, ``encoder_projector.`` -> ``joiner.encoder_proj.``,
``joint.head.`` -> ``joiner.head.``); a TDT's ``durations`` come from config.json. The bare
encoder (``parakeet_encoder``) is recognised and refused by name: it has no decoding head.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oasr.models.base import DecodeType, DecodingSpec, FeatureSpec, LoadError
from oasr.models.formats.hf import feature_extractor_config
from oasr.models.formats.hf import load_hf_weights as _load_weights
from oasr.models.formats.hf import model_type as hf_model_type
from oasr.models.formats.hf import read_json as _read_json
from oasr.models.formats.nemo import (
    ATTENTION_RENAMES,
    ENCODER_FIELDS,
    ctc_head_state,
    mel_feature_spec,
    mel_params,
    rename,
    tokenizer_spec,
    transducer_decoding,
    transducer_fields,
    transducer_state,
)
from oasr.models.parakeet.config import ParakeetConfig, ParakeetEncoderConfig, ParakeetTransducerConfig
from oasr.models.registry import CheckpointBundle

ARCH = "parakeet"
TRANSDUCER_ARCH = "parakeet_transducer"
CTC_MODEL_TYPE = "parakeet_ctc"
TRANSDUCER_MODEL_TYPES = ("parakeet_rnnt", "parakeet_tdt")

# Parakeet layouts that cannot be served, and what they are.
_NOT_SERVED = {
    "parakeet_encoder": "a bare Parakeet encoder without a decoding head",
}


def encoder_config_from_hf(enc: Mapping[str, Any], where: str) -> ParakeetEncoderConfig:
    """A ``ParakeetEncoderConfig`` from a Hugging Face ``encoder_config`` dict.

    Raises:
        LoadError: a value this encoder does not implement.
    """
    heads = enc.get("num_attention_heads", ParakeetEncoderConfig.num_attention_heads)
    kv_heads = enc.get("num_key_value_heads", heads)
    if kv_heads != heads:
        raise LoadError(f"{where}: num_key_value_heads={kv_heads} != num_attention_heads={heads} is not supported")
    hidden = enc.get("hidden_size", ParakeetEncoderConfig.hidden_size)
    head_dim = enc.get("head_dim")
    if head_dim is not None and head_dim * heads != hidden:
        raise LoadError(f"{where}: head_dim={head_dim} x {heads} heads != hidden_size={hidden} is not supported")
    try:
        return ParakeetEncoderConfig.from_dict({k: enc[k] for k in ENCODER_FIELDS if k in enc})
    except (TypeError, ValueError) as e:
        raise LoadError(f"{where}: {e}") from e


def _feature_spec(path: Path, num_mel_bins: int) -> FeatureSpec:
    pre, source = feature_extractor_config(path)
    return mel_feature_spec(mel_params(pre, source or path, num_mel_bins), pre)


def _bundle(path: Path, architecture: str, config, state: dict, vocab_size: int, decoding: DecodingSpec):
    """The checkpoint bundle of a Parakeet directory (CTC or transducer): tokenizer and features beside it."""
    return CheckpointBundle(
        architecture=architecture,
        config=config,
        state_dict=state,
        tokenizer=tokenizer_spec(path, int(config.blank_id), vocab_size),
        features=_feature_spec(path, config.encoder.num_mel_bins),
        decoding=decoding,
        source=str(path),
        format="huggingface",
    )


class HFParakeetConverter:
    """A transformers ``ParakeetForCTC`` / ``ParakeetForRNNT`` / ``ParakeetForTDT`` directory
    (config.json ``model_type``: ``parakeet_ctc`` -> architecture ``parakeet``; ``parakeet_rnnt``
    / ``parakeet_tdt`` -> ``parakeet_transducer``)."""

    architecture = ARCH
    auto_detect = True
    # The position table is computed, never loaded (non-persistent upstream; dropped if a file has it).
    expected_unused_prefixes: tuple[str, ...] = ("encoder.encode_positions.",)
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        """Any Parakeet layout: CTC and transducers load, the bare encoder is refused by name in ``load``."""
        return Path(path).is_dir() and hf_model_type(Path(path)) in (
            CTC_MODEL_TYPE,
            *TRANSDUCER_MODEL_TYPES,
            *_NOT_SERVED,
        )

    def load(self, path: Path) -> CheckpointBundle:
        path = Path(path)
        hf = _read_json(path / "config.json")
        model_type = hf.get("model_type")
        if model_type in _NOT_SERVED:
            raise LoadError(
                f"{path} is {_NOT_SERVED[model_type]} (config.json model_type={model_type!r}); oasr serves the "
                f"CTC ({CTC_MODEL_TYPE!r}) and transducer ({', '.join(TRANSDUCER_MODEL_TYPES)}) layouts"
            )
        if model_type in TRANSDUCER_MODEL_TYPES:
            return self._load_transducer(path, hf)
        if model_type != CTC_MODEL_TYPE:
            raise LoadError(f"{path}: config.json model_type={model_type!r} is not {CTC_MODEL_TYPE!r}")
        encoder = encoder_config_from_hf(hf.get("encoder_config") or {}, str(path / "config.json"))
        vocab_size = int(hf.get("vocab_size", 1025))
        blank = hf.get("pad_token_id")
        try:
            config = ParakeetConfig(
                encoder=encoder, vocab_size=vocab_size, blank_id=None if blank is None else int(blank)
            )
        except ValueError as e:
            raise LoadError(f"{path / 'config.json'}: {e}") from e

        state = rename(_load_weights(path), ATTENTION_RENAMES)
        ctc_head_state(state, str(path), vocab_size)
        # The parakeet-ctc releases (0.6b, 1.1b) are English-only.
        decoding = DecodingSpec(DecodeType.CTC, params={"languages": ("en",)})
        return _bundle(path, ARCH, config, state, vocab_size, decoding)

    def _load_transducer(self, path: Path, hf: Mapping[str, Any]) -> CheckpointBundle:
        cfg_file = path / "config.json"
        if hf.get("hidden_act", "relu") != "relu":
            raise LoadError(f"{cfg_file}: joint hidden_act={hf['hidden_act']!r} is not supported (relu)")
        encoder = encoder_config_from_hf(hf.get("encoder_config") or {}, str(cfg_file))
        vocab_size = int(hf.get("vocab_size", 8193))
        is_tdt = hf.get("model_type") == "parakeet_tdt"
        durations = tuple(int(d) for d in hf.get("durations", (0, 1, 2, 3, 4))) if is_tdt else ()
        try:
            config = ParakeetTransducerConfig(encoder=encoder, **transducer_fields(hf, vocab_size), durations=durations)
        except (TypeError, ValueError) as e:
            raise LoadError(f"{cfg_file}: {e}") from e
        state = transducer_state(_load_weights(path))
        head = state.get("joiner.head.weight")
        if head is None:
            raise LoadError(f"{path}: no joint.head.weight in the checkpoint")
        if head.shape[0] != vocab_size + len(durations):
            raise LoadError(
                f"{path}: joint.head has {head.shape[0]} outputs but vocab_size={vocab_size} + "
                f"{len(durations)} durations = {vocab_size + len(durations)}"
            )
        decoding = transducer_decoding(config, durations)
        return _bundle(path, TRANSDUCER_ARCH, config, state, vocab_size, decoding)


class HFParakeetTransducerConverter(HFParakeetConverter):
    """The same reader, registered under ``parakeet_transducer`` for an explicit
    ``architecture=`` (detection goes through ``parakeet``, which routes the bundle)."""

    architecture = TRANSDUCER_ARCH
    auto_detect = False

    def can_load(self, path: Path) -> bool:
        return Path(path).is_dir() and hf_model_type(Path(path)) in TRANSDUCER_MODEL_TYPES
