"""Whisper: a transformer encoder over a 30-s log-mel window and an incremental
decoder over a per-row K/V pool.

Module names follow Hugging Face's layout (without its ``model.`` prefix), so a
transformers checkpoint maps 1:1; the CTranslate2 and openai-whisper layouts are
renamed onto it in ``convert.py``. The output projection is tied to the token
embedding, as in every Whisper release.

Reads top to bottom: attention, encoder layer, encoder, decoder layer, decoder
(one layer body, ``_layers``, which prefill / step over the pool and the teacher-forced
cross-attention for word timing call with their own attention), then the public model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from oasr.languages import LANGUAGES
from oasr.layers import (
    Conv1d,
    Embedding,
    Gelu,
    LayerNorm,
    Linear,
    LinearActivation,
    attention,
    attention_weights,
)
from oasr.models.base import BaseAsrModel, BaseEncoder, DecodeType
from oasr.models.decoders import BaseDecoder, DecoderState, KVPool, PoolExhausted, RowGroups
from oasr.models.whisper.config import WhisperConfig

# The largest magnitude a float16 residual stream is clamped to (Qwen3-ASR's tower; both its
# references clamp it, as its activations can overflow half precision).
FP16_CLAMP = torch.finfo(torch.float16).max - 1000


class WhisperAttention(nn.Module):
    """Multi-head attention projections (the key projection has no bias unless ``key_bias``)."""

    def __init__(self, d_model: int, n_head: int, key_bias: bool = False) -> None:
        super().__init__()
        self.n_head = n_head
        self.head_dim = d_model // n_head
        self.q_proj = Linear(d_model, d_model)
        self.k_proj = Linear(d_model, d_model, bias=key_bias)
        self.v_proj = Linear(d_model, d_model)
        self.out_proj = Linear(d_model, d_model)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, H, T, Dh)"""
        b, t, _ = x.shape
        return x.view(b, t, self.n_head, self.head_dim).transpose(1, 2)

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, T, Dh) -> out_proj((B, T, D))"""
        b, h, t, dh = x.shape
        return self.out_proj(x.transpose(1, 2).reshape(b, t, h * dh))

    def forward(
        self, x: torch.Tensor, *, is_causal: bool = False, key_lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Dense self-attention. (B, T, D) -> (B, T, D)"""
        q, k, v = self.heads(self.q_proj(x)), self.heads(self.k_proj(x)), self.heads(self.v_proj(x))
        return self.merge(attention(q, k, v, is_causal=is_causal, key_lengths=key_lengths))


class WhisperEncoderLayer(nn.Module):
    """Whisper's pre-norm encoder layer: self-attention (over each row's valid keys, when
    given) and a GELU MLP, each with a residual. The speech-LLM audio towers are built of it
    (Qwen3-ASR's with biased keys and its residual stream clamped in float16).

    Shapes:
        x: (B, T, D), key_lengths: (B,) or None -> (B, T, D)
    """

    def __init__(
        self, d_model: int, n_head: int, ffn_dim: int, eps: float, *, key_bias: bool = False, fp16_clamp: bool = False
    ) -> None:
        super().__init__()
        self.self_attn = WhisperAttention(d_model, n_head, key_bias)
        self.self_attn_layer_norm = LayerNorm(d_model, eps)
        self.fc1 = LinearActivation(d_model, ffn_dim, "gelu")
        self.fc2 = Linear(ffn_dim, d_model)
        self.final_layer_norm = LayerNorm(d_model, eps)
        self.fp16_clamp = fp16_clamp

    def forward(self, x: torch.Tensor, key_lengths: torch.Tensor | None = None) -> torch.Tensor:
        a = self.self_attn(self.self_attn_layer_norm(x), key_lengths=key_lengths)
        h, x = self.final_layer_norm.add_forward(a, x)
        x = x + self.fc2(self.fc1(h))
        if self.fp16_clamp and x.dtype == torch.float16:
            x = x.clamp(-FP16_CLAMP, FP16_CLAMP)
        return x


