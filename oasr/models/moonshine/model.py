"""Moonshine: an encoder-decoder over the raw waveform, decoded by the ``llm`` strategy.

The encoder reads samples, not a mel: three strided convolutions (kernel 127 / stride 64 with tanh
and a one-group GroupNorm, 7 / 3 and 3 / 2 with GELU: 384 samples a frame, 41.7 frames a second)
and pre-norm transformer layers with rotary positions on part of each head (``partial_rotary_factor``,
GPT-J's interleaved pairs). No clip is padded to a window: it costs its length. In a batch each
row's GroupNorm statistics and attention keys are its own frames only, so a padded row gives what
the row gives alone (transformers' batched forward does not: its mask is the sample mask read every
384 samples, which can keep frames past a row's own end).

The decoder is pre-norm too (no biases in its norms): causal self-attention with the same partial
rotary positions, cross-attention over the encoder states (no positions), and a SwiGLU MLP
(``fc1`` -> value, gate halves; ``act(gate) * value``); the logits go through ``proj_out`` (the
token embedding when tied). Over the ``llm`` strategy's K/V pool each row keeps its self-attention
K/V in the pool and its cross-attention K/V (computed once at prefill) in the state's ``extras``,
with its own number of encoder frames, so rows of any lengths join, leave and step together.

Reads top to bottom: rotary, attention and MLPs, the encoder, the decoder (a dense teacher-forced
forward for parity, then prefill / step over the pool), the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
from torch import nn

from oasr.languages import resolve_language
from oasr.layers import Conv1d, Embedding, LayerNorm, Linear, LinearActivation, MaskedGroupNorm, attention
from oasr.layers.activation import apply_activation
from oasr.models.base import BaseAsrModel, BaseEncoder
from oasr.models.decoders.base import RowPoolDecoder
from oasr.models.decoders.kv_pool import DecoderState, KVPool, PoolExhausted
from oasr.models.moonshine.config import MoonshineConfig
from oasr.specs import DecodeType

# The conv front: (kernel, stride) of each convolution; a frame is 64 * 3 * 2 samples.
_CONVS = ((127, 64), (7, 3), (3, 2))
SAMPLES_PER_FRAME = 384
MIN_SAMPLES = 127 + 64 * 12  # the fewest samples that give one encoder frame


def frames_of(n_samples: torch.Tensor) -> torch.Tensor:
    """Encoder frames of clips of ``n_samples`` samples (0 for a clip too short for one).

    Shapes:
        n_samples: (B,) -> (B,) int64
    """
    n = n_samples.to(torch.long)
    for kernel, stride in _CONVS:
        n = torch.where(n >= kernel, (n - kernel) // stride + 1, torch.zeros_like(n))
    return n


# ---------------------------------------------------------------------------
# Rotary positions on part of each head


class PartialRotary(nn.Module):
    """Rotary positions on the first ``rotary_dim`` channels of each head, rotating the
    interleaved pairs (0, 1), (2, 3), ... (transformers' Moonshine); the rest pass through.
    The angles are float32 whatever the compute dtype, as transformers computes them.

    Shapes:
        cos_sin: positions (B, T) -> cos, sin (B, T, rotary_dim)
        apply: x (B, H, T, Dh), cos / sin (B, T, rotary_dim) -> (B, H, T, Dh)
    """

    def __init__(self, head_dim: int, factor: float, base: float) -> None:
        super().__init__()
        dim = int(head_dim * factor)
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.rotary_dim = 2 * inv_freq.numel()

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions[..., None].float() * self.inv_freq.float()  # (B, T, R/2)
        freqs = freqs.repeat_interleave(2, dim=-1)  # (B, T, R): each angle on its pair
        return freqs.cos().to(dtype), freqs.sin().to(dtype)

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        r = self.rotary_dim
        rot, rest = x[..., :r], x[..., r:]
        pairs = torch.stack((-rot[..., 1::2], rot[..., 0::2]), dim=-1).flatten(-2)  # (x0, x1) -> (-x1, x0)
        return torch.cat((rot * cos[:, None] + pairs * sin[:, None], rest), dim=-1)


# ---------------------------------------------------------------------------
# Attention and MLPs


class MoonshineAttention(nn.Module):
    """q / k / v / o projections (``o_proj`` never biased).

    Shapes:
        heads: (B, T, D) -> (B, H, T, Dh); merge: (B, H, T, Dh) -> (B, T, D)
    """

    def __init__(self, cfg: MoonshineConfig) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.n_head, self.head_dim = cfg.num_heads, cfg.head_dim
        self.q_proj = Linear(d, d, bias=cfg.attention_bias)
        self.k_proj = Linear(d, d, bias=cfg.attention_bias)
        self.v_proj = Linear(d, d, bias=cfg.attention_bias)
        self.o_proj = Linear(d, d, bias=False)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_head, self.head_dim).transpose(1, 2)

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        b, h, t, dh = x.shape
        return self.o_proj(x.transpose(1, 2).reshape(b, t, h * dh))

    def project(
        self, x: torch.Tensor, rotary: PartialRotary, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rotated q, k and plain v of ``x``. (B, T, D) -> 3 x (B, H, T, Dh)"""
        q = rotary.apply(self.heads(self.q_proj(x)), cos, sin)
        k = rotary.apply(self.heads(self.k_proj(x)), cos, sin)
        return q, k, self.heads(self.v_proj(x))


class EncoderMlp(nn.Module):
    """``fc2(act(fc1(x)))`` with biases. (..., D) -> (..., D)"""

    def __init__(self, cfg: MoonshineConfig) -> None:
        super().__init__()
        self.fc1 = LinearActivation(cfg.hidden_size, cfg.intermediate_size, cfg.encoder_act)
        self.fc2 = Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x))


