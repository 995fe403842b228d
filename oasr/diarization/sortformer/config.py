"""Sortformer's configuration as NeMo's ``model_config.yaml`` gives it (``SortformerEncLabelModel``).

The sections map onto oasr's pieces: ``preprocessor`` -> the ``parakeet_mel`` front end
(``models/formats/nemo.mel_from_nemo``), ``encoder`` -> the FastConformer of Parakeet
(``encoder_fields_from_nemo``), ``transformer_encoder`` -> ``TransformerConfig``,
``sortformer_modules`` -> the head's sizes and the streaming settings (``StreamingParams``).
Every key of the sections oasr reads is checked: a value oasr does not implement is refused,
naming key and value (``check_section``); training-only keys (dropouts, losses, data sets,
optimiser) are ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oasr.models.base import FeatureSpec, LoadError
from oasr.models.formats.nemo import (
    ANY_VALUE,
    NEMO_CONFIG,
    check_section,
    check_target,
    encoder_fields_from_nemo,
    mel_from_nemo,
)
from oasr.models.parakeet.config import ParakeetEncoderConfig

TARGET = "SortformerEncLabelModel"


@dataclass(frozen=True)
class TransformerConfig:
    """NeMo's ``TransformerEncoder`` (``nemo.collections.asr.modules.transformer``): post-LN
    blocks of self-attention and a ReLU feed-forward (pre-LN with a final LayerNorm when
    ``pre_ln``)."""

    num_layers: int
    hidden_size: int
    inner_size: int
    num_attention_heads: int
    hidden_act: str = "relu"
    pre_ln: bool = False
    pre_ln_final_layer_norm: bool = True

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not a multiple of num_attention_heads={self.num_attention_heads}"
            )


@dataclass(frozen=True)
class StreamingParams:
    """``SortformerModules``' streaming settings, in encoder frames (80 ms each for the releases).

    Attributes:
        chunk_len: frames each step adds.
        chunk_left_context / chunk_right_context: frames fed again before / ahead of the chunk.
        fifo_len: capacity of the FIFO of the latest frames.
        spkcache_len: capacity of the speaker cache (compressed when it overflows).
        spkcache_update_period: frames moved from the FIFO to the cache when the FIFO overflows.
        spkcache_sil_frames_per_spk: slots per speaker kept for the mean silence embedding.
        pred_score_threshold, scores_boost_latest, sil_threshold, strong_boost_rate,
        weak_boost_rate, min_pos_scores_rate: the compression's scoring (NeMo's names).
    """

    chunk_len: int = 188
    chunk_left_context: int = 1
    chunk_right_context: int = 1
    fifo_len: int = 0
    spkcache_len: int = 188
    spkcache_update_period: int = 188
    spkcache_sil_frames_per_spk: int = 3
    pred_score_threshold: float = 0.25
    scores_boost_latest: float = 0.05
    sil_threshold: float = 0.2
    strong_boost_rate: float = 0.75
    weak_boost_rate: float = 1.5
    min_pos_scores_rate: float = 0.5

    def check(self, num_speakers: int) -> None:
        """NeMo's ``_check_streaming_parameters``.

        Raises:
            ValueError: a size that is not an integer or below its minimum, naming it.
        """
        minimum = {
            "spkcache_len": (1 + self.spkcache_sil_frames_per_spk) * num_speakers,
            "fifo_len": 0,
            "chunk_len": 1,
            "spkcache_update_period": 1,
            "chunk_left_context": 0,
            "chunk_right_context": 0,
            "spkcache_sil_frames_per_spk": 0,
        }
        for name, least in minimum.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"streaming {name}={value!r} must be an integer")
            if value < least:
                raise ValueError(f"streaming {name}={value} must be at least {least}")

    def replace(self, **changes: Any) -> StreamingParams:
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ValueError(
                f"unknown streaming setting(s) {unknown}; known: {[f.name for f in dataclasses.fields(self)]}"
            )
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class SortformerConfig:
    """A Sortformer diarizer.

    Attributes:
        encoder: the FastConformer (its width is ``fc_d_model``).
        transformer: the transformer encoder (its width is ``tf_d_model``).
        num_speakers: output slots (``max_num_of_spks``), ordered by arrival.
        streaming_mode: the archive runs streaming (NeMo's ``forward`` then goes chunk by chunk).
        streaming: the chunk, FIFO and speaker-cache settings.
        eps: the offline peak normalisation's guard (``audio / (max + eps)``).
    """

    encoder: ParakeetEncoderConfig
    transformer: TransformerConfig
    num_speakers: int = 4
    streaming_mode: bool = False
    streaming: StreamingParams = field(default_factory=StreamingParams)
    eps: float = 1e-3

    @property
    def projects(self) -> bool:
        """Whether an ``encoder_proj`` maps the FastConformer's width to the transformer's."""
        return self.encoder.hidden_size != self.transformer.hidden_size


_TRANSFORMER_KEYS: dict[str, Any] = {
    "_target_": ANY_VALUE,
    "num_layers": ANY_VALUE,
    "hidden_size": ANY_VALUE,
    "inner_size": ANY_VALUE,
    "num_attention_heads": ANY_VALUE,
    "mask_future": (False,),
    "attn_score_dropout": ANY_VALUE,
    "attn_layer_dropout": ANY_VALUE,
    "ffn_dropout": ANY_VALUE,
    "hidden_act": ("relu",),
    "pre_ln": (False, True),
    "pre_ln_final_layer_norm": (True, False),
}
_STREAMING_KEYS = tuple(f.name for f in dataclasses.fields(StreamingParams))
_MODULES_KEYS: dict[str, Any] = {
    "_target_": ANY_VALUE,
    "num_spks": ANY_VALUE,
    "dropout_rate": ANY_VALUE,
    "fc_d_model": ANY_VALUE,
    "tf_d_model": ANY_VALUE,
    "subsampling_factor": ANY_VALUE,  # checked against the encoder's below
    "causal_attn_rate": ANY_VALUE,  # training: limited right context in some batches
    "causal_attn_rc": ANY_VALUE,
    "scores_add_rnd": ANY_VALUE,  # training: noise on the compression's scores
    "max_index": ANY_VALUE,  # a placeholder index of NeMo's top-k
    **{k: ANY_VALUE for k in _STREAMING_KEYS},
}


def _section(cfg: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = cfg.get(key)
    if not isinstance(value, dict):
        raise LoadError(f"{where}: {NEMO_CONFIG} has no {key} section")
    return value


def config_from_nemo(cfg: Mapping[str, Any], where: str) -> tuple[SortformerConfig, FeatureSpec]:
    """The Sortformer config and mel feature spec of a ``model_config.yaml``.

    Raises:
        LoadError: a missing section, or a key or value oasr does not implement, naming it.
    """
    target = cfg.get("target")
    if target is not None and str(target).rsplit(".", 1)[-1] != TARGET:
        raise LoadError(f"{where}: target={target!r} is not NeMo's {TARGET}")
    if cfg.get("async_streaming", False):
        raise LoadError(
            f"{where}: async_streaming=True is not implemented by oasr (NeMo's synchronous streaming update is; "
            "it is what NeMo's forward runs for a streaming archive unless async_streaming is set)"
        )
    features = mel_from_nemo(_section(cfg, "preprocessor", where), "preprocessor")
    enc_section = _section(cfg, "encoder", where)
    fields = encoder_fields_from_nemo(enc_section, int(features.params["feature_size"]), "encoder")
    tf = _section(cfg, "transformer_encoder", where)
    check_target(tf, "TransformerEncoder", "transformer_encoder")
    check_section(tf, _TRANSFORMER_KEYS, "transformer_encoder")
    modules = _section(cfg, "sortformer_modules", where)
    check_target(modules, "SortformerModules", "sortformer_modules")
    check_section(modules, _MODULES_KEYS, "sortformer_modules")
    try:
        encoder = ParakeetEncoderConfig.from_dict(fields)
        transformer = TransformerConfig(
            num_layers=int(tf["num_layers"]),
            hidden_size=int(tf["hidden_size"]),
            inner_size=int(tf["inner_size"]),
            num_attention_heads=int(tf.get("num_attention_heads", 1)),
            hidden_act=str(tf.get("hidden_act", "relu")),
            pre_ln=bool(tf.get("pre_ln", False)),
            pre_ln_final_layer_norm=bool(tf.get("pre_ln_final_layer_norm", True)),
        )
        num_speakers = int(cfg.get("max_num_of_spks", modules.get("num_spks", 4)))
        streaming = StreamingParams(**{k: modules[k] for k in _STREAMING_KEYS if k in modules})
        config = SortformerConfig(
            encoder=encoder,
            transformer=transformer,
            num_speakers=num_speakers,
            streaming_mode=bool(cfg.get("streaming_mode", False)),
            streaming=streaming,
            eps=float(cfg.get("eps", 1e-3)),
        )
        if config.streaming_mode:
            streaming.check(num_speakers)
    except (TypeError, ValueError) as e:
        raise LoadError(f"{where}: {e}") from e
    for key, want in (
        ("num_spks", num_speakers),
        ("fc_d_model", encoder.hidden_size),
        ("tf_d_model", transformer.hidden_size),
        ("subsampling_factor", encoder.subsampling_factor),
    ):
        if key in modules and int(modules[key]) != want:
            raise LoadError(f"{where}: sortformer_modules.{key}={modules[key]} but the model has {want}")
    return config, features
