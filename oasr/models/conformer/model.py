"""WeNet U2 / U2++ conformer: global CMVN, conv2d subsampling, rel-pos conformer
blocks, a CTC head and (optionally) the attention decoder used for rescoring.

Module names follow WeNet's state dict (``encoder.global_cmvn.*``,
``encoder.embed.conv.N.*``, ``encoder.encoders.N.self_attn.*``,
``encoder.encoders.N.feed_forward_macaron.w_1.*``, ``encoder.encoders.N.conv_module.*``,
``encoder.after_norm.*``, ``decoder.left_decoder.*``), so a WeNet checkpoint maps 1:1
apart from the CTC head (``ctc.ctc_lo.*`` -> ``ctc.*``, widened to the aligned width).

Attention follows WeNet's chunk masks: a model trained with dynamic chunks decodes
with the chunk the caller asks for (``decoding_chunk_size``, -1 or 0 = full context),
one trained with a static chunk always applies it, any other ignores the argument.

Streaming (a checkpoint trained with chunk masks): ``forward_chunk_paged`` is WeNet's
``forward_chunk`` for a batch of streams over the engine's paged K/V pool, each key with
the sinusoid of its absolute frame, causal convolution tails kept per stream.

Reads top to bottom: CMVN, subsampling, the causal convolution path (whole and by
chunk), the paged chunk attention, the block, the encoder, then the public model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers import (
    ConformerConvolution,
    Conv2d,
    FeedForward,
    LayerNorm,
    Linear,
    Relu,
    apply_activation,
)
from oasr.layers.attention import attention
from oasr.layers.packing import Packing
from oasr.layers.paged import paged_rows, read_paged, write_paged
from oasr.layers.relpos import RelPositionalEncoding, RelPositionMultiHeadedAttention, wenet_sinusoids_at
from oasr.models.base import BaseEncoder, DecodeType, PagedCacheView, StreamingKind
from oasr.models.conformer.config import ConformerEncoderConfig, ConformerModelConfig
from oasr.models.ctc import EncoderCtcModel
from oasr.models.decoders.transformer_decoder import BiTransformerDecoder


class GlobalCMVN(nn.Module):
    """``(x - mean) * istd`` with WeNet's stored statistics (buffers ``mean``, ``istd``).

    Shapes:
        x: (B, T, F) -> (B, T, F)
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("istd", torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) * self.istd


# ---------------------------------------------------------------------------
# Subsampling

# input_layer -> the (kernel, stride) of each Conv2d
_CONVS: dict[str, tuple[tuple[int, int], ...]] = {
    "conv2d": ((3, 2), (3, 2)),
    "conv2d6": ((3, 2), (5, 3)),
    "conv2d8": ((3, 2), (3, 2), (3, 2)),
}


def _conv_len(n: torch.Tensor | int, convs: tuple[tuple[int, int], ...]) -> Any:
    """Output length of unpadded valid convolutions: ``(n - k) // s + 1`` each, floored at 0."""
    for k, s in convs:
        n = (n - k) // s + 1
        n = n.clamp(min=0) if isinstance(n, torch.Tensor) else max(n, 0)
    return n


