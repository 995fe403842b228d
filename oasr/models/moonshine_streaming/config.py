"""Moonshine Streaming configuration, read from transformers' ``moonshine_streaming``
``config.json`` (the decoder at the top level, the encoder under ``encoder_config``).

A field the file omits takes the default of transformers' ``MoonshineStreamingConfig`` /
``MoonshineStreamingEncoderConfig``, so a released directory is built from its config alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oasr.models.base import LoadError
from oasr.models.configs import ModelConfig

# transformers' MoonshineStreamingEncoderConfig defaults.
_ENCODER_DEFAULTS: dict[str, Any] = {
    "hidden_size": 320,
    "intermediate_size": 1280,
    "hidden_act": "gelu",
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "attention_bias": False,
    "sample_rate": 16000,
    "frame_ms": 5.0,
    "sliding_windows": [[16, 4], [16, 4], [16, 0], [16, 0], [16, 4], [16, 4]],
    "head_dim": None,
}
# transformers' MoonshineStreamingConfig defaults (the decoder).
_DECODER_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32768,
    "hidden_size": 320,
    "intermediate_size": 1280,
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": None,
    "attention_bias": False,
    "head_dim": None,
    "tie_word_embeddings": False,
}
_ROPE_DEFAULTS = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.8}
_ACTIVATIONS = ("gelu", "silu")


@dataclass
class MoonshineStreamingConfig(ModelConfig):
    """The whole model's geometry (transformers' names, the encoder's prefixed ``encoder_``).

    Attributes:
        frame_len: samples per encoder input frame (``sample_rate * frame_ms / 1000``: 80).
        sliding_windows: per encoder layer, (left, right): a frame attends to the ``left``
            frames up to itself and the ``right - 1`` after it.
        max_position_embeddings: the decoder's positions, and the encoder frames the
            decoder's learned position table (``pos_emb``) covers.
        rotary_dim: the rotated dimensions of each decoder head (pairs of interleaved
            dimensions: ``partial_rotary_factor`` of the head, rounded up to even).
        decoder_start_token_id: the one token of the decoder prompt.
        eos_token_ids: generation stops at any of these.
    """

    vocab_size: int = 32768
    sample_rate: int = 16000
    frame_len: int = 80
    encoder_hidden_size: int = 320
    encoder_intermediate_size: int = 1280
    encoder_hidden_act: str = "gelu"
    encoder_layers: int = 6
    encoder_heads: int = 8
    encoder_kv_heads: int = 8
    encoder_head_dim: int = 40
    encoder_attention_bias: bool = False
    sliding_windows: tuple[tuple[int, int], ...] = ((16, 4), (16, 4), (16, 0), (16, 0), (16, 4), (16, 4))
    hidden_size: int = 320
    intermediate_size: int = 1280
    hidden_act: str = "silu"
    num_hidden_layers: int = 6
    num_attention_heads: int = 8
    head_dim: int = 40
    attention_bias: bool = False
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.8
    tie_word_embeddings: bool = False
    pad_token_id: int = 0
    decoder_start_token_id: int = 1
    eos_token_ids: tuple[int, ...] = (2,)

    def __post_init__(self) -> None:
        if len(self.sliding_windows) != self.encoder_layers:
            raise ValueError(f"{len(self.sliding_windows)} sliding windows for {self.encoder_layers} encoder layers")
        if self.encoder_heads % self.encoder_kv_heads:
            raise ValueError(f"encoder heads {self.encoder_heads} not a multiple of K/V heads {self.encoder_kv_heads}")
        for name in ("encoder_hidden_act", "hidden_act"):
            if getattr(self, name) not in _ACTIVATIONS:
                raise ValueError(f"{name}={getattr(self, name)!r} is not supported (one of {_ACTIVATIONS})")

    @property
    def rotary_dim(self) -> int:
        dim = int(self.head_dim * self.partial_rotary_factor)
        return 2 * ((dim + 1) // 2)

    @property
    def input_dim(self) -> int:
        """Features per input frame: the front end hands the encoder the waveform, one sample a frame."""
        return 1

    @classmethod
    def from_hf(
        cls, hf: Mapping[str, Any], *, eos_token_ids: tuple[int, ...] | None = None
    ) -> MoonshineStreamingConfig:
        """Build from a ``config.json`` dict (``model_type: moonshine_streaming``).

        Raises:
            LoadError: a rope type other than the default, or geometry that cannot be built.
        """
        dec = {k: hf.get(k, v) if hf.get(k) is not None else v for k, v in _DECODER_DEFAULTS.items()}
        enc_in = hf.get("encoder_config") or {}
        enc = {k: enc_in.get(k, v) if enc_in.get(k) is not None else v for k, v in _ENCODER_DEFAULTS.items()}
        rope = {**_ROPE_DEFAULTS, **(hf.get("rope_parameters") or {})}
        if rope.get("rope_type", "default") != "default":
            raise LoadError(f"rope_type={rope['rope_type']!r} is not supported (Moonshine Streaming uses the default)")
        heads = int(dec["num_attention_heads"])
        kv_heads = hf.get("num_key_value_heads")
        if kv_heads is not None and int(kv_heads) != heads:
            # transformers' decoder attention views its queries with num_key_value_heads heads
            raise LoadError(f"decoder num_key_value_heads={kv_heads} != num_attention_heads={heads} is not supported")
        start = dec["decoder_start_token_id"]
        stops = eos_token_ids or tuple(
            int(t) for t in (dec["eos_token_id"] if isinstance(dec["eos_token_id"], list) else [dec["eos_token_id"]])
        )
        try:
            return cls(
                vocab_size=int(dec["vocab_size"]),
                sample_rate=int(enc["sample_rate"]),
                frame_len=int(round(int(enc["sample_rate"]) * float(enc["frame_ms"]) / 1000.0)),
                encoder_hidden_size=int(enc["hidden_size"]),
                encoder_intermediate_size=int(enc["intermediate_size"]),
                encoder_hidden_act=str(enc["hidden_act"]),
                encoder_layers=int(enc["num_hidden_layers"]),
                encoder_heads=int(enc["num_attention_heads"]),
                encoder_kv_heads=int(enc["num_key_value_heads"]),
                encoder_head_dim=int(enc["head_dim"] or int(enc["hidden_size"]) // int(enc["num_attention_heads"])),
                encoder_attention_bias=bool(enc["attention_bias"]),
                sliding_windows=tuple((int(a), int(b)) for a, b in enc["sliding_windows"]),
                hidden_size=int(dec["hidden_size"]),
                intermediate_size=int(dec["intermediate_size"]),
                hidden_act=str(dec["hidden_act"]),
                num_hidden_layers=int(dec["num_hidden_layers"]),
                num_attention_heads=heads,
                head_dim=int(dec["head_dim"] or int(dec["hidden_size"]) // heads),
                attention_bias=bool(dec["attention_bias"]),
                max_position_embeddings=int(dec["max_position_embeddings"]),
                rope_theta=float(rope["rope_theta"]),
                partial_rotary_factor=float(rope.get("partial_rotary_factor", 1.0)),
                tie_word_embeddings=bool(dec["tie_word_embeddings"]),
                pad_token_id=int(dec["pad_token_id"] if dec["pad_token_id"] is not None else 0),
                decoder_start_token_id=int(start if start is not None else dec["bos_token_id"]),
                eos_token_ids=stops,
            )
        except ValueError as e:
            raise LoadError(f"moonshine_streaming config: {e}") from None


__all__ = ["MoonshineStreamingConfig"]