class DecoderMlp(nn.Module):
    """SwiGLU: ``fc1`` gives (value, gate) halves; ``fc2(act(gate) * value)``. (..., D) -> (..., D)"""

    def __init__(self, cfg: MoonshineConfig) -> None:
        super().__init__()
        self.act = cfg.decoder_act
        self.fc1 = Linear(cfg.hidden_size, 2 * cfg.intermediate_size)
        self.fc2 = Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(apply_activation(gate, self.act) * value)


# ---------------------------------------------------------------------------
# Encoder


class MoonshineEncoderLayer(nn.Module):
    def __init__(self, cfg: MoonshineConfig) -> None:
        super().__init__()
        self.self_attn = MoonshineAttention(cfg)
        self.mlp = EncoderMlp(cfg)
        self.input_layernorm = LayerNorm(cfg.hidden_size, bias=False)
        self.post_attention_layernorm = LayerNorm(cfg.hidden_size, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        rotary: PartialRotary,
        cos: torch.Tensor,
        sin: torch.Tensor,
        key_lengths: torch.Tensor | None,
    ) -> torch.Tensor:
        """(B, T, D) -> (B, T, D); keys past a row's ``key_lengths`` are masked."""
        att = self.self_attn
        q, k, v = att.project(self.input_layernorm(x), rotary, cos, sin)
        x = x + att.merge(attention(q, k, v, key_lengths=key_lengths))
        return x + self.mlp(self.post_attention_layernorm(x))