class Conv2dSubsampling(nn.Module):
    """WeNet's ``Conv2dSubsampling4/6/8``: ReLU convolutions over (time, frequency), a
    linear projection of the flattened (channel, frequency) plane, then ``x * sqrt(D)``
    and the position rows (``pos_enc``).

    Checkpoint names: ``conv.{0,2,4}``, then ``out.0`` (1/4) or ``linear`` (1/6, 1/8).

    Shapes:
        x: (B, T, F), lens: (B,) -> x (B, T', D), pos_emb (1, T', D), lens (B,)
    """

    def __init__(self, input_dim: int, d_model: int, input_layer: str) -> None:
        super().__init__()
        self.convs = _CONVS[input_layer]
        layers: list[nn.Module] = []
        for i, (k, s) in enumerate(self.convs):
            layers += [Conv2d(1 if i == 0 else d_model, d_model, k, s), Relu()]
        self.conv = nn.Sequential(*layers)
        proj = Linear(d_model * _conv_len(input_dim, self.convs), d_model)
        if input_layer == "conv2d":
            self.out = nn.Sequential(proj)
        else:
            self.linear = proj
        self.pos_enc = RelPositionalEncoding(d_model)

    def forward(self, x: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.conv(x[:, None])  # (B, D, T', F')
        b, c, t, f = x.shape
        x = x.transpose(1, 2).reshape(b, t, c * f)  # (B, T', D * F')
        x = self.out(x) if hasattr(self, "out") else self.linear(x)
        x, pos_emb = self.pos_enc(x)
        return x, pos_emb, _conv_len(lens, self.convs)


# ---------------------------------------------------------------------------
# Blocks


def chunk_attention_mask(
    size: int, chunk_size: int, num_left_chunks: int = -1, device: torch.device | None = None
) -> torch.Tensor:
    """WeNet's ``subsequent_chunk_mask``: frame i sees its own chunk, all earlier ones
    (or ``num_left_chunks`` of them when >= 0) and nothing later.

    Shapes:
        -> (size, size) bool, True where query i may attend key j
    """
    i = torch.arange(size, device=device)
    chunk = i // chunk_size
    end = ((chunk + 1) * chunk_size).clamp(max=size)
    if num_left_chunks < 0:
        start = torch.zeros_like(chunk)
    else:
        start = ((chunk - num_left_chunks) * chunk_size).clamp(min=0)
    j = i[None, :]
    return (j >= start[:, None]) & (j < end[:, None])


def _conv_module_out(conv: ConformerConvolution, y: torch.Tensor) -> torch.Tensor:
    """What follows the depthwise convolution: norm, activation, ``pointwise_conv2``.

    Shapes:
        y: (B, C, T) -> (B, C, T)
    """
    if conv.norm_kind == "batch_norm":
        y = conv.norm(y)
    else:
        y = conv.norm(y.transpose(1, 2)).transpose(1, 2)
    return conv.pointwise_conv2(apply_activation(y, conv.activation))


def _wenet_causal_conv(
    conv: ConformerConvolution, x: torch.Tensor, mask: torch.Tensor | None, packing: Packing | None = None
) -> torch.Tensor:
    """A causal convolution module the way WeNet computes it: the module's *input* is
    left-padded with k - 1 zero frames, so the first frames see ``glu(pointwise bias)``
    to their left rather than zeros (which is what the shared module's post-GLU padding
    would give). Causal frames never read the right-hand padding, so a padded batch
    still equals one row at a time. Packed rows get their k - 1 zero frames each.

    Shapes:
        x: (B, T, C), mask: (B, T) bool or None -> (B, T, C); packed: x (N, C) -> (N, C)
    """
    if packing is not None:
        y, index = packing.gapped(x.t()[None], (conv.kernel_size - 1, 0))  # (1, C, N + B * (k - 1))
    else:
        y = F.pad(x.transpose(1, 2), (conv.kernel_size - 1, 0))  # (B, C, k - 1 + T)
    y = F.glu(conv.pointwise_conv1(y), dim=1)
    y = conv.depthwise_conv(y)  # no padding left to add
    if packing is not None:
        y = y.index_select(-1, index)  # (1, C, N)
    y = _conv_module_out(conv, y)
    if mask is not None:
        y = y * mask[:, None, :].to(y.dtype)
    return y[0].t() if packing is not None else y.transpose(1, 2)


def _wenet_causal_conv_chunk(
    conv: ConformerConvolution, x: torch.Tensor, tail: torch.Tensor, lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One streaming chunk of a causal convolution module: the module's input continues
    the k - 1 input frames the stream's previous chunk ended with (zeros for its first
    chunk: exactly the offline left padding), as WeNet's ``cnn_cache``.

    Args:
        x: the chunk's module input; frames past ``lens`` are padding.
        tail: each row's last k - 1 input frames so far.
        lens: valid frames of each row's chunk.

    Returns:
        the output (padded frames unspecified) and each row's new tail: the last k - 1
        frames of ``tail`` followed by the row's valid frames.

    Shapes:
        x: (B, T, C), tail: (B, C, k - 1), lens: (B,) -> (B, T, C), (B, C, k - 1)
    """
    k1 = conv.kernel_size - 1
    y = torch.cat([tail.to(x.dtype), x.transpose(1, 2)], dim=2)  # (B, C, k - 1 + T)
    pick = lens.to(y.device, torch.long)[:, None] + torch.arange(k1, device=y.device)[None, :]  # (B, k - 1)
    new_tail = y.gather(2, pick[:, None, :].expand(-1, y.shape[1], -1))  # (B, C, k - 1)
    y = conv.depthwise_conv(F.glu(conv.pointwise_conv1(y), dim=1))  # (B, C, T)
    return _conv_module_out(conv, y).transpose(1, 2), new_tail


def _paged_rel_attention(
    attn: RelPositionMultiHeadedAttention,
    x: torch.Tensor,
    pos_emb: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    new_rows: tuple[torch.Tensor, torch.Tensor],
    window_rows: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """WeNet's rel-pos self-attention of a chunk over its stream's cached keys and itself.

    The chunk's K/V are written to the pool first (``new_rows``), then each row attends the
    window ``window_rows`` reads back: its history and its own valid frames, in order, with
    ``pos_emb`` the absolute position row of each window key (as WeNet's ``forward_chunk``:
    ``position_encoding(offset - cache_t1, cache_t1 + chunk)``). No mask within the chunk.

    Shapes:
        x: (B, T, D), pos_emb: (B, W, D), pools: (n_blocks, block_size, H, d_k),
        new_rows: (B, T) rows / valid, window_rows: (B, W) rows / valid -> (B, T, D)
    """
    b, t, d = x.shape
    q = attn._split(attn.linear_q(x))  # (B, T, H, d_k)
    write_paged(k_pool, *new_rows, attn._split(attn.linear_k(x)))
    write_paged(v_pool, *new_rows, attn._split(attn.linear_v(x)))
    rows, valid = window_rows
    k = read_paged(k_pool, rows, valid).transpose(1, 2)  # (B, H, W, d_k)
    v = read_paged(v_pool, rows, valid).transpose(1, 2)
    p = attn._split(attn.linear_pos(pos_emb)).permute(0, 2, 3, 1)  # (B, H, d_k, W)
    q_u = (q + attn.pos_bias_u).transpose(1, 2)  # (B, H, T, d_k)
    q_v = (q + attn.pos_bias_v).transpose(1, 2)
    scale = 1.0 / math.sqrt(attn.d_k)
    bias = torch.matmul(q_v, p) * scale  # (B, H, T, W): the position term
    allowed = valid[:, None, None, :]  # (B, 1, 1, W)
    allowed = allowed | ~allowed.any(dim=-1, keepdim=True)  # a row with no key: finite, discarded output
    bias = bias.masked_fill(~allowed, float("-inf"))
    out = attention(q_u, k, v, mask=bias, scale=scale).transpose(1, 2).reshape(b, t, d)  # (B, T, D)
    return attn.linear_out(out)


class ConformerEncoderLayer(nn.Module):
    """WeNet's ``ConformerEncoderLayer``: half-step macaron feed-forward, rel-pos
    self-attention, convolution module, half-step feed-forward, ``norm_final``
    (pre-norm residuals, or post-norm with ``normalize_before=False``).

    Shapes:
        x: (B, T, D), pos_emb: (1, T, D), lens: (B,), chunk_mask: (T, T) bool or None,
        valid: (B, T) bool -> (B, T, D); with ``packing``, x is (N, D) packed rows,
        T is ``packing.max_len`` and ``valid`` is None -> (N, D)
    """

    def __init__(self, cfg: ConformerEncoderConfig) -> None:
        super().__init__()
        d = cfg.output_size
        self.normalize_before = cfg.normalize_before
        self.causal = cfg.causal
        self.self_attn = RelPositionMultiHeadedAttention(
            cfg.attention_heads, d, query_bias=cfg.query_bias, key_bias=cfg.key_bias, value_bias=cfg.value_bias
        )
        self.feed_forward = FeedForward(d, cfg.linear_units, cfg.activation, bias=cfg.mlp_bias, names=("w_1", "w_2"))
        self.norm_ff = LayerNorm(d, eps=cfg.norm_eps)
        self.norm_mha = LayerNorm(d, eps=cfg.norm_eps)
        self.feed_forward_macaron = None
        self.ff_scale = 1.0
        if cfg.macaron_style:
            self.feed_forward_macaron = FeedForward(
                d, cfg.linear_units, cfg.activation, bias=cfg.mlp_bias, names=("w_1", "w_2")
            )
            self.norm_ff_macaron = LayerNorm(d, eps=cfg.norm_eps)
            self.ff_scale = 0.5
        self.conv_module = None
        if cfg.use_cnn_module:
            k = cfg.cnn_module_kernel
            self.conv_module = ConformerConvolution(
                d,
                k,
                bias=cfg.conv_bias,
                norm=cfg.cnn_module_norm,
                norm_eps=cfg.conv_norm_eps,
                activation=cfg.activation,
                padding=(k - 1, 0) if cfg.causal else None,
            )
            self.norm_conv = LayerNorm(d, eps=cfg.norm_eps)
            self.norm_final = LayerNorm(d, eps=cfg.norm_eps)

    def _residual(self, x: torch.Tensor, norm: LayerNorm, fn, scale: float = 1.0) -> torch.Tensor:
        if self.normalize_before:
            return x + scale * fn(norm(x))
        return norm(x + scale * fn(x))

    def _block(self, x: torch.Tensor, attend, convolve) -> torch.Tensor:
        """The block around its attention and convolution (each a function of the normed input)."""
        if self.feed_forward_macaron is not None:
            x = self._residual(x, self.norm_ff_macaron, self.feed_forward_macaron, self.ff_scale)
        x = self._residual(x, self.norm_mha, attend)
        if self.conv_module is not None:
            x = self._residual(x, self.norm_conv, convolve)
        x = self._residual(x, self.norm_ff, self.feed_forward, self.ff_scale)
        if self.conv_module is not None:
            x = self.norm_final(x)
        return x

    def _convolve(self, h: torch.Tensor, valid: torch.Tensor | None, packing: Packing | None = None) -> torch.Tensor:
        if self.causal:
            return _wenet_causal_conv(self.conv_module, h, valid, packing)
        return self.conv_module(h, valid, packing)

    def forward(
        self,
        x: torch.Tensor,
        pos_emb: torch.Tensor,
        lens: torch.Tensor,
        chunk_mask: torch.Tensor | None,
        valid: torch.Tensor | None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        return self._block(
            x,
            lambda h: self.self_attn(h, pos_emb, key_lengths=lens, chunk_mask=chunk_mask, packing=packing),
            lambda h: self._convolve(h, valid, packing),
        )

    def forward_chunk(
        self,
        x: torch.Tensor,
        pos_emb: torch.Tensor,
        lens: torch.Tensor,
        valid: torch.Tensor,
        kv: tuple[torch.Tensor, torch.Tensor],
        new_rows: tuple[torch.Tensor, torch.Tensor],
        window_rows: tuple[torch.Tensor, torch.Tensor],
        conv_tail: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One streaming chunk of a batch of streams (see ``ConformerEncoder.forward_chunk_paged``).

        Args:
            x: the chunk's frames (padded past ``lens``).
            pos_emb: position rows of each row's attention window.
            lens, valid: valid frames of each row, and as a mask.
            kv: this layer's K and V pools (the chunk's K/V are written into them).
            new_rows, window_rows: pool rows of the chunk's frames / of the window read.
            conv_tail: each row's causal convolution tail (None: a non-causal module,
                which, as in WeNet's ``forward_chunk``, sees zeros past the chunk's edges).

        Returns:
            the chunk's output and the rows' new convolution tails (None when non-causal).

        Shapes:
            x: (B, T, D), pos_emb: (B, W, D), lens: (B,), valid: (B, T),
            conv_tail: (B, D, k - 1) -> (B, T, D), (B, D, k - 1)
        """
        new_tail = None

        def convolve(h: torch.Tensor) -> torch.Tensor:
            nonlocal new_tail
            if conv_tail is None:
                return self.conv_module(h, valid)
            out, new_tail = _wenet_causal_conv_chunk(self.conv_module, h, conv_tail, lens)
            return out

        x = self._block(
            x, lambda h: _paged_rel_attention(self.self_attn, h, pos_emb, *kv, new_rows, window_rows), convolve
        )
        return x, new_tail


class ConformerEncoder(BaseEncoder):
    """CMVN -> conv2d subsampling -> rel-pos conformer blocks -> ``after_norm``.

    Shapes:
        feats: (B, T, F) fbank (before CMVN), feat_lens: (B,) -> (B, T', D), lens (B,)
    """

    def __init__(self, cfg: ConformerEncoderConfig) -> None:
        super().__init__()
        self.subsampling_rate = cfg.subsampling_rate
        self.right_context = cfg.right_context
        self.output_size = cfg.output_size
        self.cfg = cfg
        if cfg.global_cmvn:
            self.global_cmvn = GlobalCMVN(cfg.input_dim)
        self.embed = Conv2dSubsampling(cfg.input_dim, cfg.output_size, cfg.input_layer)
        self.encoders = nn.ModuleList(ConformerEncoderLayer(cfg) for _ in range(cfg.num_blocks))
        self.after_norm = LayerNorm(cfg.output_size, eps=cfg.norm_eps)

    # -- streaming (paged): WeNet's forward_chunk over a paged K/V pool ----------------

    @property
    def streaming_kind(self) -> StreamingKind:
        """Paged for a checkpoint trained with chunk masks (dynamic or static), whose
        chunk-by-chunk decoding WeNet supports; "none" for a full-context one."""
        if self.cfg.use_dynamic_chunk or self.cfg.static_chunk_size > 0:
            return "paged"
        return "none"

    @property
    def num_attention_layers(self) -> int:
        if self.streaming_kind == "none":
            return super().num_attention_layers  # refuses: a full-context checkpoint keeps no K/V cache
        return self.cfg.num_blocks

    @property
    def n_kv_head(self) -> int:
        if self.streaming_kind == "none":
            return super().n_kv_head  # refuses: a full-context checkpoint keeps no K/V cache
        return self.cfg.attention_heads

    @property
    def head_dim(self) -> int:
        if self.streaming_kind == "none":
            return super().head_dim  # refuses: a full-context checkpoint keeps no K/V cache
        return self.cfg.output_size // self.cfg.attention_heads

    @property
    def conv_cache_shape(self) -> tuple[int, int] | None:
        """(channels, k - 1) input frames of a causal convolution module; None without a
        convolution module or with a non-causal one (which WeNet runs within each chunk)."""
        if not self.cfg.use_cnn_module or not self.cfg.causal:
            return None
        return (self.cfg.output_size, self.cfg.cnn_module_kernel - 1)

    def forward_chunk_paged(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, cache: PagedCacheView
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """WeNet's ``forward_chunk`` for a batch of streams at different points of their streams.

        Each row's window of (C - 1) * sub + right_context + 1 feature frames (fewer valid
        at a stream's end) is normalised and subsampled to C frames; every block attends
        over the row's cached K/V (its last ``cache.history_frames`` frames, all of them
        when None: WeNet's ``required_cache_size``) plus the chunk itself, each key with
        the sinusoid of its absolute frame position, and appends the chunk's K/V to the
        pool; a causal convolution module continues from the row's tail in ``cache.conv``
        (updated in place).

        Args:
            feats: (B, T, input_dim) each row's window before CMVN (padded past ``feat_lens``).
            feat_lens: (B,) valid feature frames per row.
            cache: the rows' pool view (blocks for the chunk's frames already allocated).

        Returns:
            hidden (B, C, D) (frames past a row's length unspecified), lens (B,)
        """
        if self.streaming_kind == "none":
            return super().forward_chunk_paged(feats, feat_lens, cache)  # refuses
        x, _, lens = self._front(feats, feat_lens)  # (B, T', D), positions taken below
        b, t, _ = x.shape
        dev = x.device
        lens = lens.to(dev)
        cached = cache.cache_lens.to(dev, torch.long)
        history = cached if cache.history_frames is None else cached.clamp(max=int(cache.history_frames))
        start = cached - history  # first frame of each row's window
        width = int(history.max()) + t
        tables = cache.block_tables.to(dev)
        new_rows = paged_rows(tables, cached, lens, t, cache.block_size)
        window_rows = paged_rows(tables, start, history + lens, width, cache.block_size)
        positions = start[:, None] + torch.arange(width, device=dev)[None, :]  # (B, W) absolute frames
        pos_emb = wenet_sinusoids_at(positions, self.cfg.output_size).to(x.dtype)
        valid = torch.arange(t, device=dev)[None, :] < lens[:, None]  # (B, T')
        slots = cache.slots.to(dev, torch.long)
        for i, layer in enumerate(self.encoders):
            tail = cache.conv[i].index_select(0, slots) if self.conv_cache_shape is not None else None
            x, new_tail = layer.forward_chunk(
                x, pos_emb, lens, valid, (cache.k[i], cache.v[i]), new_rows, window_rows, tail
            )
            if new_tail is not None:
                cache.conv[i].index_copy_(0, slots, new_tail.to(cache.conv.dtype))
        return self._final_norm(x), lens

    def attention_chunk_mask(
        self, size: int, decoding_chunk_size: int = -1, num_decoding_left_chunks: int = -1, device=None
    ) -> torch.Tensor | None:
        """The chunk mask WeNet applies to ``size`` frames (None = full context).

        A dynamic-chunk model uses ``decoding_chunk_size`` (> 0; -1 or 0 is full
        context); a static-chunk model always uses its trained chunk; any other model
        ignores the argument, as WeNet does.
        """
        if self.cfg.use_dynamic_chunk:
            if decoding_chunk_size <= 0:
                return None
            return chunk_attention_mask(size, decoding_chunk_size, num_decoding_left_chunks, device)
        if self.cfg.static_chunk_size > 0:
            return chunk_attention_mask(size, self.cfg.static_chunk_size, num_decoding_left_chunks, device)
        return None

    def forward(
        self,
        feats: torch.Tensor,
        feat_lens: torch.Tensor,
        decoding_chunk_size: int = -1,
        num_decoding_left_chunks: int = -1,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode a padded batch.

        Args:
            feats: (B, T, input_dim) features before CMVN.
            feat_lens: (B,) valid frames per row.
            decoding_chunk_size: attention chunk in output frames for a dynamic-chunk
                model (-1 or 0: full context).
            num_decoding_left_chunks: chunks of left context (-1: all).

        Returns:
            hidden (B, T', D) (padded frames hold unspecified values), lens (B,)
        """
        if feats.dim() != 3 or feats.shape[-1] != self.cfg.input_dim:
            raise ValueError(
                f"ConformerEncoder expects features (B, T, {self.cfg.input_dim}), got {tuple(feats.shape)}"
            )
        x, pos_emb, lens = self._front(feats, feat_lens)
        t = x.shape[1]
        valid = torch.arange(t, device=x.device)[None, :] < lens[:, None]  # (B, T')
        chunk_mask = self.attention_chunk_mask(t, decoding_chunk_size, num_decoding_left_chunks, x.device)
        for layer in self.encoders:
            x = layer(x, pos_emb, lens, chunk_mask, valid)
        return self._final_norm(x), lens

    def forward_packed(
        self,
        feats: torch.Tensor,
        cu_seqlens: torch.Tensor,
        decoding_chunk_size: int = -1,
        num_decoding_left_chunks: int = -1,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode packed rows: the subsampling runs on the rows padded (its strided
        convolutions look along time), the blocks on the subsampled frames packed.

        Args:
            feats: (N, input_dim) the rows' features end to end, before CMVN.
            cu_seqlens: (B + 1,) cumulative feature frames per row.
            decoding_chunk_size, num_decoding_left_chunks: as in ``forward``.

        Returns:
            hidden (N', D) packed, cu_seqlens (B + 1,) of the hidden rows
        """
        if feats.dim() != 2 or feats.shape[-1] != self.cfg.input_dim:
            raise ValueError(
                f"ConformerEncoder.forward_packed expects features (N, {self.cfg.input_dim}), got {tuple(feats.shape)}"
            )
        rows = Packing.from_cu_seqlens(cu_seqlens, device=feats.device)
        x, pos_emb, lens = self._front(rows.pad(feats), rows.lengths)
        packing = Packing(lens)
        x = packing.unpad(x)  # (N', D)
        t = packing.max_len
        chunk_mask = self.attention_chunk_mask(t, decoding_chunk_size, num_decoding_left_chunks, x.device)
        for layer in self.encoders if packing.total else ():  # nothing to run when no row has a frame
            x = layer(x, pos_emb[:, :t], lens, chunk_mask, None, packing)
        return self._final_norm(x), packing.cu_seqlens

    def _front(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """CMVN and subsampling of a padded batch. -> x (B, T', D), pos_emb (1, T', D), lens (B,)"""
        feat_lens = feat_lens.to(device=feats.device, dtype=torch.long)
        x = feats.to(self.compute_dtype)
        shortest = self.cfg.right_context + 1  # frames the subsampling needs for one output frame
        if x.shape[1] < shortest:
            # Too short to subsample: pad so the convolutions run; such rows get length 0.
            x = F.pad(x, (0, 0, 0, shortest - x.shape[1]))
        if self.cfg.global_cmvn:
            x = self.global_cmvn(x)
        return self.embed(x, feat_lens)

    def _final_norm(self, x: torch.Tensor) -> torch.Tensor:
        if self.cfg.normalize_before and self.cfg.final_norm:
            x = self.after_norm(x)
        return x


class ConformerModel(EncoderCtcModel):
    """A WeNet U2 / U2++ model served through its CTC head, with attention rescoring
    when the checkpoint's decoder was built.

    ``capabilities`` is ``{ctc}``, plus ``ctc_aed_rescoring`` when ``self.decoder`` exists;
    the default decode type is CTC. A checkpoint trained with chunk masks streams
    (``streaming_kind="paged"``, ``ConformerEncoder.forward_chunk_paged``).
    """

    architecture = "conformer"
    config_class = ConformerModelConfig
    encoder_class = ConformerEncoder
    ctc_head_name = "ctc"

    def __init__(self, config: ConformerModelConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        decoder = self.config.decoder
        self.decoder = BiTransformerDecoder(decoder) if decoder is not None else None

    @property
    def capabilities(self) -> frozenset[DecodeType]:  # type: ignore[override]
        if self.decoder is None:
            return frozenset({DecodeType.CTC})
        return frozenset({DecodeType.CTC, DecodeType.CTC_AED_RESCORING})

    def encode_offline(
        self,
        feats: torch.Tensor,
        feat_lens: torch.Tensor,
        decoding_chunk_size: int = -1,
        num_decoding_left_chunks: int = -1,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder only (see ``ConformerEncoder.forward``). -> (B, T', D), (B,)"""
        return self.encoder(feats, feat_lens, decoding_chunk_size, num_decoding_left_chunks)

    def forward_offline(
        self,
        feats: torch.Tensor,
        feat_lens: torch.Tensor,
        decoding_chunk_size: int = -1,
        num_decoding_left_chunks: int = -1,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder + CTC head. (B, T, F), (B,) -> log-probs (B, T', V) float32, lens (B,)"""
        enc, lens = self.encode_offline(feats, feat_lens, decoding_chunk_size, num_decoding_left_chunks)
        return self.ctc_log_probs(enc), lens
