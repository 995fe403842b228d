"""Moonshine configuration: transformers' ``MoonshineConfig`` fields oasr reads, with its defaults
(those of UsefulSensors/moonshine-tiny), plus the ids and limits the decode needs.

transformers builds every attention of the model from one shared config whose head counts the
last-built attention overwrites, so its encoder and decoder run with one head count; a config
whose encoder and decoder heads differ (or that asks for grouped-query attention, which its
query reshape cannot take) is refused rather than read another way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oasr.models.base import LoadError
from oasr.models.configs import ModelConfig
from oasr.models.formats.hf import token_ids

# transformers' MoonshineConfig defaults: what an omitted config.json field means.
_HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32768,
    "hidden_size": 288,
    "intermediate_size": 1152,
    "encoder_num_hidden_layers": 6,
    "decoder_num_hidden_layers": 6,
    "encoder_num_attention_heads": 8,
    "decoder_num_attention_heads": 8,
    "encoder_num_key_value_heads": None,
    "decoder_num_key_value_heads": None,
    "encoder_hidden_act": "gelu",
    "decoder_hidden_act": "silu",
    "max_position_embeddings": 512,
    "decoder_start_token_id": 1,
    "eos_token_id": 2,
    "attention_bias": False,
    "tie_word_embeddings": True,
}

MAX_LENGTH_PER_SECOND = 6.5
"""The generation limit Useful Sensors' model card gives for Moonshine: ``max_length`` (the
decoder-start token included) of 6.5 tokens per second of audio, so that silence or noise cannot
make the decoder run on (``int(samples * 6.5 / sampling_rate)``)."""


@dataclass
class MoonshineConfig(ModelConfig):
    """Geometry and ids of a Moonshine checkpoint.

    Attributes:
        vocab_size, hidden_size, intermediate_size: the usual (the decoder MLP's first
            projection is ``2 * intermediate_size`` wide: SwiGLU).
        encoder_layers / decoder_layers: transformer layers of each stack.
        num_heads: attention heads of every attention (encoder and decoder alike).
        encoder_act / decoder_act: MLP activations ("gelu": exact erf; "silu").
        rope_theta: rotary base; partial_rotary_factor: the share of each head's width that
            is rotated (transformers' default 0.9).
        max_position_embeddings: the decoder context oasr keeps (K/V pool rows).
        attention_bias: q/k/v projections carry a bias.
        tie_word_embeddings: logits through the token embedding.
        decoder_start_token_id / eos_token_id: the decode's first input and stop id.
        tokenizer_path: the checkpoint's ``tokenizer.json`` (set by the converter).
    """

    vocab_size: int = 32768
    hidden_size: int = 288
    intermediate_size: int = 1152
    encoder_layers: int = 6
    decoder_layers: int = 6
    num_heads: int = 8
    encoder_act: str = "gelu"
    decoder_act: str = "silu"
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.9
    max_position_embeddings: int = 512
    attention_bias: bool = False
    tie_word_embeddings: bool = True
    decoder_start_token_id: int = 1
    eos_token_id: int = 2
    tokenizer_path: str | None = None

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} is not a multiple of num_heads={self.num_heads}")
        for name in ("decoder_start_token_id", "eos_token_id"):
            if not 0 <= getattr(self, name) < self.vocab_size:
                raise ValueError(f"{name}={getattr(self, name)} is outside the vocabulary of {self.vocab_size}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def rotary_dim(self) -> int:
        """Rotated channels of a head: transformers' ``int(head_dim * factor)`` rounded up to a pair."""
        dim = int(self.head_dim * self.partial_rotary_factor)
        return 2 * ((dim + 1) // 2)

    @classmethod
    def from_hf(cls, hf: Mapping[str, Any], *, eos_token_id: int | None = None) -> MoonshineConfig:
        """Read a transformers ``config.json`` dict (``model_type: moonshine``).

        Raises:
            LoadError: what transformers' classes would not run as declared (different
                encoder / decoder heads, grouped-query attention, a scaled rotary embedding).
        """
        d = {**_HF_DEFAULTS, **{k: v for k, v in hf.items() if v is not None}}
        heads = {
            "encoder_num_attention_heads": int(d["encoder_num_attention_heads"]),
            "decoder_num_attention_heads": int(d["decoder_num_attention_heads"]),
            "encoder_num_key_value_heads": int(d["encoder_num_key_value_heads"] or d["encoder_num_attention_heads"]),
            "decoder_num_key_value_heads": int(d["decoder_num_key_value_heads"] or d["decoder_num_attention_heads"]),
        }
        if len(set(heads.values())) != 1:
            raise LoadError(f"Moonshine runs one head count for every attention (no GQA); the config has {heads}")
        rope = d.get("rope_parameters") or {}
        rope_type = rope.get("rope_type", "default")
        if rope_type != "default":
            raise LoadError(f"Moonshine: rope_type={rope_type!r} is not supported (only the default rotary embedding)")
        eos = token_ids(d.get("eos_token_id"))
        return cls(
            vocab_size=int(d["vocab_size"]),
            hidden_size=int(d["hidden_size"]),
            intermediate_size=int(d["intermediate_size"]),
            encoder_layers=int(d["encoder_num_hidden_layers"]),
            decoder_layers=int(d["decoder_num_hidden_layers"]),
            num_heads=heads["encoder_num_attention_heads"],
            encoder_act=str(d["encoder_hidden_act"]),
            decoder_act=str(d["decoder_hidden_act"]),
            rope_theta=float(rope.get("rope_theta", d.get("rope_theta", 10000.0))),
            partial_rotary_factor=float(rope.get("partial_rotary_factor", d.get("partial_rotary_factor", 0.9))),
            max_position_embeddings=int(d["max_position_embeddings"]),
            attention_bias=bool(d["attention_bias"]),
            tie_word_embeddings=bool(d["tie_word_embeddings"]),
            decoder_start_token_id=int(d["decoder_start_token_id"]),
            eos_token_id=int(eos_token_id if eos_token_id is not None else eos[0]),
        )


__all__ = ["MAX_LENGTH_PER_SECOND", "MoonshineConfig"]
