"""The wav2vec2 family (transformers' ``Wav2Vec2ForCTC``, ``HubertForCTC``,
``Data2VecAudioForCTC``): a CTC head over a transformer over a convolutional waveform encoder.

    samples (B, S) -> feature_extractor: conv layers (unpadded, strided, GELU), normalised by
                      a GroupNorm over time on the first ("group") or a LayerNorm on each ("layer")
                   -> feature_projection: LayerNorm (optional for HuBERT) + Linear to the width
                   -> pos_conv_embed: a grouped convolution over time (weight norm folded at
                      load; data2vec-audio: a stack of them, each with a LayerNorm) added on
                   -> layers: post-norm ("LayerNorm, then layers") or pre-norm with a final
                      LayerNorm (``do_stable_layer_norm``)
                   -> lm_head: CTC log-probs over the character vocabulary

Module names are transformers' with the base model's prefix (``wav2vec2.``, ``hubert.``,
``data2vec_audio.``) under ``encoder.`` (``convert.py`` maps them).

Padding: every row of a padded batch gets what it gets alone. The conv layers are unpadded, so a
row's valid output frames read only its valid samples; the one statistic over time, the first
layer's GroupNorm, is taken over each row's valid frames only; padded frames are zeroed ahead of
every position convolution (a row alone sees zeros there, the convolution's padding); attention
masks padded keys. Transformers runs "group" checkpoints without an attention mask, so its own
batched output depends on the padding; this is its output for each clip alone.

Building on it: ``Wav2Vec2Encoder.build_layer`` makes each transformer layer and
``Wav2Vec2Encoder.run_layers`` runs them, so a family whose layers take more (WavLM's gated
relative position bias, computed in the first layer and handed down) subclasses the encoder and
overrides those two; ``Wav2Vec2Attention`` takes an additive ``bias`` (B or 1, H, T, T).
Reads top to bottom: conv front, projection, position convolution, attention, layers, encoder,
model.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers import (
    BatchNorm1d,
    Conv1d,
    FeedForward,
    LayerNorm,
    Linear,
    MaskedGroupNorm,
    apply_activation,
    attention,
)
from oasr.layers.packing import Packing, as_packed, as_rows
from oasr.models.base import BaseEncoder
from oasr.models.ctc import EncoderCtcModel
from oasr.models.wav2vec2.config import Wav2Vec2Config

CONV_LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default in the conv layers (not config.layer_norm_eps)


def frame_mask(lengths: torch.Tensor, n: int) -> torch.Tensor:
    """(B, n) bool, True at each row's first ``lengths`` frames."""
    return torch.arange(n, device=lengths.device)[None, :] < lengths[:, None]


class ConvLayer(nn.Module):
    """One waveform conv layer: conv (unpadded) -> norm ("group", "layer" or none) -> activation.

    Shapes:
        x: (B, C_in, T), mask: (B, T_out) bool valid output frames or None -> (B, C_out, T_out)
    """

    def __init__(self, cfg: Wav2Vec2Config, index: int, norm: str | None) -> None:
        super().__init__()
        c_in = cfg.conv_dim[index - 1] if index else 1
        c_out = cfg.conv_dim[index]
        self.conv = Conv1d(c_in, c_out, cfg.conv_kernel[index], stride=cfg.conv_stride[index], bias=cfg.conv_bias)
        self.norm = norm
        if norm == "group":
            self.layer_norm = MaskedGroupNorm(c_out)
        elif norm == "layer":
            self.layer_norm = LayerNorm(c_out, CONV_LAYER_NORM_EPS)
        self.activation = cfg.feat_extract_activation

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.conv(x)
        if self.norm == "group":
            x = self.layer_norm(x, mask)
        elif self.norm == "layer":
            x = self.layer_norm(x.transpose(1, 2)).transpose(1, 2)
        return apply_activation(x, self.activation)


