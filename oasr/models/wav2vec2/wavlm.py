"""WavLM (transformers' ``WavLMForCTC``): wav2vec2's encoder with a gated relative position
bias inside every attention.

WavLM (Chen et al. 2022) changes one thing in the wav2vec2 model (``model.py``): each
attention adds to its scores a learned bias over bucketed ``key - query`` distances, from
one table held by the first layer and gated per head and per query frame by each layer
from its own input (``oasr/layers/relpos_gated.py``). The conv front, projection, position
convolution, both layer orders (``do_stable_layer_norm``) and the CTC head are wav2vec2's,
so ``HFWavLMConverter`` is wav2vec2's converter with its own config, and its tensor names
are transformers' but for the gate and table, which move into the attention's
``gated_bias`` block. Padded batches and packed rows both work: the bias depends only on
positions within a row, and the attention lays every packed row out from position 0, so
one (H, T_max, T_max) table serves every row.

Reads top to bottom: names, config, attention, layer, encoder, model, converter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from oasr.layers import GatedRelativePositionBias
from oasr.layers.packing import Packing
from oasr.models.base import LoadError
from oasr.models.registry import CheckpointBundle
from oasr.models.wav2vec2.config import Wav2Vec2Config
from oasr.models.wav2vec2.convert import HFWav2Vec2Converter, config_fields
from oasr.models.wav2vec2.model import Wav2Vec2Attention, Wav2Vec2CtcModel, Wav2Vec2Encoder, Wav2Vec2EncoderLayer

ARCH = "wavlm"
# A checkpoint's gate and table sit in the attention; oasr's in its ``gated_bias`` block.
_GATED_BIAS_NAME = re.compile(r"(^|\.)(attention\.)(gru_rel_pos_const|gru_rel_pos_linear\.|rel_attn_embed\.)")


def checkpoint_name_to_oasr(name: str) -> str:
    """oasr's name of a WavLM layer tensor named as transformers names it (others unchanged):
    ``layers.0.attention.rel_attn_embed.weight`` -> ``layers.0.attention.gated_bias.rel_attn_embed.weight``."""
    return _GATED_BIAS_NAME.sub(r"\1\2gated_bias.\3", name)


@dataclass
class WavLMConfig(Wav2Vec2Config):
    """``Wav2Vec2Config`` plus the relative position buckets (defaults: WavLM's).

    Attributes:
        num_buckets: buckets of ``key - query`` distances, both directions together.
        max_bucket_distance: the distance where the logarithmic buckets end; any farther
            shares the last bucket.
    """

    model_type: str = "wavlm"
    num_buckets: int = 320
    max_bucket_distance: int = 800

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_buckets < 4:
            raise ValueError(f"num_buckets={self.num_buckets}: WavLM's buckets need at least 4")
        if self.max_bucket_distance <= self.num_buckets // 4:
            exact = self.num_buckets // 4
            raise ValueError(f"max_bucket_distance={self.max_bucket_distance} must exceed num_buckets // 4 ({exact})")


class WavLMAttention(Wav2Vec2Attention):
    """wav2vec2's attention plus the gated relative position bias (``gated_bias``; the
    ``table`` handed in is the first layer's, the gate this layer's own).

    Args:
        has_relative_position_bias: whether this layer holds the bias table (the first one).

    Shapes:
        x: (B, T, D), key_lengths: (B,) or None, bias: the table (H, T, T) -> (B, T, D); with
        ``packing``, x is (N, D) packed rows and T is ``packing.max_len`` -> (N, D)
    """

    def __init__(self, cfg: WavLMConfig, has_relative_position_bias: bool) -> None:
        super().__init__(cfg)
        self.gated_bias = GatedRelativePositionBias(
            self.n_head, self.head_dim, cfg.num_buckets, cfg.max_bucket_distance, has_relative_position_bias
        )

    def forward(
        self,
        x: torch.Tensor,
        key_lengths: torch.Tensor | None,
        packing: Packing | None = None,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if bias is None:
            raise ValueError("WavLM attention needs the first layer's position bias table")
        # The key padding rides in the gated bias (one pass over the (B, H, T, T) mask).
        return super().forward(x, None, packing, self.gated_bias(x, bias, key_lengths, packing))


class WavLMEncoderLayer(Wav2Vec2EncoderLayer):
    """wav2vec2's layer (post-norm, or pre-norm with ``stable``: transformers'
    ``WavLMEncoderLayer`` / ``WavLMEncoderLayerStableLayerNorm``) over ``WavLMAttention``.

    Shapes:
        as ``Wav2Vec2EncoderLayer``, with ``bias`` (H, T, T) the first layer's table
    """

    def __init__(self, cfg: WavLMConfig, stable: bool, has_relative_position_bias: bool) -> None:
        super().__init__(cfg, stable)
        self.attention = WavLMAttention(cfg, has_relative_position_bias)


class WavLMEncoder(Wav2Vec2Encoder):
    """wav2vec2's encoder whose layers share the first layer's position bias.

    Shapes:
        as ``Wav2Vec2Encoder``
    """

    def build_layer(self, cfg: WavLMConfig, index: int) -> nn.Module:
        return WavLMEncoderLayer(cfg, stable=cfg.do_stable_layer_norm, has_relative_position_bias=index == 0)

    def run_layers(self, x: torch.Tensor, key_lengths: torch.Tensor | None, packing: Packing | None) -> torch.Tensor:
        t = x.shape[1] if packing is None else packing.max_len
        table = self.layers[0].attention.gated_bias.table(t, x.device, x.dtype)  # (H, T, T)
        for layer in self.layers:
            x = layer(x, key_lengths, packing, table)
        return x


class WavLMCtcModel(Wav2Vec2CtcModel):
    """A WavLM encoder + CTC head (``lm_head``): (B, S, 1) normalised samples -> (B, T, V)
    float32 log-probs, decoded by the ``ctc`` strategy."""

    architecture = ARCH
    config_class = WavLMConfig
    encoder_class = WavLMEncoder


class HFWavLMConverter(HFWav2Vec2Converter):
    """A transformers ``WavLMForCTC`` directory (``save_pretrained``'s layout, as wav2vec2's)."""

    architecture = ARCH
    base_prefix: Mapping[str, str] = {"wavlm": "wavlm"}
    expected_unused_prefixes: tuple[str, ...] = ("wavlm.masked_spec_embed",)

    def load(self, path: Path) -> CheckpointBundle:
        bundle = super().load(path)
        bundle.state_dict = {checkpoint_name_to_oasr(k): v for k, v in bundle.state_dict.items()}
        return bundle

    def make_config(self, hf: Mapping[str, Any], where: str) -> WavLMConfig:
        """``WavLMConfig`` from a wavlm config.json: wav2vec2's fields plus the buckets.

        Raises:
            LoadError: a field oasr does not run.
        """
        buckets = {k: hf[k] for k in ("num_buckets", "max_bucket_distance") if hf.get(k) is not None}
        try:
            return WavLMConfig.from_dict({**config_fields(hf, where), **buckets})
        except (TypeError, ValueError) as e:
            raise LoadError(f"{where}: {e}") from e


__all__ = [
    "HFWavLMConverter",
    "WavLMAttention",
    "WavLMConfig",
    "WavLMCtcModel",
    "WavLMEncoder",
    "WavLMEncoderLayer",
    "checkpoint_name_to_oasr",
]
