"""NeMo's cache-aware streaming FastConformer (``fastconformer_*_streaming`` configs) under
Parakeet's CTC, RNN-T / TDT and hybrid heads, from ``.nemo`` archives.

    feats -> causal dw_striding subsampling (``causal_downsampling: true``) -> x sqrt(D)
    -> N x [ FF/2; rel-pos MHSA under ``att_context_style``; Conv (``conv_context_size``:
             causal or centred; ``conv_norm_type``: batch or layer norm); FF/2; LN ]

The encoder is Nemotron's (``oasr.models.nemotron.model``: the causal subsampling, the
``chunked_limited`` attention in query blocks, the paged streaming over the engine's K/V pool,
causal convolution tails per slot), with NeMo's choices as config:

- ``att_context_size``: the [left, right] context that runs; a multi-lookahead checkpoint lists
  several (``att_context_sizes``), NeMo runs its first unless ``set_default_att_context_size``
  picks another (``EngineConfig.att_context_size``, through ``set_attention``);
- ``att_context_style``: ``chunked_limited`` (a query sees its chunk of ``right + 1`` frames and
  ``left / (right + 1)`` chunks before it: streams, one chunk a step as NeMo's
  ``conformer_stream_step`` does) or ``regular`` (a band of ``left`` / ``right`` frames, or full
  context: offline only, as NeMo's regular style streams only by recomputing its lookahead).

A stream's last chunk is what NeMo's ``CacheAwareStreamingAudioBuffer`` hands the encoder: its real
frames (not a padded chunk), and nothing when fewer than ``subsampling_factor`` feature frames
remain after the last whole chunk (NeMo's buffer stops there; its offline forward, and oasr's, give
those frames one more output). Otherwise streaming equals the offline forward frame for frame.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from oasr.layers import ConformerConvolution
from oasr.layers.relpos_local import LocalRelPositionAttention
from oasr.models.nemotron.config import NemotronEncoderConfig
from oasr.models.nemotron.model import ChunkedLimitedAttention, NemotronBlock, NemotronEncoder
from oasr.models.parakeet.config import ParakeetConfig, ParakeetHybridConfig, ParakeetTransducerConfig
from oasr.models.parakeet.model import (
    FastConformerBlock,
    ParakeetCtcModel,
    ParakeetHybridModel,
    ParakeetTransducerModel,
)

ATT_CONTEXT_STYLES = ("chunked_limited", "regular")


@dataclass
class CacheAwareEncoderConfig(NemotronEncoderConfig):
    """NeMo's cache-aware ``ConformerEncoder`` (causal subsampling).

    Attributes:
        att_context_style: ``chunked_limited`` or ``regular`` (NeMo's names).
        att_context_sizes: every [left, right] the checkpoint was trained with (NeMo's
            ``att_context_size`` list); ``att_context_size`` is the one that runs (default: the first).
        conv_norm: the convolution module's norm, ``batch_norm`` or ``layer_norm``.
        conv_context_size: (left, right) frames of the depthwise kernel: (kernel - 1, 0) is causal.

    ``sliding_window`` / ``default_num_lookahead_tokens`` (Nemotron's fields) are derived from
    ``att_context_size`` under ``chunked_limited``.
    """

    att_context_size: tuple[int, int] = (70, 13)  # the release's default lookahead
    att_context_style: str = "chunked_limited"
    att_context_sizes: tuple[tuple[int, int], ...] = ()
    conv_norm: str = "layer_norm"
    conv_context_size: tuple[int, int] = (8, 0)

    def __post_init__(self) -> None:
        if not self.att_context_sizes:
            self.att_context_sizes = (tuple(self.att_context_size),)
        if self.att_context_style not in ATT_CONTEXT_STYLES:
            raise ValueError(f"att_context_style={self.att_context_style!r} is not one of {ATT_CONTEXT_STYLES}")
        if self.attention_model != "rel_pos":
            raise ValueError(f"attention_model={self.attention_model!r}: a cache-aware encoder runs rel_pos")
        if tuple(self.att_context_size) not in {tuple(c) for c in self.att_context_sizes}:
            raise ValueError(
                f"att_context_size={list(self.att_context_size)} is not one this checkpoint was trained with "
                f"({[list(c) for c in self.att_context_sizes]})"
            )
        left, right = self.att_context_size
        if self.att_context_style == "chunked_limited":
            if left < 0 or right < 0 or left % (right + 1):
                raise ValueError(
                    f"chunked_limited att_context_size={[left, right]}: left and right >= 0, left a whole number "
                    "of right + 1 chunks (an unlimited side is not implemented)"
                )
            self.sliding_window, self.default_num_lookahead_tokens = left + 1, right
        if self.conv_norm not in ("batch_norm", "layer_norm"):
            raise ValueError(f"conv_norm={self.conv_norm!r} is not batch_norm or layer_norm")
        if len(self.conv_context_size) != 2 or sum(self.conv_context_size) != self.conv_kernel_size - 1:
            raise ValueError(
                f"conv_context_size={self.conv_context_size} does not span conv_kernel_size={self.conv_kernel_size}"
            )
        super().__post_init__()

    @property
    def band(self) -> tuple[int, int] | None:
        """The ``regular`` style's band (None: full context or ``chunked_limited``)."""
        return self.attention_context if self.att_context_style == "regular" else None

    @property
    def streams(self) -> bool:
        """Whether the weights stream: ``chunked_limited`` attention over a causal convolution."""
        return self.att_context_style == "chunked_limited" and self.conv_context_size[1] == 0


class CacheAwareBlock(NemotronBlock):
    """Nemotron's block with NeMo's choices: ``chunked_limited`` or ``regular`` attention, the
    convolution's norm and context.

    Shapes:
        x: (B, T, D), lengths: (B,), valid: (B, T) bool -> (B, T, D)
    """

    def __init__(self, cfg: CacheAwareEncoderConfig) -> None:
        d, k = cfg.hidden_size, cfg.conv_kernel_size
        if cfg.att_context_style == "chunked_limited":
            attn: Any = ChunkedLimitedAttention(
                d, cfg.num_attention_heads, cfg.attention_bias, cfg.attention_chunk, cfg.left_chunks
            )
        else:
            attn = LocalRelPositionAttention(d, cfg.num_attention_heads, bias=cfg.attention_bias)
            attn.set_context(cfg.band)
        conv = ConformerConvolution(
            d,
            k,
            bias=cfg.convolution_bias,
            norm=cfg.conv_norm,
            activation=cfg.hidden_act,
            padding=tuple(cfg.conv_context_size),
        )
        FastConformerBlock.__init__(self, cfg, attn, conv)

    def set_context(self, cfg: CacheAwareEncoderConfig) -> None:
        """Attend with ``cfg``'s context (its style is the one this block was built with)."""
        if isinstance(self.self_attn, ChunkedLimitedAttention):
            self.self_attn.chunk, self.self_attn.left_chunks = cfg.attention_chunk, cfg.left_chunks
        else:
            self.self_attn.set_context(cfg.band)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        if isinstance(self.self_attn, ChunkedLimitedAttention):
            return super().forward(x, lengths, valid)
        return self.macaron(x, lambda y: self.self_attn(y, None, lengths), lambda y: self.conv(y, valid))


class CacheAwareEncoder(NemotronEncoder):
    """NeMo's cache-aware FastConformer: Nemotron's encoder (and its paged streaming) with the
    checkpoint's attention style, context and convolution, and the final chunk as NeMo's
    streaming buffer hands it over (``nemo_final_chunk``)."""

    block_class = CacheAwareBlock
    nemo_final_chunk = True
    # NeMo's buffer streams every frame of its front end's output, one more than the utterance's
    # valid length: the last STFT frame, masked to the preprocessor's pad value (0.0).
    streaming_tail_frames = 1

    @property
    def streaming_kind(self) -> str:
        return "paged" if self.config.streams else "none"

    def set_attention(self, attention_model: str | None, att_context_size: tuple[int, int] | None) -> None:
        """Run another of the checkpoint's trained contexts (NeMo's ``set_default_att_context_size``).

        Raises:
            ValueError: another attention model, or a context the checkpoint was not trained with.
        """
        if attention_model not in (None, "rel_pos"):
            raise ValueError(
                f"attention_model={attention_model!r}: a cache-aware checkpoint runs its trained rel_pos attention "
                f"(choose its context with att_context_size, one of {[list(c) for c in self.config.att_context_sizes]})"
            )
        if att_context_size is None:
            return
        self.config = dataclasses.replace(self.config, att_context_size=tuple(int(c) for c in att_context_size))
        for layer in self.layers:
            layer.set_context(self.config)


@dataclass
class CacheAwareCtcConfig(ParakeetConfig):
    """``ParakeetConfig`` over a cache-aware encoder."""

    encoder: CacheAwareEncoderConfig = field(default_factory=CacheAwareEncoderConfig)


@dataclass
class CacheAwareTransducerConfig(ParakeetTransducerConfig):
    """``ParakeetTransducerConfig`` over a cache-aware encoder."""

    encoder: CacheAwareEncoderConfig = field(default_factory=CacheAwareEncoderConfig)


@dataclass
class CacheAwareHybridConfig(ParakeetHybridConfig):
    """``ParakeetHybridConfig`` over a cache-aware encoder."""

    encoder: CacheAwareEncoderConfig = field(default_factory=CacheAwareEncoderConfig)


class CacheAwareCtcModel(ParakeetCtcModel):
    """NeMo's ``EncDecCTCModelBPE`` over a cache-aware encoder."""

    architecture = "parakeet_cache_aware"
    config_class = CacheAwareCtcConfig
    encoder_class = CacheAwareEncoder


class CacheAwareTransducerModel(ParakeetTransducerModel):
    """NeMo's ``EncDecRNNTBPEModel`` (RNN-T or TDT) over a cache-aware encoder."""

    architecture = "parakeet_cache_aware_transducer"
    config_class = CacheAwareTransducerConfig
    encoder_class = CacheAwareEncoder


class CacheAwareHybridModel(ParakeetHybridModel):
    """NeMo's ``EncDecHybridRNNTCTCBPEModel`` over a cache-aware encoder."""

    architecture = "parakeet_cache_aware_hybrid"
    config_class = CacheAwareHybridConfig
    encoder_class = CacheAwareEncoder


# The config class of each head's cache-aware model, by its plain Parakeet config class.
CACHE_AWARE_CONFIGS: Mapping[type, type] = {
    ParakeetConfig: CacheAwareCtcConfig,
    ParakeetTransducerConfig: CacheAwareTransducerConfig,
    ParakeetHybridConfig: CacheAwareHybridConfig,
}

__all__ = [
    "CACHE_AWARE_CONFIGS",
    "CacheAwareBlock",
    "CacheAwareCtcConfig",
    "CacheAwareCtcModel",
    "CacheAwareEncoder",
    "CacheAwareEncoderConfig",
    "CacheAwareHybridConfig",
    "CacheAwareHybridModel",
    "CacheAwareTransducerConfig",
    "CacheAwareTransducerModel",
]
