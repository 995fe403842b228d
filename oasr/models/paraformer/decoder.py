"""FunASR's ``ParaformerSANMDecoder``: one parallel pass over the CIF acoustic embeddings.

A block runs its feed-forward first (``w_2(norm(relu(w_1(norm1(x)))))``), then, where it
has them, FSMN-only self-attention (``x + FSMN(norm2(ff))``, over the token positions)
and cross-attention over the encoder output (``x + Cross(norm3(x))``, keys past each
row's encoder length masked). The last block (``decoders3``) is feed-forward only, with
no residual. Then ``after_norm`` and the output layer. Names follow FunASR's state dict.
"""

from __future__ import annotations

import torch
from torch import nn

from oasr.layers import Conv1d, LayerNorm, Linear, LinearActivation, attention
from oasr.models.paraformer.config import NORM_EPS, SanmDecoderConfig
from oasr.models.paraformer.encoder import fsmn_memory, fsmn_padding, length_mask


class SanmFeedForward(nn.Module):
    """``PositionwiseFeedForwardDecoderSANM``: a LayerNorm inside, no bias on ``w_2``."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w_1 = LinearActivation(d_model, d_ff, "relu")
        self.norm = LayerNorm(d_ff, eps=NORM_EPS)
        self.w_2 = Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.norm(self.w_1(x)))


class FsmnSelfAttention(nn.Module):
    """``MultiHeadedAttentionSANMDecoder``: the FSMN memory alone (no attention)."""

    def __init__(self, d_model: int, kernel_size: int, shift: int) -> None:
        super().__init__()
        self.fsmn_block = Conv1d(d_model, d_model, kernel_size, groups=d_model, bias=False)
        self.pad = fsmn_padding(kernel_size, shift)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return fsmn_memory(self.fsmn_block, x, mask, *self.pad)


class CrossAttention(nn.Module):
    """``MultiHeadedAttentionCrossAtt``: queries from the tokens, K / V in one GEMM from the encoder."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.d_model = d_model
        self.linear_q = Linear(d_model, d_model)
        self.linear_k_v = Linear(d_model, 2 * d_model)
        self.linear_out = Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, memory_lens: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        h, dk = self.heads, self.d_model // self.heads
        q = self.linear_q(x).reshape(b, n, h, dk).transpose(1, 2)
        k, v = self.linear_k_v(memory).split(self.d_model, dim=-1)
        k = k.reshape(b, -1, h, dk).transpose(1, 2)
        v = v.reshape(b, -1, h, dk).transpose(1, 2)
        ctx = attention(q, k, v, key_lengths=memory_lens)
        return self.linear_out(ctx.transpose(1, 2).reshape(b, n, self.d_model))


class SanmDecoderLayer(nn.Module):
    """``DecoderLayerSANM`` (with or without self / cross-attention)."""

    def __init__(self, d_model: int, cfg: SanmDecoderConfig, shift: int | None, cross: bool) -> None:
        super().__init__()
        self.feed_forward = SanmFeedForward(d_model, cfg.linear_units)
        self.norm1 = LayerNorm(d_model, eps=NORM_EPS)
        self.self_attn = FsmnSelfAttention(d_model, cfg.kernel_size, shift) if shift is not None else None
        if self.self_attn is not None:
            self.norm2 = LayerNorm(d_model, eps=NORM_EPS)
        self.src_attn = CrossAttention(d_model, cfg.attention_heads) if cross else None
        if cross:
            self.norm3 = LayerNorm(d_model, eps=NORM_EPS)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, memory: torch.Tensor, memory_lens: torch.Tensor
    ) -> torch.Tensor:
        ff = self.feed_forward(self.norm1(x))
        out = ff
        if self.self_attn is not None:
            out = x + self.self_attn(self.norm2(ff), mask)
        if self.src_attn is not None:
            out = out + self.src_attn(self.norm3(out), memory, memory_lens)
        return out


class ParaformerDecoder(nn.Module):
    """The SANM non-autoregressive decoder.

    Shapes:
        embeds: (B, N, D), token_lens: (B,), memory: (B, T, D), memory_lens: (B,) -> logits (B, N, V)
    """

    def __init__(self, d_model: int, vocab_size: int, cfg: SanmDecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.decoders = nn.ModuleList(
            [SanmDecoderLayer(d_model, cfg, cfg.sanm_shfit, cross=True) for _ in range(cfg.att_layer_num)]
        )
        extra = cfg.num_blocks - cfg.att_layer_num
        self.decoders2 = (
            nn.ModuleList([SanmDecoderLayer(d_model, cfg, 0, cross=False) for _ in range(extra)]) if extra else None
        )
        self.decoders3 = nn.ModuleList([SanmDecoderLayer(d_model, cfg, None, cross=False)])
        self.after_norm = LayerNorm(d_model, eps=NORM_EPS)
        self.output_layer = Linear(d_model, vocab_size)

    def forward(
        self, embeds: torch.Tensor, token_lens: torch.Tensor, memory: torch.Tensor, memory_lens: torch.Tensor
    ) -> torch.Tensor:
        mask = length_mask(token_lens, embeds.shape[1]).to(embeds.dtype)
        x = embeds
        for layer in (*self.decoders, *(self.decoders2 or ()), *self.decoders3):
            x = layer(x, mask, memory, memory_lens)
        return self.output_layer(self.after_norm(x))