class WhisperStyleEncoder(BaseEncoder):
    """Whisper's encoder body, which the Qwen2-Audio tower shares: two GELU convolutions
    (the second strides by 2), learned positions, pre-norm layers, a final LayerNorm.

    Shapes (``embed``):
        feats: (B, n_mels, 2 * n_positions) -> (B, n_positions, d_model)
    """

    def __init__(
        self, n_mels: int, d_model: int, n_positions: int, n_layers: int, n_head: int, ffn_dim: int, eps: float
    ) -> None:
        super().__init__()
        self.output_size = d_model
        self.conv1 = Conv1d(n_mels, d_model, 3, padding=1)
        self.conv2 = Conv1d(d_model, d_model, 3, stride=2, padding=1)
        self.gelu = Gelu()
        self.embed_positions = Embedding(n_positions, d_model)
        self.layers = nn.ModuleList(WhisperEncoderLayer(d_model, n_head, ffn_dim, eps) for _ in range(n_layers))
        self.layer_norm = LayerNorm(d_model, eps)

    def embed(self, feats: torch.Tensor) -> torch.Tensor:
        """The convolutions and the learned positions: (B, n_mels, T) -> (B, T // 2, D). A window
        shorter than n_positions takes the first positions (sherpa-onnx's export feeds such)."""
        x = self.gelu(self.conv1(feats))
        x = self.gelu(self.conv2(x))
        return x.transpose(1, 2) + self.embed_positions.weight[: x.shape[2]]  # (B, T', D)


class WhisperEncoder(WhisperStyleEncoder):
    """Whisper's encoder over one 30-s window.

    Shapes:
        feats: (B, n_mels, 2 * n_audio_ctx) -> (B, n_audio_ctx, n_audio_state)
    """

    subsampling_rate = 2

    def __init__(self, cfg: WhisperConfig) -> None:
        d, heads, ffn, eps = cfg.n_audio_state, cfg.n_audio_head, cfg.encoder_ffn_dim, cfg.layer_norm_eps
        super().__init__(cfg.n_mels, d, cfg.n_audio_ctx, cfg.n_audio_layer, heads, ffn, eps)
        self.cfg = cfg

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        expected = 2 * self.cfg.n_audio_ctx
        if feats.dim() != 3 or feats.shape[1] != self.cfg.n_mels or feats.shape[2] != expected:
            raise ValueError(
                f"Whisper expects features of shape (B, {self.cfg.n_mels}, {expected}) "
                f"(a 30-s window, padded); got {tuple(feats.shape)}"
            )
        x = self.embed(feats)
        for layer in self.layers:
            x = layer(x)
        x = self.layer_norm(x)
        lens = torch.full((x.shape[0],), x.shape[1], dtype=torch.long, device=x.device)
        return x, lens


class WhisperDecoderLayer(nn.Module):
    def __init__(self, cfg: WhisperConfig) -> None:
        super().__init__()
        d = cfg.n_text_state
        self.self_attn = WhisperAttention(d, cfg.n_text_head)
        self.self_attn_layer_norm = LayerNorm(d, cfg.layer_norm_eps)
        self.encoder_attn = WhisperAttention(d, cfg.n_text_head)
        self.encoder_attn_layer_norm = LayerNorm(d, cfg.layer_norm_eps)
        self.fc1 = LinearActivation(d, cfg.decoder_ffn_dim, "gelu")
        self.fc2 = Linear(cfg.decoder_ffn_dim, d)
        self.final_layer_norm = LayerNorm(d, cfg.layer_norm_eps)


_SelfAttendFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
_CrossAttendFn = Callable[[int, torch.Tensor], torch.Tensor]