class MoonshineEncoder(BaseEncoder):
    """Conv front over samples, rotary transformer layers, final LayerNorm.

    Shapes:
        samples: (B, N) or (B, N, 1), n_samples: (B,) -> states (B, T, D), frames (B,)
    """

    subsampling_rate = SAMPLES_PER_FRAME

    def __init__(self, cfg: MoonshineConfig) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.output_size = d
        self.conv1 = Conv1d(1, d, 127, stride=64, bias=False)
        self.groupnorm = MaskedGroupNorm(d, eps=1e-5, groups=1)
        self.conv2 = Conv1d(d, 2 * d, 7, stride=3)
        self.conv3 = Conv1d(2 * d, d, 3, stride=2)
        self.layers = nn.ModuleList(MoonshineEncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.layer_norm = LayerNorm(d, bias=False)
        self.rotary = PartialRotary(cfg.head_dim, cfg.partial_rotary_factor, cfg.rope_theta)

    def front(self, samples: torch.Tensor, n_samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The conv front: each row's GroupNorm statistics over its own conv1 frames.

        Shapes:
            samples: (B, N) zero-padded, n_samples: (B,) -> (B, T, D), frames (B,)
        """
        if samples.dim() == 3:
            samples = samples[..., 0]
        n_samples = n_samples.to(device=samples.device, dtype=torch.long)
        if samples.shape[1] < MIN_SAMPLES:  # room for one frame; the padding is masked out
            samples = nn.functional.pad(samples, (0, MIN_SAMPLES - samples.shape[1]))
        h = torch.tanh(self.conv1(samples[:, None]))  # (B, D, T1)
        kernel, stride = _CONVS[0]
        n1 = torch.where(n_samples >= kernel, (n_samples - kernel) // stride + 1, torch.zeros_like(n_samples))
        mask = None
        if bool((n1 < h.shape[-1]).any()):
            mask = torch.arange(h.shape[-1], device=h.device)[None, :] < n1[:, None]
        h = self.groupnorm(h, mask)
        h = nn.functional.gelu(self.conv2(h))
        h = nn.functional.gelu(self.conv3(h))  # (B, D, T)
        return h.transpose(1, 2), frames_of(n_samples)

    def forward(
        self, samples: torch.Tensor, n_samples: torch.Tensor, *, keep_layers: list[torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder states; ``keep_layers`` (a list), when given, receives each layer's output."""
        x, frames = self.front(samples, n_samples)
        b, t, _ = x.shape
        key_lengths = frames.clamp(min=1) if bool((frames < t).any()) else None  # an empty row stays finite
        positions = torch.arange(t, device=x.device)[None, :]
        cos, sin = self.rotary.cos_sin(positions, x.dtype)
        for layer in self.layers:
            x = layer(x, self.rotary, cos, sin, key_lengths)
            if keep_layers is not None:
                keep_layers.append(x)
        return self.layer_norm(x), frames


# ---------------------------------------------------------------------------
# Decoder


class MoonshineDecoderLayer(nn.Module):
    def __init__(self, cfg: MoonshineConfig) -> None:
        super().__init__()
        self.self_attn = MoonshineAttention(cfg)
        self.encoder_attn = MoonshineAttention(cfg)
        self.mlp = DecoderMlp(cfg)
        self.input_layernorm = LayerNorm(cfg.hidden_size, bias=False)
        self.post_attention_layernorm = LayerNorm(cfg.hidden_size, bias=False)
        self.final_layernorm = LayerNorm(cfg.hidden_size, bias=False)


class CrossPrompt(NamedTuple):
    """What ``MoonshineModel.embed_prompt`` hands the decoder's ``prefill``: the prompt's token
    embeddings and the encoder states its rows attend to.

    Shapes:
        embeds: (B, P, D); memory: (B, T, D); memory_lens: (B,)
    """

    embeds: torch.Tensor
    memory: torch.Tensor
    memory_lens: torch.Tensor


# A layer's self-attention given its rotated (q, k, v), and its cross-attention given q.
_SelfAttendFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
_CrossAttendFn = Callable[[int, torch.Tensor], torch.Tensor]


class MoonshineDecoder(RowPoolDecoder):
    """Moonshine's decoder over a per-row K/V pool (``new_pool`` / ``prefill`` / ``step`` /
    ``select`` / ``merge``), and a dense teacher-forced ``forward`` for parity.

    A state's ``extras`` hold each row's cross-attention K/V, ``cross_k`` / ``cross_v``
    (n_rows, n_layers, H, T_enc, Dh), and its encoder frames ``cross_lens`` (n_rows,).
    """

    supports_paged_kv = True

    def __init__(self, cfg: MoonshineConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(MoonshineDecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.norm = LayerNorm(cfg.hidden_size, bias=False)
        self.proj_out = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.rotary = PartialRotary(cfg.head_dim, cfg.partial_rotary_factor, cfg.rope_theta)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, T) -> (B, T, D)"""
        return self.embed_tokens(ids)

    def _logits_out(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits in float32 at least (float64 stays float64)."""
        logits = self.proj_out(hidden)
        return logits.float() if logits.element_size() < 4 else logits

    def _layers(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, self_attend: _SelfAttendFn, cross: _CrossAttendFn
    ) -> torch.Tensor:
        """The layer stack and the final norm. (B, T, D) -> (B, T, D)"""
        for li, layer in enumerate(self.layers):
            att = layer.self_attn
            q, k, v = att.project(layer.input_layernorm(x), self.rotary, cos, sin)
            x = x + att.merge(self_attend(li, q, k, v))
            xatt = layer.encoder_attn
            x = x + xatt.merge(cross(li, xatt.heads(xatt.q_proj(layer.post_attention_layernorm(x)))))
            x = x + layer.mlp(layer.final_layernorm(x))
        return self.norm(x)

    def cross_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every layer's cross-attention K/V of the encoder states.

        Shapes:
            memory: (B, T, D) -> cross_k, cross_v (B, n_layers, H, T, Dh)
        """
        ks, vs = [], []
        for layer in self.layers:
            att = layer.encoder_attn
            ks.append(att.heads(att.k_proj(memory)))
            vs.append(att.heads(att.v_proj(memory)))
        return torch.stack(ks, dim=1), torch.stack(vs, dim=1)

    # -- dense forward (no pool) ----------------------------------------------------------

    def forward(self, tokens: torch.Tensor, memory: torch.Tensor, memory_lens: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits of every position (causal; rows unpadded).

        Shapes:
            tokens: (B, U), memory: (B, T, D), memory_lens: (B,) -> (B, U, V)
        """
        ck, cv = self.cross_kv(memory)
        lens = memory_lens.to(memory.device)
        positions = torch.arange(tokens.shape[1], device=tokens.device)[None, :]
        x = self.embed(tokens)
        cos, sin = self.rotary.cos_sin(positions, x.dtype)
        hidden = self._layers(
            x,
            cos,
            sin,
            lambda li, q, k, v: attention(q, k, v, is_causal=True),
            lambda li, q: attention(q, ck[:, li], cv[:, li], key_lengths=lens),
        )
        return self.proj_out(hidden)

    # -- incremental surface ---------------------------------------------------------------

    def pool_geometry(self) -> tuple[int, int, int, int]:
        """Self-attention K/V only: cross-attention K/V live in each state's ``extras``."""
        cfg = self.cfg
        return cfg.decoder_layers, cfg.num_heads, cfg.head_dim, cfg.max_position_embeddings

    def prefill(
        self, pool: KVPool, prompt: CrossPrompt, valid: torch.Tensor, *, row0: int = 0, group0: int = 0, **_: Any
    ) -> tuple[torch.Tensor, DecoderState]:
        """Run the prompts (unpadded: every row the same length), writing their K/V into rows
        ``row0..row0+B`` of ``pool``; their cross-attention K/V go into the state.

        Returns:
            logits at each row's last position (B, V) (float32; float64 for a float64 model),
            and the state (``lengths`` = the prompt length).
        """
        if group0:
            raise ValueError("Moonshine keeps no pool groups (group0 must be 0)")
        embeds, memory, memory_lens = prompt
        b, t, _ = embeds.shape
        if not bool(valid.all()):
            raise ValueError("Moonshine's prompts are unpadded (every row starts with the decoder-start token)")
        if row0 + b > pool.max_rows:
            raise PoolExhausted(f"prefill of {b} rows at row {row0} exceeds the pool ({pool.max_rows} rows)")
        if t > pool.max_len:
            raise PoolExhausted(f"a prompt of {t} tokens exceeds the pool's {pool.max_len} tokens per row")
        lens = memory_lens.to(device=memory.device, dtype=torch.long).clamp(min=1)
        ck, cv = self.cross_kv(memory)
        positions = torch.arange(t, device=embeds.device)[None, :]
        cos, sin = self.rotary.cos_sin(positions, embeds.dtype)

        def self_attend(li: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            pool.k[li, row0 : row0 + b, :, :t] = k
            pool.v[li, row0 : row0 + b, :, :t] = v
            return attention(q, k, v, is_causal=True)

        hidden = self._layers(
            embeds, cos, sin, self_attend, lambda li, q: attention(q, ck[:, li], cv[:, li], key_lengths=lens)
        )
        state = DecoderState(
            pool=pool,
            row0=row0,
            group0=0,
            n_groups=0,
            lengths=[t] * b,
            lengths_t=torch.full((b,), t, dtype=torch.long, device=embeds.device),
            row_group=[0] * b,
            extras={"cross_k": ck, "cross_v": cv, "cross_lens": lens},
        )
        return self._logits_out(hidden[:, -1]), state

    def step(self, state: DecoderState, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row at each row's own position; K/V is written in place.

        Shapes:
            tokens: (n,) ids -> logits (n, V) (float32; float64 for a float64 model)
        """
        n = state.n_rows
        if n == 0:
            return torch.empty(0, self.cfg.vocab_size, device=tokens.device)
        pool = state.pool
        if state.max_length >= pool.max_len:
            raise PoolExhausted(f"a row reached the pool's {pool.max_len} tokens")
        embeds = self.embed(tokens)[:, None, :]  # (n, 1, D)
        positions = state.lengths_t.to(embeds.device)  # (n,) each row's next slot
        cos, sin = self.rotary.cos_sin(positions[:, None], embeds.dtype)
        ck, cv, lens = state.extras["cross_k"], state.extras["cross_v"], state.extras["cross_lens"]
        if n == 1:  # a lone row's keys are all its own frames
            lens = None
        self_attend = self.pooled_self_attention(pool, state.row0, positions, state.max_length + 1, masked=n > 1)
        hidden = self._layers(
            embeds, cos, sin, self_attend, lambda li, q: attention(q, ck[:, li], cv[:, li], key_lengths=lens)
        )
        state.advance()
        return self._logits_out(hidden[:, 0])

    def merge(self, a: DecoderState, b: DecoderState) -> DecoderState:
        """Join ``b`` after ``a``; the shorter side's cross K/V are zero-padded to the longer's
        encoder frames (masked by its ``cross_lens``)."""
        if a.n_rows and b.n_rows:
            frames = max(a.extras["cross_k"].shape[3], b.extras["cross_k"].shape[3])
            a.extras = _pad_cross(a.extras, frames)
            b.extras = _pad_cross(b.extras, frames)
        return super().merge(a, b)


def _pad_cross(extras: dict, frames: int) -> dict:
    """``extras`` with the cross K/V zero-padded to ``frames`` encoder frames."""
    pad = frames - extras["cross_k"].shape[3]
    if pad <= 0:
        return extras
    grow = (0, 0, 0, pad)  # (Dh: none, T_enc: pad at the end)
    return {
        **extras,
        "cross_k": nn.functional.pad(extras["cross_k"], grow),
        "cross_v": nn.functional.pad(extras["cross_v"], grow),
    }


# ---------------------------------------------------------------------------
# The model


class MoonshineModel(BaseAsrModel):
    """Moonshine (English; decoded by the ``llm`` strategy: its prompt is the decoder-start token).

    Args:
        config: a ``MoonshineConfig`` or its plain mapping.
    """

    family = "Moonshine"
    architecture = "moonshine"
    capabilities = frozenset({DecodeType.LLM})
    default_decode_type = DecodeType.LLM
    config_class = MoonshineConfig
    languages = ("en",)  # the released checkpoints are English-only
    supports_translation = False

    def __init__(self, config: MoonshineConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        self.encoder = MoonshineEncoder(self.config)
        self.decoder = MoonshineDecoder(self.config)

    @property
    def encoder_options(self) -> frozenset[str]:
        return frozenset({"language"})

    def encode_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder states of zero-padded clips.

        Args:
            feats: (B, N, 1) or (B, N) samples; feat_lens: (B,) samples per clip.

        Returns:
            states (B, T_max, D) and frames (B,) (0 for a clip under ``MIN_SAMPLES``).
        """
        return self.encoder(feats, feat_lens)

    def prompt_ids(
        self, n_audio: int, *, language: str | None = None, context: str | None = None, task: str = "transcribe"
    ) -> list[int]:
        """The decoder's prompt: ``[decoder_start_token_id]`` (Moonshine takes no prompt text).

        Raises:
            ValueError: a task other than transcription, a language other than English, a
                ``context``, or a clip too short for one encoder frame (``n_audio < 1``).
        """
        if task != "transcribe":
            raise ValueError(f"Moonshine serves task='transcribe' only, got task={task!r}")
        resolve_language(language, self.languages, model=self.family)
        if context:
            raise ValueError("Moonshine takes no prompt text: context is not available")
        if n_audio < 1:
            raise ValueError(
                f"the audio is too short for Moonshine: its front end needs at least {MIN_SAMPLES} samples "
                f"({MIN_SAMPLES / 16000:.3f} s at 16 kHz)"
            )
        return [self.config.decoder_start_token_id]

    def embed_prompt(
        self, ids: torch.Tensor, valid: torch.Tensor, audio_states: torch.Tensor, n_audio: torch.Tensor
    ) -> CrossPrompt:
        """The prompt's embeddings with the encoder states its rows attend to (the decoder's
        ``prefill`` input).

        Shapes:
            ids, valid: (B, P); audio_states: (B, T, D); n_audio: (B,)
        """
        return CrossPrompt(self.decoder.embed(ids), audio_states, n_audio)

    @property
    def stop_ids(self) -> tuple[int, ...]:
        return (self.config.eos_token_id,)

    def parse_output(self, text: str) -> tuple[str | None, str]:
        """("en", the transcript): the decoded text without surrounding spaces."""
        return "en", text.strip()


__all__ = [
    "MIN_SAMPLES",
    "SAMPLES_PER_FRAME",
    "CrossPrompt",
    "MoonshineDecoder",
    "MoonshineEncoder",
    "MoonshineModel",
    "PartialRotary",
    "frames_of",
]
