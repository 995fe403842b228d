"""Granite Speech 5 (transformers' ``GraniteSpeech5ForCTC``): a conformer-CTC encoder.

    feats (B, T, 4 n_mels)  -> input_linear -> D
    block i: FF (x0.5) -> block-wise Shaw attention -> conv module -> FF (x0.5) -> LayerNorm
             the blocks in ``subsample_layers`` convolve with stride 2 and add the frame
             pairs' mean as the residual: time halves there (T -> T // 2)
    after block L // 2 - 1: x += out_mid(softmax(out(x)))   (self-conditioned CTC; ``out`` is
             the CTC head's own weights in the release, tied)
    ctc_head -> (B, T / 4, V) log-probs, decoded by the ``ctc`` strategy

Attention stays inside blocks of ``context_size`` frames aligned at each row's start, so a
padded batch gives each row what it gets alone: padded frames are zeroed before every
convolution and never attended to. Packed rows (sequence packing) run every position-wise
layer on the frames alone; attention lays them out as rows, and a subsampling block keeps
each row's even frames (``_Halving``), so the packing halves with the rows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers import BatchNorm1d, Conv1d, Embedding, FeedForward, LayerNorm, Linear
from oasr.layers.packing import Packing, as_packed, as_rows
from oasr.layers.relpos_shaw import shaw_block_attention, shaw_distances
from oasr.models.base import BaseEncoder
from oasr.models.ctc import EncoderCtcModel
from oasr.models.granite_speech5.config import GraniteSpeech5Config


class GraniteSpeech5Attention(nn.Module):
    """Block-wise self-attention with Shaw relative positions (``oasr.layers.relpos_shaw``).

    Shapes:
        x: (B, T, D), valid: (B, T) bool or None -> (B, T, D); with ``packing``, x is (N, D)
        packed rows and ``valid`` the rows' (B, T_max) frames -> (N, D)
    """

    def __init__(self, cfg: GraniteSpeech5Config) -> None:
        super().__init__()
        self.n_head, self.head_dim, self.block = cfg.num_attention_heads, cfg.head_dim, cfg.context_size
        inner = self.n_head * self.head_dim
        self.q_proj = Linear(cfg.hidden_size, inner, bias=False)
        self.k_proj = Linear(cfg.hidden_size, inner, bias=False)
        self.v_proj = Linear(cfg.hidden_size, inner, bias=False)
        self.o_proj = Linear(inner, cfg.hidden_size, bias=True)
        self.rel_pos_emb = Embedding(2 * cfg.max_position_embeddings + 1, self.head_dim)
        self.register_buffer("distances", shaw_distances(cfg.context_size, cfg.max_position_embeddings), False)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def forward(self, x: torch.Tensor, valid: torch.Tensor | None, packing: Packing | None = None) -> torch.Tensor:
        q, k, v = (self._heads(as_rows(proj(x), packing)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        b, _, t, _ = q.shape
        rel = self.rel_pos_emb.weight[self.distances]  # (c, c, Dh)
        out = shaw_block_attention(q, k, v, rel, self.block, valid)  # (B, H, T, Dh)
        out = out.transpose(1, 2).reshape(b, t, self.n_head * self.head_dim)
        return self.o_proj(as_packed(out, packing))


class _Halving:
    """Where the frames of a stride-2 block go in packed rows: each row keeps its even
    frames ``2j`` for ``j < len // 2`` (the stride-2 convolution's outputs and the first
    frame of each pair the residual averages); ``packing`` is the halved rows'.

    Shapes:
        keep: (N // 2-ish,) indices into the N packed frames, in the halved packing's order
    """

    def __init__(self, packing: Packing) -> None:
        pos, half = packing.position, (packing.lengths // 2)[packing.row]
        self.keep = torch.nonzero((pos % 2 == 0) & (pos // 2 < half)).squeeze(1)
        self.packing = Packing(packing.lengths // 2)


class GraniteSpeech5Convolution(nn.Module):
    """pointwise (D -> 2E) -> GLU -> depthwise (stride 1 or 2, no bias) -> batch norm -> SiLU
    -> pointwise (E -> D), with E = ``conv_expansion_factor * D``. Padded frames are zeroed
    after the GLU. (Not ``oasr.layers.ConformerConvolution``: the expanded width, the stride
    and the bias-free depthwise kernel differ.)

    Shapes:
        x: (B, T, D), valid: (B, T) bool or None -> (B, ceil(T / stride), D); packed: x (N, D)
        with ``packing`` (and ``halving`` at stride 2) -> (N, D), or the halved rows' frames
    """

    def __init__(self, cfg: GraniteSpeech5Config, stride: int) -> None:
        super().__init__()
        inner = cfg.hidden_size * cfg.conv_expansion_factor
        k = cfg.conv_kernel_size
        self.pointwise_lin1 = Linear(cfg.hidden_size, 2 * inner)
        self.depthwise_conv = Conv1d(inner, inner, k, stride=stride, padding=(k - 1) // 2, groups=inner, bias=False)
        self.norm = BatchNorm1d(inner, eps=cfg.batch_norm_eps)
        self.pointwise_lin2 = Linear(inner, cfg.hidden_size)

    def forward(
        self,
        x: torch.Tensor,
        valid: torch.Tensor | None,
        packing: Packing | None = None,
        halving: _Halving | None = None,
    ) -> torch.Tensor:
        y = F.glu(self.pointwise_lin1(x), dim=-1)  # (B, T, E) or (N, E)
        if packing is not None:
            return self._packed(y, packing, halving)
        if valid is not None:
            y = y.masked_fill(~valid[..., None], 0.0)
        y = F.silu(self.norm(self.depthwise_conv(y.transpose(1, 2))))  # (B, E, T')
        return self.pointwise_lin2(y.transpose(1, 2))

    def _packed(self, y: torch.Tensor, packing: Packing, halving: _Halving | None) -> torch.Tensor:
        """The depthwise kernel at stride 1 over the rows spread apart by zeros; at stride 2
        only each row's even frames are kept (stride 2's outputs)."""
        conv = self.depthwise_conv
        pad = conv.padding
        buf, index = packing.gapped(y.T[None], (pad, pad))  # (1, E, N + B * 2 pad)
        z = F.conv1d(buf, conv.weight, None, groups=conv.groups)[0].index_select(-1, index)  # (E, N)
        if halving is not None:
            z = z.index_select(-1, halving.keep)
        return self.pointwise_lin2(F.silu(self.norm(z[None]))[0].T)


class GraniteSpeech5Block(nn.Module):
    """FF (x0.5) -> attention -> conv -> FF (x0.5) -> LayerNorm; with ``stride`` 2 the
    conv subsamples and the residual around it is the mean of each frame pair (an odd
    last frame is dropped).

    Shapes:
        x: (B, T, D), valid: (B, T) bool or None -> (B, T // stride, D); with ``packing``,
        x is (N, D) packed rows and ``valid`` their (B, T_max) frames -> the rows' frames
        (halved at stride 2, with ``halving``)
    """

    def __init__(self, cfg: GraniteSpeech5Config, stride: int = 1) -> None:
        super().__init__()
        d, eps = cfg.hidden_size, cfg.layer_norm_eps
        names = ("linear1", "linear2")
        self.stride = stride
        self.feed_forward1 = FeedForward(d, cfg.intermediate_size, cfg.hidden_act, cfg.attention_bias, names)
        self.self_attn = GraniteSpeech5Attention(cfg)
        self.conv = GraniteSpeech5Convolution(cfg, stride)
        self.feed_forward2 = FeedForward(d, cfg.intermediate_size, cfg.hidden_act, cfg.attention_bias, names)
        self.norm_feed_forward1 = LayerNorm(d, eps)
        self.norm_self_att = LayerNorm(d, eps)
        self.norm_conv = LayerNorm(d, eps)
        self.norm_feed_forward2 = LayerNorm(d, eps)
        self.norm_out = LayerNorm(d, eps)

    def forward(
        self,
        x: torch.Tensor,
        valid: torch.Tensor | None,
        packing: Packing | None = None,
        halving: _Halving | None = None,
    ) -> torch.Tensor:
        x = x + 0.5 * self.feed_forward1(self.norm_feed_forward1(x))
        x = x + self.self_attn(self.norm_self_att(x), valid, packing)
        conv = self.conv(self.norm_conv(x), valid, packing, halving)
        if self.stride == 1:
            x = x + conv
        elif packing is not None:
            x = (x.index_select(0, halving.keep) + x.index_select(0, halving.keep + 1)) / 2 + conv
        else:
            pooled = x.unfold(1, 2, 2).mean(-1)  # (B, T // 2, D)
            x = pooled + conv[:, : pooled.shape[1]]
        x = x + 0.5 * self.feed_forward2(self.norm_feed_forward2(x))
        return self.norm_out(x)


class GraniteSpeech5Encoder(BaseEncoder):
    """Input projection, conformer blocks (some subsampling), the self-conditioning CTC.

    Shapes:
        feats: (B, T, 4 n_mels), feat_lens: (B,) -> hidden (B, T // 2^s, D), hidden_lens (B,)
    """

    def __init__(self, cfg: GraniteSpeech5Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.subsampling_rate = cfg.subsampling_rate
        self.output_size = cfg.hidden_size
        self.n_features = cfg.input_dim
        self.input_linear = Linear(self.n_features, cfg.hidden_size)
        self.layers = nn.ModuleList(
            GraniteSpeech5Block(cfg, stride=2 if i in cfg.subsample_layers else 1) for i in range(cfg.num_hidden_layers)
        )
        self.out = Linear(cfg.hidden_size, cfg.vocab_size)
        self.out_mid = Linear(cfg.vocab_size, cfg.hidden_size)

    def output_lengths(self, feat_lens: torch.Tensor) -> torch.Tensor:
        """Encoder frames of each row (each subsampling block halves, rounding down)."""
        return feat_lens.long() // self.subsampling_rate

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if feats.dim() != 3 or feats.shape[-1] != self.n_features:
            raise ValueError(f"Granite Speech 5 expects features (B, T, {self.n_features}); got {tuple(feats.shape)}")
        b, t, _ = feats.shape
        lens = torch.full((b,), t, device=feats.device) if feat_lens is None else feat_lens.to(feats.device).long()
        x = self.input_linear(feats)
        valid = None
        if bool((lens < t).any()):
            valid = torch.arange(t, device=x.device)[None, :] < lens[:, None]  # (B, T)
            x = x.masked_fill(~valid[..., None], 0.0)
        for i, layer in enumerate(self.layers):
            x = layer(x, valid)
            if layer.stride != 1:
                lens = lens // 2
                if valid is not None:  # a half-rate frame is valid iff both of its frames are
                    valid = valid[:, : 2 * (valid.shape[1] // 2)].unflatten(1, (-1, 2)).all(-1)
            if i == self.cfg.self_conditioning_layer:
                x = x + self.out_mid(self.out(x).softmax(dim=-1))
        return x, lens

    def forward_packed(self, feats: torch.Tensor, cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode packed rows: no frame spent on padding outside attention.

        Shapes:
            feats: (N, 4 n_mels), cu_seqlens: (B + 1,) -> hidden (N', D), cu_seqlens (B + 1,)
        """
        if feats.dim() != 2 or feats.shape[-1] != self.n_features:
            raise ValueError(f"Granite Speech 5 packed input must be (N, {self.n_features}); got {tuple(feats.shape)}")
        packing = Packing.from_cu_seqlens(cu_seqlens, device=feats.device)
        x = self.input_linear(feats)
        for i, layer in enumerate(self.layers):
            if packing.total == 0:  # no row has a frame left (nor will after halving)
                break
            halving = _Halving(packing) if layer.stride != 1 else None
            x = layer(x, packing.valid(), packing, halving)
            if halving is not None:
                packing = halving.packing
            if i == self.cfg.self_conditioning_layer:
                x = x + self.out_mid(self.out(x).softmax(dim=-1))
        if packing.total == 0:
            packing = Packing(torch.zeros_like(packing.lengths))
        return x, packing.cu_seqlens


class GraniteSpeech5Model(EncoderCtcModel):
    """Granite Speech 5 encoder + CTC head (``ctc_head``; offline-only, decoded by the ``ctc``
    strategy): (B, T, 4 n_mels) features -> (B, T / 4, V) float32 log-probs."""

    architecture = "granite_speech5"
    config_class = GraniteSpeech5Config
    encoder_class = GraniteSpeech5Encoder
    encoder_reads_model_config = True