class WhisperDecoder(BaseDecoder):
    """Token embedding + learned positions, pre-norm layers with cross-attention,
    logits through the tied embedding.

    K/V live in a ``KVPool``: self-attention K/V per hypothesis row, cross-attention
    K/V per encoder window (group), shared by the rows of that group.
    """

    supports_paged_kv = True
    supports_step_graphs = True

    def __init__(self, cfg: WhisperConfig) -> None:
        super().__init__()
        d = cfg.n_text_state
        self.cfg = cfg
        self.embed_tokens = Embedding(cfg.n_vocab, d)
        self.embed_positions = Embedding(cfg.n_text_ctx, d)
        self.layers = nn.ModuleList(WhisperDecoderLayer(cfg) for _ in range(cfg.n_text_layer))
        self.layer_norm = LayerNorm(d, cfg.layer_norm_eps)
        # An int8 copy of the tied embedding for ``logits``, set by int8 quantization.
        self.tied_head: nn.Module | None = None

    # -- pieces -------------------------------------------------------------------

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., V) through the tied embedding."""
        if self.tied_head is not None:
            return self.tied_head(x)
        return self.embed_tokens.logits(x)

    def new_pool(
        self, max_rows: int, max_groups: int = 0, *, max_len: int | None = None, device=None, dtype=None
    ) -> KVPool:
        return KVPool(
            n_layers=self.cfg.n_text_layer,
            n_heads=self.cfg.n_text_head,
            head_dim=self.cfg.n_text_state // self.cfg.n_text_head,
            max_rows=max_rows,
            max_len=self.cfg.n_text_ctx if max_len is None else max_len,
            max_groups=max_groups,
            cross_len=self.cfg.n_audio_ctx,
            device=device if device is not None else self.embed_tokens.weight.device,
            dtype=dtype if dtype is not None else self.compute_dtype,
        )

    def _layers(self, x: torch.Tensor, self_attend: _SelfAttendFn, cross_attend: _CrossAttendFn) -> torch.Tensor:
        """The decoder-layer body shared by prefill, step and the teacher-forced pass; the
        callers differ only in where attention reads its keys and values.

        ``self_attend(li, q, k, v)`` does layer ``li``'s causal self-attention (and may store
        ``k`` / ``v`` in a pool); ``cross_attend(li, q)`` attends ``q`` over the encoder
        output. Both return heads, ``(n, H, T, Dh)``; the final norm is the caller's.

        Shapes:
            x: (n, T, D) -> (n, T, D)
        """
        for li, layer in enumerate(self.layers):
            att = layer.self_attn
            h = layer.self_attn_layer_norm(x)
            q, k, v = att.heads(att.q_proj(h)), att.heads(att.k_proj(h)), att.heads(att.v_proj(h))
            a = att.merge(self_attend(li, q, k, v))
            h, x = layer.encoder_attn_layer_norm.add_forward(a, x)
            cross = layer.encoder_attn
            c = cross.merge(cross_attend(li, cross.heads(cross.q_proj(h))))
            h, x = layer.final_layer_norm.add_forward(c, x)
            x = x + layer.fc2(layer.fc1(h))
        return x

    def _cross(self, q: torch.Tensor, pool: KVPool, li: int, group0: int, groups: RowGroups) -> torch.Tensor:
        """Cross-attention of rows over their groups' K/V in the pool. (n, H, T, Dh) -> (n, H, T, Dh)

        ``groups`` is the rows' layout over the groups from ``group0``: an int k when
        rows are ``[g0]*k + [g1]*k + ...`` (k hypotheses per window), else each row's
        group (relative to ``group0``) as a (n,) tensor.
        """
        n, hh, t, dh = q.shape
        if isinstance(groups, int):
            g = n // groups
            ck, cv = pool.cross_k[li, group0 : group0 + g], pool.cross_v[li, group0 : group0 + g]  # (G, H, Tk, Dh)
            if groups == 1:
                return attention(q, ck, cv)
            if t == 1:
                # Hypotheses of one group become query positions over the shared K/V.
                qg = q.view(g, groups, hh, dh).transpose(1, 2)  # (G, H, k, Dh)
                return attention(qg, ck, cv).transpose(1, 2).reshape(n, hh, 1, dh)
            groups = torch.arange(n, device=q.device) // groups
        idx = groups + group0
        return attention(q, pool.cross_k[li].index_select(0, idx), pool.cross_v[li].index_select(0, idx))

    # -- incremental surface -----------------------------------------------------------

    def prefill(
        self,
        pool: KVPool,
        tokens: torch.Tensor,
        token_lens: torch.Tensor,
        *,
        row0: int = 0,
        group0: int = 0,
        memory: torch.Tensor | None = None,
        row_group: Sequence[int] | None = None,
        logits_at: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, DecoderState]:
        """Run right-padded prompts over their encoder windows.

        Args:
            pool: where K/V go (rows ``row0..row0+B``, groups ``group0..group0+G``).
            tokens: (B, P) prompt ids, right-padded; token_lens: (B,) lengths.
            memory: (G, n_audio_ctx, D) encoder output; its cross-attention K/V are
                written to the pool. ``None`` reuses groups already in the pool.
            row_group: group of each row (default: row i reads group i).
            logits_at: (B, m) prompt positions to return logits for (default: the
                last position of each row).

        Returns:
            logits (B, V), or (B, m, V) with ``logits_at``; and the state.
        """
        b, p = tokens.shape
        if p > self.cfg.n_text_ctx:
            raise ValueError(f"prompt of {p} tokens exceeds the decoder context {self.cfg.n_text_ctx}")
        row_group = list(range(b)) if row_group is None else [int(g) for g in row_group]
        n_groups = (max(row_group) + 1) if row_group else 0
        if row0 + b > pool.max_rows or group0 + n_groups > pool.max_groups:
            raise PoolExhausted(
                f"prefill of {b} rows / {n_groups} groups at ({row0}, {group0}) exceeds the pool "
                f"({pool.max_rows} rows, {pool.max_groups} groups)"
            )
        if memory is not None:
            if memory.shape[0] != n_groups:
                raise ValueError(f"memory has {memory.shape[0]} windows for {n_groups} groups")
            for li, layer in enumerate(self.layers):
                att = layer.encoder_attn
                for g in range(n_groups):  # a window at a time: temporaries of one window, not of the batch
                    window = memory[g : g + 1]
                    pool.cross_k[li, group0 + g] = att.heads(att.k_proj(window))[0]
                    pool.cross_v[li, group0 + g] = att.heads(att.v_proj(window))[0]
        token_lens = token_lens.to(device=tokens.device, dtype=torch.long)
        lengths = [int(x) for x in token_lens.tolist()]
        state = DecoderState(
            pool=pool,
            row0=row0,
            group0=group0,
            n_groups=n_groups,
            lengths=lengths,
            lengths_t=token_lens.clone(),
            row_group=row_group,
        )
        groups = state.row_groups()

        def self_attend(li: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            pool.k[li, row0 : row0 + b, :, :p] = k
            pool.v[li, row0 : row0 + b, :, :p] = v
            return attention(q, k, v, is_causal=True, key_lengths=token_lens)

        x = self.embed_tokens(tokens) + self.embed_positions.weight[:p]
        x = self._layers(x, self_attend, lambda li, q: self._cross(q, pool, li, group0, groups))
        x = self.layer_norm(x)
        if logits_at is None:
            last = x[torch.arange(b, device=x.device), token_lens - 1]  # (B, D)
            return self.logits(last), state
        picked = torch.gather(x, 1, logits_at[..., None].expand(-1, -1, x.shape[-1]))  # (B, m, D)
        return self.logits(picked), state

    def step(self, state: DecoderState, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row at each row's own position. (n,) -> logits (n, V)"""
        n = state.n_rows
        if n == 0:
            return torch.empty(0, self.cfg.n_vocab, device=tokens.device)
        if state.max_length >= self.cfg.n_text_ctx:
            raise ValueError(f"decoder context of {self.cfg.n_text_ctx} tokens exhausted")
        logits = self.step_rows(
            state.pool, state.row0, state.group0, tokens, state.lengths_t, state.max_length + 1, state.row_groups()
        )
        state.advance()
        return logits

    def step_rows(
        self,
        pool: KVPool,
        row0: int,
        group0: int,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        extent: int,
        groups: RowGroups,
    ) -> torch.Tensor:
        """``BaseDecoder.step_rows``: what ``step`` runs, and what a CUDA graph records."""
        n = tokens.shape[0]
        rows = torch.arange(n, device=tokens.device)
        key_mask = (torch.arange(extent, device=tokens.device)[None, :] <= positions[:, None])[:, None, None, :]

        def self_attend(li: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            kc, vc = pool.k[li, row0 : row0 + n], pool.v[li, row0 : row0 + n]  # (n, H, S, Dh) views
            kc[rows, :, positions] = k[:, :, 0]
            vc[rows, :, positions] = v[:, :, 0]
            return attention(q, kc[:, :, :extent], vc[:, :, :extent], mask=key_mask)

        x = (self.embed_tokens(tokens) + self.embed_positions(positions))[:, None, :]  # (n, 1, D)
        x = self._layers(x, self_attend, lambda li, q: self._cross(q, pool, li, group0, groups))
        return self.logits(self.layer_norm(x[:, 0]))

    # -- teacher-forced alignment ----------------------------------------------------

    def cross_attention(
        self,
        memory: torch.Tensor,
        tokens: torch.Tensor,
        token_lens: torch.Tensor,
        heads: Sequence[tuple[int, int]],
        max_frames: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced forward returning the cross-attention probabilities of
        the declared (layer, head) pairs, for word timing.

        Args:
            memory: (B, Tk, D) encoder output; tokens: (B, L) right-padded ids;
            token_lens: (B,) lengths; heads: (layer, head) pairs.
            max_frames: softmax over the first ``max_frames`` encoder frames only
                (the window's real audio); default all.

        Returns:
            probabilities (B, len(heads), L, max_frames) float32, and logits (B, L, V).
        """
        b, length = tokens.shape
        token_lens = token_lens.to(device=tokens.device, dtype=torch.long)
        frames = memory.shape[1] if max_frames is None else int(max_frames)
        by_layer: dict[int, list[int]] = {}
        for li, hi in heads:
            by_layer.setdefault(int(li), []).append(int(hi))
        collected: dict[tuple[int, int], torch.Tensor] = {}

        def cross_attend(li: int, q: torch.Tensor) -> torch.Tensor:
            att = self.layers[li].encoder_attn
            k, v = att.heads(att.k_proj(memory)), att.heads(att.v_proj(memory))
            if li in by_layer:
                sel = by_layer[li]
                w = attention_weights(q[:, sel], k[:, sel, :frames])  # (B, |sel|, L, frames)
                for j, hi in enumerate(sel):
                    collected[(li, hi)] = w[:, j]
            return attention(q, k, v)

        x = self.embed_tokens(tokens) + self.embed_positions.weight[:length]
        x = self._layers(
            x, lambda li, q, k, v: attention(q, k, v, is_causal=True, key_lengths=token_lens), cross_attend
        )
        logits = self.logits(self.layer_norm(x))
        weights = torch.stack([collected[(int(li), int(hi))] for li, hi in heads], dim=1)
        return weights, logits


class WhisperModel(BaseAsrModel):
    """Whisper (offline-only; decoded by the ``aed`` strategy)."""

    architecture = "whisper"
    capabilities = frozenset({DecodeType.AED})
    config_class = WhisperConfig

    def __init__(self, config: WhisperConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        self.encoder = WhisperEncoder(self.config)
        self.decoder = WhisperDecoder(self.config)

    def encode_offline(
        self, feats: torch.Tensor, feat_lens: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, n_mels, 3000) log-mel windows -> (B, 1500, D) states, (B,) lengths."""
        return self.encoder(feats, feat_lens)

    @property
    def languages(self) -> tuple[str, ...]:
        """The codes of the language tokens: openai-whisper's ``num_languages`` (``n_vocab -
        51765 - 1``: 99 up to large-v2, 100 with large-v3's ``yue``) of ``LANGUAGES``, in
        token order; ``("en",)`` for an English-only vocabulary (< 51865 ids), whose prompt
        names no language."""
        n_vocab = self.config.n_vocab
        if n_vocab < 51865:
            return ("en",)
        return tuple(LANGUAGES)[: n_vocab - 51765 - 1]

    # -- what the aed strategy asks of the model (the AED capability) --------------------

    def aed_vocabulary(self, tokenizer):
        """Whisper's view of ``tokenizer`` (specials, prompts, languages, word splitting):
        multilingual when the vocabulary has Whisper's multilingual size (>= 51865)."""
        from oasr.models.whisper.tokenizer import WhisperTokenizer

        return WhisperTokenizer.from_tokenizer(tokenizer, multilingual=self.config.n_vocab >= 51865)

    @property
    def default_alignment_heads(self) -> list[tuple[int, int]]:
        """Cross-attention heads that time words when the checkpoint names none: every head of
        the upper half of the decoder layers (as openai-whisper and faster-whisper do)."""
        n, heads = self.config.n_text_layer, self.config.n_text_head
        return [(layer, h) for layer in range(n // 2, n) for h in range(heads)]

    @property
    def window_frames(self) -> int:
        """Mel frames of one encoder window (3000: 30 s)."""
        return 2 * self.config.n_audio_ctx

    @property
    def n_mels(self) -> int:
        return self.config.n_mels
