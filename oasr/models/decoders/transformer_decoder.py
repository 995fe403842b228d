"""WeNet / ESPnet-compatible attention decoders: ``TransformerDecoder`` and
``BiTransformerDecoder`` (U2++'s left-to-right + right-to-left pair).

Module names mirror WeNet's state dict (``embed.0.weight``,
``decoders.N.self_attn.linear_q.*``, ``decoders.N.src_attn.*``,
``decoders.N.feed_forward.w_1.*``, ``norm1..3``, ``after_norm``, ``output_layer``), so
U2++ ``decoder.*`` tensors load 1:1. The output layer is allocated at a GEMM-aligned
width; converters widen the checkpoint's with ``pad_output_projection`` and the
logits are cut back to the real vocabulary.

WeNet uses the decoder for attention rescoring: each CTC n-best hypothesis is
teacher-forced as ``<sos> y1 .. yn`` and scored ``sum log p(y_j | y_<j) + log p(<eos>)``;
the right-to-left decoder reads ``<sos> yn .. y1`` (``score_hypotheses``). Cross-attention
takes ``memory_lens`` rather than a materialised memory mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from oasr.layers import Embedding, FeedForward, LayerNorm, Linear, attention
from oasr.layers.attention import LinearQKVO
from oasr.layers.ctc import align_out_features
from oasr.layers.relpos import PositionalEncoding
from oasr.models.configs import ModelConfig, config_int

# ---------------------------------------------------------------------------
# Config


@dataclass
class TransformerDecoderConfig(ModelConfig):
    """A WeNet attention decoder (``decoder: transformer | bitransformer``).

    Attributes:
        vocab_size: output units (the CTC vocabulary, ``<sos/eos>`` included).
        d_model: attention width (the encoder's output size).
        attention_heads / linear_units / num_blocks: per left-to-right decoder.
        bidirectional: a U2++ ``bitransformer`` (adds a right-to-left decoder).
        r_num_blocks: blocks of the right-to-left decoder.
        normalize_before: pre-norm blocks (WeNet's default) or post-norm.
        activation: feed-forward activation (an ``oasr.layers.ACTIVATIONS`` name).
        query_bias / key_bias / value_bias: self-attention projection biases.
        src_query_bias / src_key_bias / src_value_bias: cross-attention projection biases.
        mlp_bias: feed-forward biases.
        norm_eps: LayerNorm epsilon.
        sos / eos: start and end ids (WeNet: vocab_size - 1 for both unless the
            tokenizer declares them).
        reverse_weight: the trained weight of the right-to-left score in rescoring.
    """

    vocab_size: int
    d_model: int
    attention_heads: int = 4
    linear_units: int = 2048
    num_blocks: int = 6
    bidirectional: bool = False
    r_num_blocks: int = 0
    normalize_before: bool = True
    activation: str = "relu"
    query_bias: bool = True
    key_bias: bool = True
    value_bias: bool = True
    src_query_bias: bool = True
    src_key_bias: bool = True
    src_value_bias: bool = True
    mlp_bias: bool = True
    norm_eps: float = 1e-5
    sos: int | None = None
    eos: int | None = None
    reverse_weight: float = 0.0

    def __post_init__(self) -> None:
        if self.d_model % self.attention_heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of attention_heads {self.attention_heads}")
        if self.sos is None:
            self.sos = self.vocab_size - 1
        if self.eos is None:
            self.eos = self.vocab_size - 1
        for name in ("sos", "eos"):
            if not 0 <= getattr(self, name) < self.vocab_size:
                raise ValueError(f"{name}={getattr(self, name)} is outside the vocabulary of {self.vocab_size}")


# ---------------------------------------------------------------------------
# Helpers (WeNet's label conventions)


def add_sos_eos(hyps: Sequence[Sequence[int]], sos: int, eos: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder inputs ``<sos> y1 .. yn`` and targets ``y1 .. yn <eos>``, right-padded with ``eos``
    (WeNet pads the inputs with ``eos``; padded positions are never read).

    Shapes:
        -> ys_in (N, L + 1) int64, ys_in_lens (N,) = len + 1
    """
    n = len(hyps)
    width = max((len(h) for h in hyps), default=0) + 1
    ys_in = torch.full((n, width), eos, dtype=torch.long)
    ys_in[:, 0] = sos
    for i, h in enumerate(hyps):
        if len(h):
            ys_in[i, 1 : 1 + len(h)] = torch.as_tensor(list(h), dtype=torch.long)
    lens = torch.tensor([len(h) + 1 for h in hyps], dtype=torch.long)
    return ys_in, lens


def reverse_pad_list(hyps: Sequence[Sequence[int]]) -> list[list[int]]:
    """Each hypothesis reversed (the right-to-left decoder's targets)."""
    return [list(reversed(list(h))) for h in hyps]


# ---------------------------------------------------------------------------
# Modules


class MultiHeadedAttention(LinearQKVO):
    """WeNet's multi-head attention projections over the shared attention core
    (``linear_out`` carries a bias exactly when ``linear_q`` does, as in WeNet).

    Shapes:
        query: (B, Tq, D), memory: (B, Tk, D) -> (B, Tq, D)
    """

    def forward(
        self,
        query: torch.Tensor,
        memory: torch.Tensor,
        *,
        key_lengths: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        b, t, d = query.shape
        q = self.heads(self.linear_q(query))
        k, v = self.heads(self.linear_k(memory)), self.heads(self.linear_v(memory))
        if is_causal and q.shape[2] != k.shape[2]:
            # A suffix of queries over the whole prefix: each sees keys up to its own position.
            offset = k.shape[2] - q.shape[2]
            pos_q = torch.arange(q.shape[2], device=q.device)[:, None] + offset
            mask = torch.arange(k.shape[2], device=q.device)[None, :] <= pos_q
            out = attention(q, k, v, mask=mask, key_lengths=key_lengths)
        else:
            out = attention(q, k, v, key_lengths=key_lengths, is_causal=is_causal)
        return self.linear_out(out.transpose(1, 2).reshape(b, t, d))


class DecoderLayer(nn.Module):
    """Self-attention, cross-attention and feed-forward, each residual (pre- or post-norm).

    Shapes:
        x: (B, L, D), memory: (B, T, D) -> (B, L, D); with ``last_only`` the queries
        are the last ``x`` position (the keys are all of ``x``) -> (B, 1, D)
    """

    def __init__(self, cfg: TransformerDecoderConfig) -> None:
        super().__init__()
        d, h = cfg.d_model, cfg.attention_heads
        self.normalize_before = cfg.normalize_before
        self.self_attn = MultiHeadedAttention(
            h, d, query_bias=cfg.query_bias, key_bias=cfg.key_bias, value_bias=cfg.value_bias
        )
        self.src_attn = MultiHeadedAttention(
            h, d, query_bias=cfg.src_query_bias, key_bias=cfg.src_key_bias, value_bias=cfg.src_value_bias
        )
        self.feed_forward = FeedForward(d, cfg.linear_units, cfg.activation, bias=cfg.mlp_bias, names=("w_1", "w_2"))
        self.norm1 = LayerNorm(d, eps=cfg.norm_eps)
        self.norm2 = LayerNorm(d, eps=cfg.norm_eps)
        self.norm3 = LayerNorm(d, eps=cfg.norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        x_lens: torch.Tensor,
        memory: torch.Tensor,
        memory_lens: torch.Tensor,
        *,
        last_only: bool = False,
    ) -> torch.Tensor:
        pre = self.normalize_before
        h = self.norm1(x) if pre else x
        q = h[:, -1:] if last_only else h
        residual = x[:, -1:] if last_only else x
        y = residual + self.self_attn(q, h, key_lengths=x_lens, is_causal=True)
        if not pre:
            y = self.norm1(y)
        h = self.norm2(y) if pre else y
        y = y + self.src_attn(h, memory, key_lengths=memory_lens)
        if not pre:
            y = self.norm2(y)
        h = self.norm3(y) if pre else y
        y = y + self.feed_forward(h)
        return y if pre else self.norm3(y)


class TransformerDecoder(nn.Module):
    """One direction of WeNet's attention decoder: token embedding + absolute sinusoids
    (``embed.0`` / ``embed.1``), ``decoders.N`` blocks, ``after_norm``, ``output_layer``.

    Shapes:
        memory: (B, T, D), memory_lens: (B,), tokens: (B, L), token_lens: (B,) -> logits (B, L, V)
    """

    def __init__(self, cfg: TransformerDecoderConfig, num_blocks: int | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.vocab_size = cfg.vocab_size
        self.normalize_before = cfg.normalize_before
        self.embed = nn.ModuleList([Embedding(cfg.vocab_size, d), PositionalEncoding(d)])
        n = cfg.num_blocks if num_blocks is None else num_blocks
        self.decoders = nn.ModuleList(DecoderLayer(cfg) for _ in range(n))
        self.after_norm = LayerNorm(d, eps=cfg.norm_eps)
        self.output_layer = Linear(d, align_out_features(cfg.vocab_size))

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed[1](self.embed[0](tokens))

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        if self.normalize_before:
            x = self.after_norm(x)
        return self.output_layer(x)[..., : self.vocab_size]

    def forward(
        self,
        memory: torch.Tensor,
        memory_lens: torch.Tensor,
        tokens: torch.Tensor,
        token_lens: torch.Tensor,
    ) -> torch.Tensor:
        """Teacher-forced logits of every position (causal self-attention)."""
        token_lens = token_lens.to(tokens.device)
        memory_lens = memory_lens.to(memory.device)
        x = self._embed(tokens)
        for layer in self.decoders:
            x = layer(x, token_lens, memory, memory_lens)
        return self._head(x)

    def forward_one_step(
        self,
        memory: torch.Tensor,
        memory_lens: torch.Tensor,
        tokens: torch.Tensor,
        cache: list[torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Log-probs of the token after ``tokens``, reusing each layer's outputs for the prefix.

        Args:
            tokens: (B, L) the whole prefix, ``<sos>`` first.
            cache: from the previous call (each layer's output over ``tokens[:, :-1]``),
                or None on the first step.

        Returns:
            log-probs (B, V) float32 (float64 for a float64 model), and the new cache
            (each layer's output over ``tokens``).
        """
        b, length = tokens.shape
        lens = torch.full((b,), length, dtype=torch.long, device=tokens.device)
        memory_lens = memory_lens.to(memory.device)
        x = self._embed(tokens)
        new_cache: list[torch.Tensor] = []
        for i, layer in enumerate(self.decoders):
            if cache is None:
                x = layer(x, lens, memory, memory_lens)
            else:
                last = layer(x, lens, memory, memory_lens, last_only=True)
                x = torch.cat([cache[i], last], dim=1)
            new_cache.append(x)
        logits = self._head(x[:, -1])
        return _log_softmax(logits), new_cache

    def score_hypotheses(
        self, encoder_out: torch.Tensor, encoder_len: int, hyps: Sequence[Sequence[int]], reverse_weight: float = 0.0
    ) -> torch.Tensor:
        """Left-to-right attention score of each hypothesis (``reverse_weight`` is ignored:
        a one-direction decoder has no right-to-left score, as in WeNet).

        Shapes:
            encoder_out: (1, T', D) -> (N,) float64
        """
        return _direction_scores(self, encoder_out, encoder_len, hyps, reverse=False)


class BiTransformerDecoder(nn.Module):
    """WeNet's decoder pair: ``left_decoder`` (left to right) and, for U2++,
    ``right_decoder`` (right to left, ``r_num_blocks`` blocks); a plain ``transformer``
    decoder is a pair without the right half. oasr only rescores with it
    (``score_hypotheses``); each half runs its own forward.
    """

    def __init__(self, cfg: TransformerDecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.left_decoder = TransformerDecoder(cfg, cfg.num_blocks)
        self.right_decoder = TransformerDecoder(cfg, cfg.r_num_blocks) if cfg.bidirectional else None

    sos = config_int("sos", via="cfg")
    eos = config_int("eos", via="cfg")

    def score_hypotheses(
        self, encoder_out: torch.Tensor, encoder_len: int, hyps: Sequence[Sequence[int]], reverse_weight: float = 0.0
    ) -> torch.Tensor:
        """WeNet's attention-rescoring score of each hypothesis, without the CTC term:
        ``sum_j log p(y_j | <sos> y_<j) + log p(<eos> | <sos> y)`` left to right, and with
        ``reverse_weight > 0`` and a right-to-left decoder,
        ``(1 - reverse_weight) * left + reverse_weight * right``.

        Args:
            encoder_out: (1, T', D) encoder output of one utterance (padding beyond
                ``encoder_len`` is ignored).
            encoder_len: valid frames of ``encoder_out``.
            hyps: token ids of each hypothesis (no ``<sos>`` / ``<eos>``).
            reverse_weight: weight of the right-to-left score.

        Returns:
            (N,) float64
        """
        left = _direction_scores(self.left_decoder, encoder_out, encoder_len, hyps, reverse=False)
        if reverse_weight <= 0.0 or self.right_decoder is None:
            return left
        right = _direction_scores(self.right_decoder, encoder_out, encoder_len, hyps, reverse=True)
        return (1.0 - reverse_weight) * left + reverse_weight * right


def _log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """log-softmax in at least float32."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32)).log_softmax(dim=-1)


def _direction_scores(
    decoder: TransformerDecoder,
    encoder_out: torch.Tensor,
    encoder_len: int,
    hyps: Sequence[Sequence[int]],
    *,
    reverse: bool,
) -> torch.Tensor:
    """Teacher-forced score of each hypothesis through one direction. -> (N,) float64"""
    n = len(hyps)
    device = encoder_out.device
    if n == 0:
        return torch.zeros(0, dtype=torch.float64, device=device)
    if encoder_out.dim() != 3 or encoder_out.shape[0] != 1:
        raise ValueError(f"score_hypotheses takes one utterance (1, T, D), got {tuple(encoder_out.shape)}")
    cfg = decoder.cfg
    seqs = reverse_pad_list(hyps) if reverse else [list(h) for h in hyps]
    ys_in, ys_lens = add_sos_eos(seqs, int(cfg.sos), int(cfg.eos))
    ys_in, ys_lens = ys_in.to(device), ys_lens.to(device)
    memory = encoder_out[:, :encoder_len].expand(n, -1, -1)
    memory_lens = torch.full((n,), int(encoder_len), dtype=torch.long, device=device)
    logp = _log_softmax(decoder(memory, memory_lens, ys_in, ys_lens)).double()  # (N, L + 1, V)
    # Targets: y1 .. yn then <eos> at position n (positions past it are padding, weight 0).
    targets = torch.full_like(ys_in, int(cfg.eos))
    targets[:, :-1] = ys_in[:, 1:]
    positions = torch.arange(ys_in.shape[1], device=device)[None, :]
    targets = torch.where(positions < (ys_lens - 1)[:, None], targets, torch.full_like(targets, int(cfg.eos)))
    picked = logp.gather(2, targets[..., None])[..., 0]  # (N, L + 1)
    return torch.where(positions < ys_lens[:, None], picked, torch.zeros_like(picked)).sum(dim=1)


__all__ = [
    "BiTransformerDecoder",
    "DecoderLayer",
    "MultiHeadedAttention",
    "TransformerDecoder",
    "TransformerDecoderConfig",
    "add_sos_eos",
    "reverse_pad_list",
]