class FeatureEncoder(nn.Module):
    """The conv layers over the waveform (transformers' ``feature_extractor``).

    Shapes:
        samples: (B, S), lengths: (B,) -> (B, T, conv_dim[-1]), frames (B,)
    """

    def __init__(self, cfg: Wav2Vec2Config) -> None:
        super().__init__()
        self.cfg = cfg
        norms = [
            cfg.feat_extract_norm if cfg.feat_extract_norm == "layer" or i == 0 else None
            for i in range(len(cfg.conv_dim))
        ]
        self.conv_layers = nn.ModuleList(ConvLayer(cfg, i, norm) for i, norm in enumerate(norms))

    def forward(self, samples: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        full = bool((lengths == samples.shape[1]).all())
        if full or samples.device.type != "cpu":
            return self.run(samples, lengths, full)
        # On a CPU a padded batch goes through row by row, each row on its own samples: batched, the
        # padding costs as many convolutions as the rows (eight clips padded to a 30-s one: up to 8x
        # the work) and every layer's (B, 512, frames) output is held at once (1.5 GB for those eight).
        # A row alone is what the masked batch computes for it; the padded frames come back as zeros.
        n_out = int(self.cfg.output_lengths(torch.tensor([samples.shape[1]]))[0])
        rows, out_lengths = [], []
        for row, n in zip(samples, lengths.tolist()):
            x, n_frames = self.run(row[None, : max(n, self.cfg.receptive_field)], lengths.new_tensor([n]), True)
            rows.append(F.pad(x, (0, 0, 0, n_out - x.shape[1])))
            out_lengths.append(n_frames)
        return torch.cat(rows), torch.cat(out_lengths)

    def run(self, samples: torch.Tensor, lengths: torch.Tensor, full: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The conv layers over a batch (``full``: no row padded, no mask needed).

        Shapes:
            samples: (B, S), lengths: (B,) -> (B, T, conv_dim[-1]), frames (B,)
        """
        x = samples[:, None, :]  # (B, 1, S)
        for layer, k, s in zip(self.conv_layers, self.cfg.conv_kernel, self.cfg.conv_stride):
            lengths = ((lengths - k) // s + 1).clamp(min=0)
            n_out = (x.shape[-1] - k) // s + 1
            x = layer(x, None if full else frame_mask(lengths, n_out))
        return x.transpose(1, 2), lengths  # (B, T, C)


class FeatureProjection(nn.Module):
    """LayerNorm (unless HuBERT's ``feat_proj_layer_norm`` is off) + Linear to the model width.

    Shapes:
        x: (..., conv_dim[-1]) -> (..., hidden_size)
    """

    def __init__(self, cfg: Wav2Vec2Config) -> None:
        super().__init__()
        c = cfg.conv_dim[-1]
        self.layer_norm = LayerNorm(c, cfg.layer_norm_eps) if cfg.feat_proj_layer_norm else None
        self.projection = Linear(c, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection(self.layer_norm(x) if self.layer_norm is not None else x)


class SamePadConv1d(Conv1d):
    """A grouped "same" convolution over time; an even kernel drops the last output frame
    (transformers' ``SamePad``). Its weight is plain: a checkpoint's weight norm is folded at load.

    Shapes:
        x: (B, D, T) -> (B, D, T)
    """

    def __init__(self, cfg: Wav2Vec2Config) -> None:
        k = cfg.pos_conv_kernel
        super().__init__(cfg.hidden_size, cfg.hidden_size, k, padding=k // 2, groups=cfg.pos_conv_groups)
        self.drop_last = k % 2 == 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y[..., :-1] if self.drop_last else y


class Data2VecPosConvLayer(nn.Module):
    """data2vec-audio's position convolution layer: conv, LayerNorm (no parameters), activation.

    Shapes:
        x: (B, D, T) -> (B, D, T)
    """

    def __init__(self, cfg: Wav2Vec2Config) -> None:
        super().__init__()
        self.conv = SamePadConv1d(cfg)
        self.layer_norm = LayerNorm(cfg.hidden_size, CONV_LAYER_NORM_EPS, elementwise_affine=False)
        self.activation = cfg.feat_extract_activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layer_norm(self.conv(x).transpose(1, 2)).transpose(1, 2)
        return apply_activation(y, self.activation)


class PositionalConvEmbedding(nn.Module):
    """The convolutional position embedding (transformers' ``pos_conv_embed``), added to the
    states by the encoder. "wav2vec2" style: (BatchNorm ->) conv -> activation; "data2vec": a
    stack of ``Data2VecPosConvLayer``. Padded frames are zeroed ahead of every convolution.

    Shapes:
        x: (B, T, D), mask: (B, T) bool or None -> (B, T, D)
    """

    def __init__(self, cfg: Wav2Vec2Config) -> None:
        super().__init__()
        self.style = cfg.pos_conv_style
        self.activation = cfg.feat_extract_activation
        if self.style == "data2vec":
            self.layers = nn.ModuleList(Data2VecPosConvLayer(cfg) for _ in range(cfg.pos_conv_layers))
        else:
            self.batch_norm = BatchNorm1d(cfg.hidden_size) if cfg.pos_conv_batch_norm else None
            self.conv = SamePadConv1d(cfg)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        keep = None if mask is None else mask[:, None, :].to(x.dtype)  # (B, 1, T)
        x = x.transpose(1, 2)  # (B, D, T)
        if self.style == "data2vec":
            for layer in self.layers:
                x = layer(x if keep is None else x * keep)
            return x.transpose(1, 2)
        if self.batch_norm is not None:
            x = self.batch_norm(x)
        x = self.conv(x if keep is None else x * keep)
        return apply_activation(x, self.activation).transpose(1, 2)


class Wav2Vec2Attention(nn.Module):
    """Multi-head self-attention with biased q / k / v / out projections.

    Shapes:
        x: (B, T, D), key_lengths: (B,) or None, bias: additive (B or 1, H, T, T) or None
        -> (B, T, D); with ``packing``, x is (N, D) packed rows attended per row -> (N, D)
    """

    def __init__(self, cfg: Wav2Vec2Config) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.n_head, self.head_dim = cfg.num_attention_heads, cfg.head_dim
        self.k_proj = Linear(d, d)
        self.v_proj = Linear(d, d)
        self.q_proj = Linear(d, d)
        self.out_proj = Linear(d, d)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def forward(
        self,
        x: torch.Tensor,
        key_lengths: torch.Tensor | None,
        packing: Packing | None = None,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        q = self.heads(as_rows(self.q_proj(x), packing))
        k = self.heads(as_rows(self.k_proj(x), packing))
        v = self.heads(as_rows(self.v_proj(x), packing))
        b, _, t, _ = q.shape
        out = attention(q, k, v, mask=bias, key_lengths=key_lengths)  # (B, H, T, Dh)
        out = out.transpose(1, 2).reshape(b, t, self.n_head * self.head_dim)  # (B, T, D)
        return self.out_proj(as_packed(out, packing))


class Wav2Vec2EncoderLayer(nn.Module):
    """A transformer layer: post-norm (``x = LN(x + attn(x)); x = LN'(x + ff(x))``), or with
    ``stable`` pre-norm (``x = x + attn(LN(x)); x = x + ff(LN'(x))``).

    Shapes:
        x: (B, T, D) or packed (N, D) with ``packing`` -> the same
    """

    def __init__(self, cfg: Wav2Vec2Config, stable: bool) -> None:
        super().__init__()
        self.stable = stable
        self.attention = Wav2Vec2Attention(cfg)
        self.layer_norm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps)
        self.feed_forward = FeedForward(
            cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act, names=("intermediate_dense", "output_dense")
        )
        self.final_layer_norm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        key_lengths: torch.Tensor | None,
        packing: Packing | None = None,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if self.stable:
            x = x + self.attention(self.layer_norm(x), key_lengths, packing, bias)
            return x + self.feed_forward(self.final_layer_norm(x))
        x = self.layer_norm(x + self.attention(x, key_lengths, packing, bias))
        return self.final_layer_norm(x + self.feed_forward(x))


class Wav2Vec2Encoder(BaseEncoder):
    """Conv front, projection, position convolution and the transformer layers.

    Shapes:
        feats: (B, S, 1) normalised samples (``Wav2Vec2Frontend``), feat_lens: (B,)
        -> hidden (B, T, D), hidden_lens (B,)
    """

    def __init__(self, cfg: Wav2Vec2Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.subsampling_rate = cfg.subsampling_rate
        self.output_size = cfg.hidden_size
        self.feature_extractor = FeatureEncoder(cfg)
        self.feature_projection = FeatureProjection(cfg)
        self.pos_conv_embed = PositionalConvEmbedding(cfg)
        self.layer_norm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps)
        self.layers = nn.ModuleList(self.build_layer(cfg, i) for i in range(cfg.num_hidden_layers))

    def build_layer(self, cfg: Wav2Vec2Config, index: int) -> nn.Module:
        """Transformer layer ``index`` (a family with other layers overrides this)."""
        return Wav2Vec2EncoderLayer(cfg, stable=cfg.do_stable_layer_norm)

    def run_layers(self, x: torch.Tensor, key_lengths: torch.Tensor | None, packing: Packing | None) -> torch.Tensor:
        """The transformer layers over ``x`` ((B, T, D), or packed (N, D) with ``packing``); a
        family whose layers hand each other more (a position bias) overrides this."""
        for layer in self.layers:
            x = layer(x, key_lengths, packing)
        return x

    def output_lengths(self, feat_lens: torch.Tensor) -> torch.Tensor:
        """Encoder frames of each row (0 for a row shorter than the receptive field)."""
        return self.cfg.output_lengths(feat_lens.long())

    def front(
        self, feats: torch.Tensor, feat_lens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Conv front, projection and position embedding of a padded batch: the states the
        transformer layers take (before the post-norm variant's LayerNorm), their lengths and
        the valid-frame mask (None when no row is padded).

        Shapes:
            feats: (B, S, 1), feat_lens: (B,) -> (B, T, D), (B,), (B, T) bool or None
        """
        if feats.dim() != 3 or feats.shape[-1] != 1:
            raise ValueError(f"wav2vec2 expects waveform frames (B, S, 1); got {tuple(feats.shape)}")
        samples = feats[..., 0]
        if samples.shape[1] < self.cfg.receptive_field:  # too short for one frame: every length is 0
            samples = F.pad(samples, (0, self.cfg.receptive_field - samples.shape[1]))
        x, lens = self.feature_extractor(samples, feat_lens.to(samples.device).long())
        x = self.feature_projection(x)
        mask = None if bool((lens == x.shape[1]).all()) else frame_mask(lens, x.shape[1])
        if mask is not None:
            x = x * mask[..., None].to(x.dtype)  # transformers zeroes padded frames here
        x = x + self.pos_conv_embed(x, mask)
        return x, lens, mask

    def forward(
        self, feats: torch.Tensor, feat_lens: torch.Tensor | None = None, **layer_args: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if feat_lens is None:
            feat_lens = torch.full((feats.shape[0],), feats.shape[1], dtype=torch.long, device=feats.device)
        x, lens, mask = self.front(feats, feat_lens)
        key_lengths = None if mask is None else lens.clamp(min=1)  # a row with no frame still needs a key
        return self.finish(x, key_lengths, None, **layer_args), lens

    def forward_packed(
        self, feats: torch.Tensor, cu_seqlens: torch.Tensor, **layer_args: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode packed rows: the conv front and the position convolution run on the rows
        padded (they look along time), the transformer layers on the frames packed.

        Shapes:
            feats: (N, 1), cu_seqlens: (B + 1,) -> hidden (N', D), cu_seqlens (B + 1,)
        """
        if feats.dim() != 2 or feats.shape[-1] != 1:
            raise ValueError(f"wav2vec2 packed input must be (N, 1); got {tuple(feats.shape)}")
        rows = Packing.from_cu_seqlens(cu_seqlens, device=feats.device)
        x, lens, _ = self.front(rows.pad(feats), rows.lengths)
        packing = Packing(lens)
        x = packing.unpad(x)  # (N', D)
        if not packing.total:  # no row has a frame: nothing to run
            return x, packing.cu_seqlens
        return self.finish(x, lens.clamp(min=1), packing, **layer_args), packing.cu_seqlens

    def finish(
        self, x: torch.Tensor, key_lengths: torch.Tensor | None, packing: Packing | None, **layer_args: Any
    ) -> torch.Tensor:
        """The LayerNorm and the layers, in the variant's order (``layer_args``: what a family's
        ``run_layers`` takes besides, handed down from ``forward`` / ``forward_packed``: MMS's
        per-row adapters)."""
        if self.cfg.do_stable_layer_norm:
            return self.layer_norm(self.run_layers(x, key_lengths, packing, **layer_args))
        return self.run_layers(self.layer_norm(x), key_lengths, packing, **layer_args)


class Wav2Vec2CtcModel(EncoderCtcModel):
    """A wav2vec2-family encoder + CTC head (``lm_head``; offline-only, decoded by the ``ctc``
    strategy): (B, S, 1) normalised samples -> (B, T, V) float32 log-probs."""

    architecture = "wav2vec2"
    config_class = Wav2Vec2Config
    encoder_class = Wav2Vec2Encoder
    encoder_reads_model_config = True
    ctc_head_name = "lm_head"
