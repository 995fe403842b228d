"""Granite Speech configuration: transformers' ``granite_speech`` ``config.json`` (its
``encoder_config``, ``projector_config`` (a BLIP-2 Q-Former) and ``text_config`` (Granite)).

``GraniteSpeechConfig.from_hf`` reads it; omitted fields take transformers' defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oasr.models.base import LoadError
from oasr.models.configs import ModelConfig
from oasr.models.decoders.causal_lm import CausalLmConfig

AUDIO_TOKEN = "<|audio|>"  # the processor's placeholder, expanded to one per projector output


@dataclass
class GraniteSpeechEncoderConfig(ModelConfig):
    """The conformer encoder (transformers' ``GraniteSpeechEncoderConfig`` names).

    Attributes:
        input_dim: features per frame (two stacked 80-bin log-mel frames: 160).
        num_layers / hidden_dim / num_heads / dim_head: depth, width, heads, head width.
        feedforward_mult: the feed-forward width over ``hidden_dim``.
        output_dim: the mid-encoder CTC head's classes (its softmax feeds back into the stream).
        context_size: frames per attention block (attention never crosses a block).
        max_pos_emb: Shaw relative positions are clamped to +-``context_size`` and offset by it.
        conv_kernel_size / conv_expansion_factor: the depthwise convolution and its width.
    """

    input_dim: int = 160
    num_layers: int = 10
    hidden_dim: int = 1024
    feedforward_mult: int = 4
    num_heads: int = 8
    dim_head: int | None = None
    output_dim: int = 42
    context_size: int = 200
    max_pos_emb: int = 512
    conv_kernel_size: int = 15
    conv_expansion_factor: int = 2

    def __post_init__(self) -> None:
        if self.dim_head is None:
            self.dim_head = self.hidden_dim // self.num_heads
        if not 0 < self.context_size <= self.max_pos_emb:
            raise ValueError(f"context_size={self.context_size} must be in (0, max_pos_emb={self.max_pos_emb}]")

    @classmethod
    def from_hf(cls, hf: Mapping[str, Any]) -> GraniteSpeechEncoderConfig:
        d = cls()
        names = [f for f in cls.__dataclass_fields__ if f != "dim_head"]
        kw = {f: int(hf[f]) if hf.get(f) is not None else getattr(d, f) for f in names}
        return cls(**kw, dim_head=None if hf.get("dim_head") is None else int(hf["dim_head"]))


@dataclass
class QFormerConfig(ModelConfig):
    """The projector's BLIP-2 Q-Former (queries only: no text input).

    Attributes:
        hidden_size / num_hidden_layers / num_attention_heads / intermediate_size: the usual.
        encoder_hidden_size: the width of what the cross-attention reads (the encoder's).
        cross_attention_frequency: layer i cross-attends when ``i % frequency == 0``.
        layer_norm_eps: every LayerNorm's epsilon.
    """

    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    encoder_hidden_size: int = 1408
    cross_attention_frequency: int = 2
    layer_norm_eps: float = 1e-12

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"Q-Former hidden_size={self.hidden_size} is not a multiple of its heads")

    @classmethod
    def from_hf(cls, hf: Mapping[str, Any]) -> QFormerConfig:
        """From a ``blip_2_qformer`` config dict.

        Raises:
            LoadError: what this Q-Former does not implement (another activation, text input).
        """
        if hf.get("model_type", "blip_2_qformer") != "blip_2_qformer":
            raise LoadError(f"projector_config.model_type={hf['model_type']!r} is not supported (blip_2_qformer)")
        if hf.get("hidden_act", "gelu") != "gelu":
            raise LoadError(f"projector_config.hidden_act={hf['hidden_act']!r} is not supported ('gelu')")
        if hf.get("use_qformer_text_input"):
            raise LoadError("projector_config.use_qformer_text_input=True is not supported (queries only)")
        d = cls()
        kw = {f: hf[f] if hf.get(f) is not None else getattr(d, f) for f in cls.__dataclass_fields__}
        return cls(**{k: (float(v) if k == "layer_norm_eps" else int(v)) for k, v in kw.items()})


def granite_text_config(hf: Mapping[str, Any]) -> CausalLmConfig:
    """A Granite ``text_config`` dict as the shared causal LM (Hugging Face ``GraniteConfig``
    defaults for omitted fields).

    ``logits_scaling`` is not read: transformers 5.x's Granite Speech puts its own ``lm_head``
    on the bare Granite model and never divides by it (greedy tokens are the same either way;
    sampled ones follow transformers).

    Raises:
        LoadError: scaled RoPE or another activation.
    """
    if hf.get("model_type", "granite") != "granite":
        raise LoadError(f"text_config.model_type={hf['model_type']!r} is not supported (Granite Speech's is 'granite')")
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) not in (None, "default"):
        raise LoadError(f"text_config: RoPE scaling {rope!r} is not supported")
    if hf.get("hidden_act", "silu") != "silu":
        raise LoadError(f"text_config.hidden_act={hf['hidden_act']!r} is not supported ('silu')")

    def get(key: str, default: Any) -> Any:
        value = hf.get(key)
        return default if value is None else value

    heads = int(get("num_attention_heads", 32))
    bias = bool(get("attention_bias", False))
    return CausalLmConfig(
        vocab_size=int(get("vocab_size", 32000)),
        hidden_size=int(get("hidden_size", 4096)),
        intermediate_size=int(get("intermediate_size", 11008)),
        num_hidden_layers=int(get("num_hidden_layers", 32)),
        num_attention_heads=heads,
        num_key_value_heads=int(get("num_key_value_heads", heads)),
        rms_norm_eps=float(get("rms_norm_eps", 1e-6)),
        rope_theta=float(get("rope_theta", rope.get("rope_theta", 10000.0))),
        max_position_embeddings=int(get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(get("tie_word_embeddings", False)),
        attention_bias=bias,
        o_proj_bias=bias,
        mlp_bias=bool(get("mlp_bias", False)),
        embedding_multiplier=float(get("embedding_multiplier", 1.0)),
        residual_multiplier=float(get("residual_multiplier", 1.0)),
        attention_multiplier=float(get("attention_multiplier", 1.0)),
    )


@dataclass
class GraniteSpeechConfig(ModelConfig):
    """Granite Speech: conformer encoder -> Q-Former window projector -> Granite LM.

    Attributes:
        encoder / projector / text: the three parts.
        window_size: encoder frames per projector window; downsample_rate: frames per query
            (a window gives ``window_size // downsample_rate`` LM positions).
        audio_token_id: the ``<|audio|>`` placeholder the projector's outputs overwrite.
        eos_token_ids: generation stops at these (the generation config's eos).
        chat_template: the checkpoint's chat template (Jinja), rendered for every prompt.
        languages: ISO codes of what the model transcribes (the model card's).
        tokenizer_path: the checkpoint's tokenizer.
    """

    encoder: GraniteSpeechEncoderConfig
    projector: QFormerConfig
    text: CausalLmConfig
    window_size: int = 15
    downsample_rate: int = 5
    audio_token_id: int = 49155
    eos_token_ids: tuple[int, ...] = (0,)
    chat_template: str = ""
    languages: tuple[str, ...] = ("en", "fr", "de", "es", "pt")
    tokenizer_path: str | None = None

    def __post_init__(self) -> None:
        if self.window_size % self.downsample_rate:
            raise ValueError(
                f"window_size={self.window_size} is not a multiple of downsample_rate={self.downsample_rate}"
            )
        if self.projector.encoder_hidden_size != self.encoder.hidden_dim:
            raise ValueError(
                f"the projector reads {self.projector.encoder_hidden_size} features but the encoder makes "
                f"{self.encoder.hidden_dim}"
            )
        if not self.eos_token_ids:
            raise ValueError("eos_token_ids must name at least one stop token")

    @property
    def queries(self) -> int:
        """LM positions per projector window."""
        return self.window_size // self.downsample_rate
