"""Nemotron 3.5 ASR: cache-aware FastConformer + language prompt + LSTM RNN-T (HF ``nemotron3_5_asr``;
its English predecessor ``nemotron_asr_streaming`` is the same model without the prompt projector).

    feats (B, T, F) -> causal depthwise-separable 8x Conv2d subsampling -> x sqrt(D)
    -> N x [ x + 0.5 FF(LN x); x + chunked-limited RelPosXL-MHSA(LN x); x + causal Conv(LN x);
             x + 0.5 FF(LN x); LN ]
    -> prompt projector: linear_2(relu(linear_1 h + table[prompt]))      (B, T', D)
    -> joint(encoder_proj(.) + predictor(labels)) -> RNN-T greedy search

Module and tensor names follow the Hugging Face checkpoint except the attention
projections (``linear_q`` ... ``linear_pos``, as for Parakeet), the predictor
(``decoder.`` -> ``predictor.``), the joint (``encoder_projector.`` -> ``joiner.encoder_proj.``,
``joint.head.`` -> ``joiner.head.``) and the prompt projector, whose one-hot columns the
converter folds with the bias into ``prompt_projector.prompt_table.weight`` (num_prompts, I).

The ``chunked_limited`` mask is part of the trained model, so it applies offline too: a
query sees its own chunk of ``lookahead + 1`` frames and ``left_chunks`` chunks before it.
Offline attention runs in query blocks (``OFFLINE_BLOCK_FRAMES`` rounded up to whole chunks),
each against its own frames plus the trained history, so scores grow with T, not T^2.
Short utterances (T <= 2 x the keys of one block) stay one dense block.
Every mask is per utterance: a padded batch gives each row what it gets alone.

Cache-aware streaming runs over the engine's paged K/V pool (``NemotronEncoder``'s streaming
members, ``NemotronRnntModel.encode_chunk_paged``): the same chunked-limited attention on
absolute positions, the convolutions continued from their carried tails, each stream's
prompt id a persistent state.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from oasr.languages import parse_language, resolve_language
from oasr.layers import ConformerConvolution, Conv2d, Embedding, Linear
from oasr.layers.activation import apply_activation
from oasr.layers.attention import attention
from oasr.layers.paged import paged_rows, read_paged, write_paged
from oasr.layers.relpos_local import block_indices, blocked_attention
from oasr.layers.relpos_xl import RelPositionMultiHeadAttentionXL, xl_relative_positions
from oasr.models.base import (
    CacheSpec,
    PagedCacheView,
    StreamingGeometry,
    StreamStateSpec,
    chunk_units,
)
from oasr.models.nemotron.config import NemotronConfig, NemotronEncoderConfig
from oasr.models.parakeet.model import FastConformerBlock, FastConformerEncoder, ParakeetTransducerModel

# Queries per offline attention block (rounded up to whole attention chunks).
OFFLINE_BLOCK_FRAMES = 64


def _valid(lengths: torch.Tensor, n: int) -> torch.Tensor:
    """(B,) lengths -> (B, n) bool, True at frames inside each row."""
    return torch.arange(n, device=lengths.device)[None, :] < lengths[:, None]


class _SubsamplingStage(nn.Module):
    """Depthwise strided causal Conv2d + 1x1 pointwise Conv2d (checkpoint names kept)."""

    def __init__(self, channels: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.depthwise_conv = Conv2d(channels, channels, kernel, stride=stride, padding=kernel - 1, groups=channels)
        self.pointwise_conv = Conv2d(channels, channels, 1)


class NemotronSubsampling(nn.Module):
    """The causal depthwise-separable Conv2d front end over (time, mel).

    Every strided conv pads (kernel - 1) before and (stride - 1) after, in time and in
    frequency (NeMo's ``CausalConv2D``): ``conv_in`` (1 -> C), then (log2(factor) - 1) x
    [depthwise strided, pointwise], frames past each row's end zeroed after every stage,
    ReLU after each; the (C, F') map of each frame is flattened channel-major into ``linear``.

    Shapes:
        feats: (B, T, F), lengths: (B,) -> (B, T', D), (B,)
    """

    def __init__(self, cfg: NemotronEncoderConfig) -> None:
        super().__init__()
        k, s, c = cfg.subsampling_conv_kernel_size, cfg.subsampling_conv_stride, cfg.subsampling_conv_channels
        if k < s:
            raise ValueError(f"subsampling kernel {k} is shorter than its stride {s}")
        self.kernel_size, self.stride = k, s
        self.pad = (k - 1, s - 1)
        # conv_in's one-channel input is padded as it is; the depthwise convs pad (k - 1) on both sides
        # and their surplus last output row / column is cut: the kept outputs see exactly the
        # (k - 1, s - 1) causal padding, without a padded copy of a C-channel map.
        self.conv_in = Conv2d(1, c, k, stride=s)
        self.layers = nn.ModuleList(_SubsamplingStage(c, k, s) for _ in range(cfg.num_subsampling_layers - 1))
        freq = cfg.num_mel_bins
        for _ in range(cfg.num_subsampling_layers):
            freq = self._reduce(freq)
        self.linear = Linear(c * freq, cfg.hidden_size)

    def _reduce(self, n: Any) -> Any:
        """Length after one causal strided convolution."""
        return (n + sum(self.pad) - self.kernel_size) // self.stride + 1

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        for _ in range(len(self.layers) + 1):
            lengths = self._reduce(lengths)
        return lengths

    def _strided(self, conv: Conv2d, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One causal strided depthwise conv. (B, C, T, F) -> (B, C, T', F'), lengths after it"""
        t_out, f_out = self._reduce(x.shape[2]), self._reduce(x.shape[3])
        return conv(x)[:, :, :t_out, :f_out], self._reduce(lengths)

    @staticmethod
    def _mask_relu(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Zero the frames past each row's end, then ReLU, in place on a fresh conv output
        (the stage activations are the largest tensors of a long utterance)."""
        return x.mul_(_valid(lengths, x.shape[2])[:, None, :, None].to(x.dtype)).relu_()

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = (feats * _valid(lengths, feats.shape[1])[..., None].to(feats.dtype))[:, None]  # (B, 1, T, F)
        x = self.conv_in(F.pad(x, (*self.pad, *self.pad)))  # (freq left, right, time left, right)
        x = self._mask_relu(x, self._reduce(lengths))
        lengths = self._reduce(lengths)
        for stage in self.layers:
            x, lengths = self._strided(stage.depthwise_conv, x, lengths)
            x = self._mask_relu(stage.pointwise_conv(x), lengths)
        b, c, t, f = x.shape
        x = x.transpose(1, 2).reshape(b, t, c * f)  # (B, T', C * F'), channel-major
        return self.linear(x), lengths

    @property
    def tail_frames(self) -> int:
        """Input frames of each stage a stream carries into its next chunk (kernel - stride)."""
        return self.kernel_size - self.stride

    def stage_widths(self, num_mel_bins: int) -> list[tuple[int, int]]:
        """(channels, frequency bins) of each stage's input."""
        widths, freq = [(1, num_mel_bins)], num_mel_bins
        for _ in self.layers:
            freq = self._reduce(freq)
            widths.append((self.conv_in.weight.shape[0], freq))
        return widths

    def forward_chunk(
        self,
        feats: torch.Tensor,
        first_positions: torch.Tensor,
        tails: list[torch.Tensor],
        ends: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One streaming chunk: each stage reads its input's carried tail before the chunk (NeMo's
        cache-aware subsampling: ``kernel - stride`` frames, no right padding) and hands the
        chunk's last ones on.

        Every stage's output grid may start before the stream (``first_positions``, the
        absolute index of the chunk's first feature frame, negative in a stream's first chunk
        under its head frames): frames before position 0 are zeroed at every stage, which is
        what the offline causal padding and transformers' zero-initialised first chunk feed
        the next stage. With ``ends`` (B,), the absolute feature frame each row's stream ends at,
        every stage's frames past the stream's end are zeroed as well, as the offline forward
        masks them (a final chunk then gives what NeMo's short final chunk gives).

        Shapes:
            feats: (B, T, F) with T a multiple of the subsampling factor, first_positions: (B,),
            tails: per stage (B, C_i, kernel - stride, F_i), ends: (B,) or None
            -> (B, T / factor, D), the new tails (same shapes)
        """

        def before_start(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            at = pos[:, None] + torch.arange(x.shape[2], device=x.device)  # (B, T) absolute frame
            keep = at >= 0
            if ends is not None:
                keep &= at < stage_end[:, None]
            return x * keep[:, None, :, None].to(x.dtype)

        stage_end = ends
        x = before_start(feats[:, None], first_positions)  # (B, 1, T, F)
        pos, new_tails = first_positions, []
        stages = [(self.conv_in, None)] + [(stage.depthwise_conv, stage.pointwise_conv) for stage in self.layers]
        for tail, (conv, pointwise) in zip(tails, stages, strict=True):
            joined = torch.cat([tail, x], dim=2)  # (B, C, tail + T, F)
            new_tails.append(joined[:, :, joined.shape[2] - self.tail_frames :])
            x = F.conv2d(F.pad(joined, self.pad), conv.weight, conv.bias, conv.stride, 0, 1, conv.groups)
            if pointwise is not None:
                x = pointwise(x)
            # output J reads inputs [stride * J - (kernel - 1), stride * J]: the chunk's first output
            # reads up to the chunk's first input frame + stride - 1.
            pos = torch.div(pos + self.stride - 1, self.stride, rounding_mode="floor")
            if ends is not None:
                stage_end = self._reduce(stage_end)
            x = before_start(x, pos).relu_()
        b, c, t, f = x.shape
        return self.linear(x.transpose(1, 2).reshape(b, t, c * f)), new_tails  # (B, T', D), channel-major


def _shift(scores: torch.Tensor, n_queries: int, n_keys: int) -> torch.Tensor:
    """``rel_shift`` for Q queries against W keys: ``scores[..., a, p]`` is query ``a`` against
    the ``p``-th distance (largest first, ``W + Q - 1`` of them); the result's ``[..., a, w]``
    is ``scores[..., a, Q - 1 - a + w]``. One strided view (row stride ``W + Q - 2``).

    Shapes:
        scores: (..., Q, W + Q - 1) -> (..., Q, W)
    """
    scores = scores.contiguous()
    p = scores.shape[-1]
    lead = scores.shape[:-2]
    return scores.as_strided(
        (*lead, n_queries, n_keys), (*scores.stride()[:-2], p - 1, 1), scores.storage_offset() + n_queries - 1
    )


class ChunkLayout(NamedTuple):
    """One streaming chunk's view of the paged pool, the same for every layer.

    Attributes:
        rows, found: (B, history) flat pool rows of each row's cached history, and which exist.
        new_rows, new_valid: (B, T) flat pool rows the chunk's own K/V go to.
        allowed: (B, 1, T, history + T) the keys each query may see.
        positions: (history + 2T - 1, D) the relative-position sinusoids of the keys' distances.
    """

    rows: torch.Tensor
    found: torch.Tensor
    new_rows: torch.Tensor
    new_valid: torch.Tensor
    allowed: torch.Tensor
    positions: torch.Tensor


class ChunkedLimitedAttention(RelPositionMultiHeadAttentionXL):
    """Transformer-XL rel-pos attention under the ``chunked_limited`` mask, in query blocks.

    Its own module because the shared layer scores every query against every key; the
    projections, biases and score formula are the shared layer's.

    Shapes:
        x: (B, T, D), lengths: (B,) -> (B, T, D)
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool, chunk: int, left_chunks: int) -> None:
        super().__init__(d_model, n_heads, bias=bias)
        self.chunk = chunk
        self.left_chunks = left_chunks

    def geometry(self, t: int) -> tuple[int, int, int]:
        """(queries per block, history keys per block, blocks) for T frames."""
        c = self.chunk
        q = math.ceil(OFFLINE_BLOCK_FRAMES / c) * c
        history = self.left_chunks * c
        if t <= 2 * (history + q):
            return t, 0, 1  # one dense block
        return q, history, math.ceil(t / q)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        b, t, _ = x.shape
        nq, hist, nb = self.geometry(t)
        w = hist + nq  # keys per block
        t_pad = nb * nq
        h, dh = self.n_head, self.d_k

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, h, dh).transpose(1, 2)  # (B, H, T, Dh)

        q, k, v = heads(self.linear_q(x)), heads(self.linear_k(x)), heads(self.linear_v(x))
        q = F.pad(q, (0, 0, 0, t_pad - t)).reshape(b, h, nb, nq, dh)  # (B, H, nb, Q, Dh)
        if nb == 1:
            k, v = k[:, :, None], v[:, :, None]  # (B, H, 1, T, Dh)
        else:
            # Each block's keys: its history then its own frames, as overlapping windows.
            k = F.pad(k, (0, 0, hist, t_pad - t)).unfold(2, w, nq).transpose(-1, -2)  # (B, H, nb, W, Dh)
            v = F.pad(v, (0, 0, hist, t_pad - t)).unfold(2, w, nq).transpose(-1, -2)

        # Distances hist + Q - 1 ... -(Q - 1), the first rows of the symmetric table.
        pos = xl_relative_positions(w, self.d_model, device=x.device, dtype=x.dtype)[: w + nq - 1]
        p = self.linear_pos(pos).view(-1, h, dh).permute(1, 2, 0)  # (H, Dh, W + Q - 1)
        scale = dh**-0.5
        bd = _shift(torch.matmul(q + self.bias_v[:, None, None, :], p[:, None]), nq, w) * scale  # (B, H, nb, Q, W)

        # chunked_limited: key chunk within [query chunk - left_chunks, query chunk]; keys inside the row;
        # a query past the row's end keeps its own frame so its softmax is defined.
        qi, kj = block_indices(nb, nq, w, hist, device=x.device)  # (nb, Q), (nb, W) absolute frames
        diff = torch.div(qi[:, :, None], self.chunk, rounding_mode="floor") - torch.div(
            kj[:, None, :].clamp(min=0), self.chunk, rounding_mode="floor"
        )
        in_window = (diff >= 0) & (diff <= self.left_chunks) & (kj[:, None, :] >= 0)  # (nb, Q, W)
        inside = kj[None, :, None, :] < lengths[:, None, None, None]  # (B, nb, 1, W)
        own = qi[:, :, None] == kj[:, None, :]
        allowed = in_window[None] & (inside | own[None])  # (B, nb, Q, W)
        return self.linear_out(blocked_attention(q, k, v, self.bias_u, bd, allowed, scale, t))

    def chunk_layout(
        self, cache: PagedCacheView, t: int, history: int, dtype: torch.dtype, real: torch.Tensor | None = None
    ) -> ChunkLayout:
        """Where a chunk of ``t`` frames per row reads and writes the pool, and its mask: the
        queries see the row's last ``history`` cached keys and the chunk's own under the
        ``chunked_limited`` mask on absolute frame positions (history before the stream's start,
        or dropped from the pool, is masked). With ``real`` (B,), the chunk's keys past each row's
        ``real`` frames (a final chunk's padding) are masked too, each query keeping its own.
        Shared by every layer of the chunk."""
        start = cache.cache_lens.long()  # (B,) absolute position of the chunk's first frame
        device = start.device
        rows, found = paged_rows(
            cache.block_tables, start - history, torch.full_like(start, history), history, cache.block_size
        )
        new_rows, new_valid = paged_rows(cache.block_tables, start, torch.full_like(start, t), t, cache.block_size)
        w = history + t
        qi = start[:, None] + torch.arange(t, device=device)  # (B, T) absolute query
        kj = start[:, None] - history + torch.arange(w, device=device)  # (B, W) absolute key
        diff = torch.div(qi[:, :, None], self.chunk, rounding_mode="floor") - torch.div(
            kj[:, None, :].clamp(min=0), self.chunk, rounding_mode="floor"
        )
        own_keys = torch.ones_like(new_valid)
        if real is not None:
            own_keys = torch.arange(t, device=device)[None, :] < real.to(device)[:, None]
        present = torch.cat([found, own_keys], dim=1)  # (B, W)
        allowed = (diff >= 0) & (diff <= self.left_chunks) & present[:, None, :]  # (B, T, W)
        allowed |= kj[:, None, :] == qi[:, :, None]
        positions = xl_relative_positions(w, self.d_model, device=device, dtype=dtype)[: w + t - 1]
        return ChunkLayout(rows, found, new_rows, new_valid, allowed[:, None], positions)

    def forward_chunk(
        self, x: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, layout: ChunkLayout
    ) -> torch.Tensor:
        """One streaming chunk per row over this layer's paged K/V pool (``chunk_layout``): the
        history read, the chunk's K/V written after it.

        Shapes:
            x: (B, T, D), k_pool / v_pool: (n_blocks, block_size, H, Dh) -> (B, T, D)
        """
        b, t, _ = x.shape
        h, dh = self.n_head, self.d_k
        q = self.linear_q(x).view(b, t, h, dh).transpose(1, 2)  # (B, H, T, Dh)
        k_new, v_new = self.linear_k(x).view(b, t, h, dh), self.linear_v(x).view(b, t, h, dh)
        k = torch.cat([read_paged(k_pool, layout.rows, layout.found), k_new], dim=1).transpose(1, 2)  # (B, H, W, Dh)
        v = torch.cat([read_paged(v_pool, layout.rows, layout.found), v_new], dim=1).transpose(1, 2)
        write_paged(k_pool, layout.new_rows, layout.new_valid, k_new)
        write_paged(v_pool, layout.new_rows, layout.new_valid, v_new)

        w = k.shape[2]
        p = self.linear_pos(layout.positions).view(-1, h, dh).permute(1, 2, 0)  # (H, Dh, W + T - 1)
        scale = dh**-0.5
        bd = _shift(torch.matmul(q + self.bias_v[:, None, :], p), t, w) * scale  # (B, H, T, W)
        mask = bd.masked_fill(~layout.allowed, float("-inf"))
        out = attention(q + self.bias_u[:, None, :], k, v, mask=mask, scale=scale)  # (B, H, T, Dh)
        return self.linear_out(out.transpose(1, 2).reshape(b, t, self.d_model))


class NemotronBlock(FastConformerBlock):
    """Nemotron's FastConformer block: chunked-limited attention, a causal convolution module
    with a LayerNorm.

    Shapes:
        x: (B, T, D), lengths: (B,), valid: (B, T) bool -> (B, T, D)
    """

    def __init__(self, cfg: NemotronEncoderConfig) -> None:
        d, k = cfg.hidden_size, cfg.conv_kernel_size
        attn = ChunkedLimitedAttention(
            d, cfg.num_attention_heads, cfg.attention_bias, cfg.attention_chunk, cfg.left_chunks
        )
        conv = ConformerConvolution(
            d, k, bias=cfg.convolution_bias, norm="layer_norm", activation=cfg.hidden_act, padding=(k - 1, 0)
        )
        super().__init__(cfg, attn, conv)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        return self.macaron(x, lambda y: self.self_attn(y, lengths), lambda y: self.conv(y, valid))

    def forward_chunk(
        self,
        x: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        conv_tail: torch.Tensor,
        layout: ChunkLayout,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One streaming chunk: attention over this layer's paged pool (``layout`` from
        ``ChunkedLimitedAttention.chunk_layout``), the causal convolution after the row's carried
        ``kernel - 1`` GLU frames. Every frame of the chunk is a frame of the stream (a short
        final chunk's padding included, as transformers' padded last chunk).

        Shapes:
            x: (B, T, D), k_pool / v_pool: (n_blocks, block_size, H, Dh), conv_tail: (B, D, kernel - 1)
            -> (B, T, D), the new conv tail
        """
        tails: list[torch.Tensor] = []

        def convolve(y: torch.Tensor) -> torch.Tensor:  # the causal convolution after the carried tail
            conv = self.conv
            g = F.glu(conv.pointwise_conv1(y.transpose(1, 2)), dim=1)  # (B, D, T)
            joined = torch.cat([conv_tail.to(g.dtype), g], dim=2)  # (B, D, kernel - 1 + T)
            tails.append(joined[:, :, joined.shape[2] - conv_tail.shape[2] :])
            g = conv.norm(conv.depthwise_conv(joined).transpose(1, 2)).transpose(1, 2)
            return conv.pointwise_conv2(apply_activation(g, conv.activation)).transpose(1, 2)

        out = self.macaron(x, lambda y: self.self_attn.forward_chunk(y, k_pool, v_pool, layout), convolve)
        return out, tails[0]


class NemotronEncoder(FastConformerEncoder):
    """Cache-aware FastConformer encoder, offline and streaming over the paged K/V pool.

    Streaming (NeMo's cache-aware streaming as transformers' ``generate`` over a generator of
    mel chunks runs it) keeps four kinds of per-stream state, each on a declared axis: the
    trained attention window of K/V in the paged pool (``fixed_attention_window``), each
    layer's ``kernel - 1`` GLU frames before its causal convolution (the pool's ``conv``
    tails), and the ``kernel - stride`` input frames each subsampling stage carries
    (``streaming_state_specs``). A chunk is a whole number of trained attention chunks
    (``lookahead + 1`` frames) and reads ``subsampling_factor`` feature frames per output
    frame; the stream's chunk grid starts ``subsampling_factor - 1`` frames before the audio
    (``streaming_head_frames``), so each window ends on the newest frame its last output
    reads: transformers' first chunk of ``1 + factor * lookahead`` frames, then
    ``factor * (lookahead + 1)`` a chunk. Offline, its blocks take the lengths and the valid
    frames (their attention windows carry their own positions).
    """

    subsampling_class = NemotronSubsampling
    block_class = NemotronBlock
    # The final chunk as NeMo's CacheAwareStreamingAudioBuffer hands it over (transformers instead
    # encodes it padded and attends to the padding): its real frames only, and none at all when
    # fewer than one subsampling step of them follow an earlier (attention) chunk.
    nemo_final_chunk = False

    def block_inputs(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[Any, ...]:
        return lengths, _valid(lengths, x.shape[1])

    # -- streaming contract ------------------------------------------------------------

    @property
    def streaming_kind(self) -> str:
        return "paged"

    @property
    def num_attention_layers(self) -> int:
        return self.config.num_hidden_layers

    @property
    def n_kv_head(self) -> int:
        return self.config.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.config.hidden_size // self.config.num_attention_heads

    @property
    def fixed_attention_window(self) -> int:
        """The trained left context: ``left_chunks`` whole attention chunks."""
        return self.config.left_chunks * self.config.attention_chunk

    @property
    def conv_cache_shape(self) -> tuple[int, int]:
        return (self.config.hidden_size, self.config.conv_kernel_size - 1)

    @property
    def streaming_head_frames(self) -> int:  # type: ignore[override]
        return self.subsampling_rate - 1

    @property
    def streaming_state_specs(self) -> tuple[StreamStateSpec, ...]:
        """The input frames each subsampling stage carries, (channels, kernel - stride, bins):
        ``subsampling.0`` of the features (one channel), then one per depthwise stage."""
        sub = self.subsampling
        return tuple(
            StreamStateSpec(f"subsampling.{i}", (channels, sub.tail_frames, freq))
            for i, (channels, freq) in enumerate(sub.stage_widths(self.config.num_mel_bins))
        )

    def streaming_chunk_size(self, chunk_ms: float | None, frame_shift_s: float) -> int:
        """Output frames per chunk: None -> one trained attention chunk (``lookahead + 1``
        frames); else ``chunk_ms`` in output frames (``streaming_geometry`` refuses what is not
        a whole number of attention chunks)."""
        if chunk_ms is None:
            return self.config.attention_chunk
        return chunk_units(chunk_ms, self.subsampling_rate * frame_shift_s * 1000.0, type(self).__name__)

    def streaming_geometry(self, chunk_size: int) -> StreamingGeometry:
        """``chunk_size`` output frames read ``chunk_size * subsampling_factor`` new feature frames.

        The window is a whole number of output frames, so every subsampling stage's input is a
        whole number of its strides (the config holds the factor to a power of the stride).

        Raises:
            ValueError: a chunk that is not a whole number of trained attention chunks (the mask
                groups absolute positions: a partial one would need keys from the future).
        """
        c = self.config.attention_chunk
        if chunk_size <= 0 or chunk_size % c:
            lookahead = self.config.default_num_lookahead_tokens
            raise ValueError(
                f"a Nemotron streaming chunk is a whole number of its trained attention chunks "
                f"({c} output frames: {lookahead} of lookahead + 1); got {chunk_size} frames"
            )
        window = chunk_size * self.subsampling_rate
        return StreamingGeometry(window_frames=window, stride_frames=window)

    def forward_chunk_paged(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, cache: PagedCacheView
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One chunk of each row's stream (rows at different positions in one batch).

        ``cache.cache_lens`` is the output frames each row's stream has produced: its chunk's
        window starts at feature frame ``cache_lens * factor - head`` (negative in a first
        chunk: those head frames are padding). Feature frames past ``feat_lens`` (a short
        final window) are zeroed and encoded with the chunk, as transformers encodes a padded
        last chunk; the frames returned are those the offline encoder gives the stream's real
        frames (``output_lengths``), less what earlier chunks gave.

        Shapes:
            feats: (B, window_frames, F), feat_lens: (B,) -> hidden (B, chunk, D), hidden_lens (B,)
        """
        window = feats.shape[1]
        sub = self.subsampling_rate
        if window % (self.config.attention_chunk * sub):
            raise ValueError(
                f"a {window}-frame window is not a whole number of chunks ({self.config.attention_chunk * sub} frames)"
            )
        t_out = window // sub
        done = cache.cache_lens.to(device=feats.device, dtype=torch.long)  # (B,) output frames so far
        lens = feat_lens.to(device=feats.device, dtype=torch.long)
        first = done * sub - self.streaming_head_frames  # (B,) absolute feature frame of the window's start
        feats = feats * _valid(lens, window)[..., None].to(feats.dtype)
        slots = cache.slots.to(feats.device)
        specs = self.streaming_state_specs
        tails = [cache.states[s.name].index_select(0, slots).to(feats.dtype) for s in specs]
        real = first + lens  # (B,) the stream's real feature frames up to this window's end
        x, tails = self.subsampling.forward_chunk(feats, first, tails, real if self.nemo_final_chunk else None)
        for s, t in zip(specs, tails, strict=True):
            cache.states[s.name].index_copy_(0, slots, t.to(cache.states[s.name].dtype))
        if self.input_scale != 1.0:
            x = x * self.input_scale
        produced = torch.where(real > 0, self.output_lengths(real.clamp(min=1)), torch.zeros_like(real))
        out_lens = (produced - done).clamp(min=0, max=t_out)
        if self.nemo_final_chunk:
            # NeMo steps one attention chunk at a time and stops at a last one of fewer than `sub`
            # frames (unless it is the stream's first): the window's outputs end with its whole chunks.
            c = self.config.attention_chunk
            whole = torch.div(lens, c * sub, rounding_mode="floor")
            rem = lens - whole * c * sub
            short = (rem > 0) & (rem < sub) & ((done > 0) | (whole > 0))
            out_lens = torch.where(short, torch.minimum(out_lens, whole * c), out_lens)
        history = int(cache.history_frames if cache.history_frames is not None else self.fixed_attention_window)
        layout = self.layers[0].self_attn.chunk_layout(
            cache, t_out, history, x.dtype, out_lens if self.nemo_final_chunk else None
        )
        for i, layer in enumerate(self.layers):
            x, tail = layer.forward_chunk(x, cache.k[i], cache.v[i], cache.conv[i].index_select(0, slots), layout)
            cache.conv[i].index_copy_(0, slots, tail.to(cache.conv.dtype))
        return x, out_lens


class PromptProjector(nn.Module):
    """``linear_2(relu(linear_1 [h; onehot(p)]))`` with the one-hot's columns of ``linear_1``
    folded with its bias into ``prompt_table`` (an (num_prompts, I) embedding): each row adds its prompt's row.

    Shapes:
        h: (B, T, D), prompt_ids: (B,) -> (B, T, D)
    """

    def __init__(self, d_model: int, intermediate: int, num_prompts: int) -> None:
        super().__init__()
        self.linear_1 = Linear(d_model, intermediate, bias=False)
        self.prompt_table = Embedding(num_prompts, intermediate)
        self.linear_2 = Linear(intermediate, d_model)

    def forward(self, h: torch.Tensor, prompt_ids: torch.Tensor) -> torch.Tensor:
        z = self.linear_1(h) + self.prompt_table(prompt_ids)[:, None, :]  # (B, T, I)
        return self.linear_2(torch.relu(z))


def table_languages(table: Mapping[str, int]) -> tuple[str, ...]:
    """The languages a prompt table names, as it spells them: its codes (``en``) and locales
    (``en-US``), in its order; ``auto`` (the detection slot, what no language selects) and the
    release's dash-less aliases (``enGB``) are not languages."""
    return tuple(k for k in table if k != "auto" and parse_language(k) is not None)


def resolve_prompt_id(table: Mapping[str, int], language: str | None, default: int) -> int:
    """The prompt id of ``language`` in a checkpoint's prompt table.

    ``language`` is read by ``oasr.languages.resolve_language`` against the table's languages
    (``table_languages``): an entry as written (``en-US``, ``enGB``), a code, name or locale
    in any form (``English``, ``de_DE``); a locale the table lacks falls back to its base
    language, and a bare code the table lacks to its ``xx-XX`` spelling (``zh`` -> ``zh-ZH``)
    or its only locale (``vi`` -> ``vi-VN``). None / "" / "auto" / "none" -> ``default`` (the
    checkpoint's ``default_prompt_id``: NeMo's ``auto`` slot, where the model detects).

    Raises:
        LanguageError: a language the table lacks, or a code of several locales (naming them).
    """
    if isinstance(language, str) and language in table:  # the table's own spelling, aliases too
        return int(table[language])
    key = resolve_language(language, table_languages(table), model="this checkpoint")
    return default if key is None else int(table[key])


class NemotronRnntModel(ParakeetTransducerModel):
    """Parakeet's RNN-T (``ParakeetTransducerModel``) over a cache-aware FastConformer, with a
    language prompt projector on the encoder states; blank past the tokenizer's pieces."""

    architecture = "nemotron"
    config_class = NemotronConfig
    encoder_class = NemotronEncoder
    # oasr's own timing, as its streams time tokens: NeMo's offsets are held to NeMo only on the
    # Parakeet fixtures, and this family's language tags are dropped before timing.
    token_timing = "spikes"

    def __init__(self, config: NemotronConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        config = self.config
        self.prompt_projector = (
            PromptProjector(self.encoder.output_size, config.prompt_intermediate_size, config.num_prompts)
            if config.num_prompts
            else None
        )

    @property
    def encoder_options(self) -> frozenset[str]:
        """``language`` where the checkpoint has a prompt projector (none on the English release)."""
        return frozenset({"language"}) if self.prompt_projector is not None else frozenset()

    @property
    def languages(self) -> tuple[str, ...] | None:
        """The prompt table's codes and locales (``table_languages``); None without a prompt
        projector (the English streaming release, whose checkpoint declares ``en``)."""
        return table_languages(self.config.prompt_dictionary) if self.prompt_projector is not None else None

    def resolve_prompt_id(self, language: str | None) -> int:
        """``language`` (a code, a name, a locale, or None) -> prompt id (see ``resolve_prompt_id``).

        Raises:
            ValueError: a language the table lacks or that names several of its locales, or any
                language on a checkpoint without prompts.
        """
        if self.prompt_projector is None:
            resolve_language(language, (), model="this checkpoint (it has no language prompt)")
            return 0
        return resolve_prompt_id(self.config.prompt_dictionary, language, self.config.default_prompt_id)

    def prompt_ids(self, languages: list[str | None] | None, batch_size: int, device=None) -> torch.Tensor:
        """Per-row prompt ids for per-row languages (None: every row the default prompt)."""
        if languages is None:
            languages = [None] * batch_size
        if len(languages) != batch_size:
            raise ValueError(f"{len(languages)} languages for {batch_size} rows")
        return torch.tensor([self.resolve_prompt_id(x) for x in languages], dtype=torch.long, device=device)

    def encode_offline(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, prompt_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder and prompt projector (each row conditioned on its own prompt).

        Shapes:
            feats: (B, T, F), feat_lens: (B,), prompt_ids: (B,) or None (the default prompt)
            -> hidden (B, T', D), hidden_lens (B,)
        """
        hidden, lens = self.encoder(feats, feat_lens)
        b = hidden.shape[0]
        if self.prompt_projector is None:
            if prompt_ids is not None and bool((torch.as_tensor(prompt_ids) != 0).any()):
                raise ValueError("prompt_ids given to a checkpoint without a language prompt")
            return hidden, lens
        if prompt_ids is None:
            prompt_ids = torch.full((b,), self.config.default_prompt_id, dtype=torch.long, device=hidden.device)
        prompt_ids = torch.as_tensor(prompt_ids, dtype=torch.long, device=hidden.device).reshape(-1)
        if prompt_ids.shape[0] != b:
            raise ValueError(f"prompt_ids has {prompt_ids.shape[0]} entries for a batch of {b}")
        if bool(((prompt_ids < 0) | (prompt_ids >= self.config.num_prompts)).any()):
            raise ValueError(f"prompt_ids {prompt_ids.tolist()} outside the {self.config.num_prompts} prompts")
        return self.prompt_projector(hidden, prompt_ids), lens

    # -- streaming -----------------------------------------------------------------------

    PROMPT_STATE = "prompt_id"

    @property
    def cache_spec(self) -> CacheSpec:
        """The encoder's streaming cache, plus (with a prompt projector) the stream's prompt id:
        a persistent state, set at admission and kept across an endpoint reset."""
        spec = super().cache_spec
        if self.prompt_projector is None:
            return spec
        prompt = StreamStateSpec(
            self.PROMPT_STATE, (), dtype=torch.long, init_value=float(self.config.default_prompt_id), persistent=True
        )
        return dataclasses.replace(spec, stream_states=(*spec.stream_states, prompt))

    def streaming_conditioning(self, options: Any) -> dict[str, float]:
        """A stream's persistent states from its options: the prompt id of ``options.language``
        (none on a checkpoint without prompts).

        Raises:
            ValueError: a language the prompt table lacks, or that names several of its locales.
        """
        if self.prompt_projector is None:  # the engine checked the language against the checkpoint's
            return {}
        language = getattr(options, "language", None)
        return {self.PROMPT_STATE: float(self.resolve_prompt_id(language if isinstance(language, str) else None))}

    def encode_chunk_paged(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, cache: PagedCacheView
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A streaming chunk through the encoder and the prompt projector, each row conditioned
        on its stream's prompt id (``cache.states["prompt_id"]``).

        Shapes:
            feats: (B, window_frames, F), feat_lens: (B,) -> hidden (B, chunk, D), hidden_lens (B,)
        """
        hidden, lens = self.encoder.forward_chunk_paged(feats, feat_lens, cache)
        if self.prompt_projector is None:
            return hidden, lens
        prompts = cache.states[self.PROMPT_STATE].index_select(0, cache.slots.to(hidden.device)).long()
        return self.prompt_projector(hidden, prompts), lens


__all__ = [
    "ChunkedLimitedAttention",
    "NemotronBlock",
    "NemotronEncoder",
    "NemotronRnntModel",
    "NemotronSubsampling",
    "OFFLINE_BLOCK_FRAMES",
    "PromptProjector",
    "resolve_prompt_id",
    "table_languages",
]
