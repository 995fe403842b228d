"""Moonshine Streaming: an "ergodic" encoder over the raw waveform (no positions, each layer
attending within a sliding window) and a rotary decoder that cross-attends to the encoder
states after an adapter gives them positions.

The encoder, for a clip of ``S`` samples (16 kHz):

* the embedder cuts the clip into ``F' = ceil(S / 80)`` frames of 5 ms (the last zero-padded,
  and then counted as padding: ``F = floor(S / 80)`` frames are valid, as transformers'
  ``attention_mask`` over the 80-multiple padding makes them), normalises each frame to zero
  mean and unit RMS (CMVN), compresses it (``asinh(exp(log_k) * x)``), projects it
  (80 -> D, SiLU) and zeroes the padding frames;
* two causal convolutions (kernel 5, stride 2; SiLU between) take the 200 frames a second to
  100, then 50; an output frame is valid when its
  window reads any valid input (so a clip gains up to two frames past its last full one,
  as transformers' mask convolution decides), the others are zeroed;
* pre-norm transformer layers (LayerNorm scaled by ``gamma + 1``, folded into the weight
  by ``convert.py``; GELU MLP), layer ``i`` attending from
  each frame to the ``left`` frames up to itself and ``right - 1`` after it
  (``sliding_windows[i]``), then a final norm.

Each row of a batch is computed as transformers computes that clip alone with the processor's
``attention_mask``: its frame counts come from its own length, never from the batch's padding.
(Called without a mask, transformers' encoder skips the sliding windows and attends over the
whole clip; oasr always applies them, as the model streams.)

Live (``streaming.py``): the encoder declares the "stateful" streaming form and produces,
chunk by chunk, exactly the frames above; ``engine/streaming/redecode.py`` decodes them.

The decoder: the adapter adds a learned position per encoder frame (``pos_emb``) and projects
to the decoder width (``proj``, when the widths differ); the layers are pre-norm (bias-free
LayerNorm) self-attention with interleaved (GPT-J style) partial rotary positions,
cross-attention without positions, and a SwiGLU MLP (``fc1`` gives value and gate halves);
a final norm and ``proj_out``.

How the ``llm`` strategy drives it: the prompt is one placeholder per encoder frame and the
decoder start token (``prompt_ids``); ``embed_prompt`` puts the adapted encoder states in the
placeholders' places; ``decoder.prefill`` takes those as the cross-attention memory of each row
(kept per row in ``DecoderState.extras``) and runs the start token; ``step`` feeds one token a
row over the self-attention K/V pool.

Module names follow transformers' layout without its ``model.`` prefix (``proj_out`` lives in
the decoder), so a checkpoint maps by prefix (``convert.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers import Conv1d, Embedding, LayerNorm, Linear, apply_activation, attention
from oasr.models.base import BaseAsrModel, BaseEncoder, DecodeType, StreamingGeometry
from oasr.models.decoders import BaseDecoder, DecoderState, KVPool
from oasr.models.moonshine_streaming.config import MoonshineStreamingConfig

CMVN_EPS = 1e-6
TOKENS_PER_SECOND = 6.5  # transformers' Moonshine docs: max_length = int(6.5 * seconds of audio)


# ---------------------------------------------------------------------------
# Encoder


def _heads(x: torch.Tensor, n: int) -> torch.Tensor:
    """(B, T, n * Dh) -> (B, n, T, Dh)"""
    b, t, _ = x.shape
    return x.view(b, t, n, -1).transpose(1, 2)


def _merge(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, Dh) -> (B, T, H * Dh)"""
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


class Projections(nn.Module):
    """q / k / v / o projections (transformers' names)."""

    def __init__(self, d_in: int, heads: int, kv_heads: int, head_dim: int, bias: bool, out_bias: bool) -> None:
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.q_proj = Linear(d_in, heads * head_dim, bias=bias)
        self.k_proj = Linear(d_in, kv_heads * head_dim, bias=bias)
        self.v_proj = Linear(d_in, kv_heads * head_dim, bias=bias)
        self.o_proj = Linear(heads * head_dim, d_in, bias=out_bias)


class Mlp(nn.Module):
    """``fc2(act(fc1(x)))``; gated (SwiGLU) when ``gated``: ``fc1`` gives (value, gate) halves."""

    def __init__(self, d: int, inner: int, act: str, gated: bool) -> None:
        super().__init__()
        self.act, self.gated = act, gated
        self.fc1 = Linear(d, inner * (2 if gated else 1))
        self.fc2 = Linear(inner, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if self.gated:
            h, gate = h.chunk(2, dim=-1)
            return self.fc2(apply_activation(gate, self.act) * h)
        return self.fc2(apply_activation(h, self.act))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: MoonshineStreamingConfig) -> None:
        super().__init__()
        d = cfg.encoder_hidden_size
        bias = cfg.encoder_attention_bias
        self.self_attn = Projections(d, cfg.encoder_heads, cfg.encoder_kv_heads, cfg.encoder_head_dim, bias, bias)
        self.mlp = Mlp(d, cfg.encoder_intermediate_size, cfg.encoder_hidden_act, gated=False)
        self.input_layernorm = LayerNorm(d, bias=False)
        self.post_attention_layernorm = LayerNorm(d, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        att = self.self_attn
        h = self.input_layernorm(x)
        q, k, v = (
            _heads(att.q_proj(h), att.heads),
            _heads(att.k_proj(h), att.kv_heads),
            _heads(att.v_proj(h), att.kv_heads),
        )
        x = x + att.o_proj(_merge(attention(q, k, v, mask=mask)))
        return x + self.mlp(self.post_attention_layernorm(x))


class Embedder(nn.Module):
    """Frames of the waveform -> 50 frames a second (see the module notes)."""

    def __init__(self, cfg: MoonshineStreamingConfig) -> None:
        super().__init__()
        d = cfg.encoder_hidden_size
        self.frame_len = cfg.frame_len
        # The compression's learned log-gain (``comp.log_k``): a scalar of the front end, kept as
        # a buffer so that no parameter lives outside the layer waist.
        self.register_buffer("log_k", torch.zeros(()))
        self.linear = Linear(cfg.frame_len, d, bias=False)
        self.conv1 = Conv1d(d, 2 * d, 5, stride=2)
        self.conv2 = Conv1d(2 * d, d, 5, stride=2)

    @staticmethod
    def conv_lengths(total: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(frames, valid frames) after one causal (k5, s2) convolution: a frame is valid when
        its window (inputs ``2t-4 .. 2t``) reads a valid input."""
        total = (total - 1) // 2 + 1
        valid = torch.where(valid > 0, torch.minimum(total, (valid + 5) // 2), torch.zeros_like(valid))
        return total, valid

    def embed_frames(self, x: torch.Tensor) -> torch.Tensor:
        """5-ms frames -> hidden: CMVN per frame, asinh compression, projection, SiLU.
        (..., 80) -> (..., D)"""
        x = x - x.mean(dim=-1, keepdim=True)
        x = x / (x.pow(2).mean(dim=-1, keepdim=True) + CMVN_EPS).sqrt()
        return F.silu(self.linear(torch.asinh(torch.exp(self.log_k) * x)))

    def _conv(self, conv: Conv1d, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        y = conv(F.pad(x, (4, 0)))  # (B, C, T)
        keep = torch.arange(y.shape[-1], device=y.device)[None, :] < valid[:, None]
        return y * keep[:, None, :].to(y.dtype)

    def forward(self, samples: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S) samples, (B,) lengths -> (B, T, D) frames, (B,) valid frames."""
        b, s = samples.shape
        n = self.frame_len
        frames = -(-s // n)
        x = self.embed_frames(F.pad(samples, (0, frames * n - s)).view(b, frames, n))  # (B, F', D)
        total, valid = -(-lens // n), lens // n
        keep = torch.arange(frames, device=x.device)[None, :] < valid[:, None]
        x = (x * keep[..., None].to(x.dtype)).transpose(1, 2)  # (B, D, F')
        total, valid = self.conv_lengths(total, valid)
        x = F.silu(self._conv(self.conv1, x, valid))
        total, valid = self.conv_lengths(total, valid)
        x = self._conv(self.conv2, x, valid)
        return x.transpose(1, 2), valid


def sliding_window_mask(t: int, left: int, right: int, lens: torch.Tensor) -> torch.Tensor:
    """Boolean (B, 1, T, T) "may attend": key ``j`` within ``(i - left, i + right)`` of query ``i``
    and valid; a padding query attends its window (its output is never read, but stays finite).
    """
    pos = torch.arange(t, device=lens.device)
    dist = pos[:, None] - pos[None, :]  # query - key
    band = ((dist >= 0) & (dist < left)) | ((dist < 0) & (-dist < right))
    valid = pos[None, :] < lens[:, None]  # (B, T)
    return (band[None] & (valid[:, None, :] | ~valid[:, :, None]))[:, None]


class MoonshineStreamingEncoder(BaseEncoder):
    """Waveform -> encoder states (see the module notes).

    Shapes:
        samples: (B, S), lens: (B,) -> (B, T, D), (B,) valid frames
    """

    def __init__(self, cfg: MoonshineStreamingConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedder = Embedder(cfg)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.final_norm = LayerNorm(cfg.encoder_hidden_size, bias=False)

    @property
    def output_size(self) -> int:
        return self.cfg.encoder_hidden_size

    @property
    def subsampling_rate(self) -> int:
        return 4 * self.cfg.frame_len

    # -- live streams (``streaming.py``: the frames of the whole clip, as they complete) -------

    streaming_needs_final = True  # a stream's end flushes its last frames: the runtime says which chunk is

    @property
    def streaming_kind(self) -> str:
        return "stateful"

    def streaming_geometry(self, chunk_size: int) -> StreamingGeometry:
        """Windows of ``chunk_size`` output frames' samples, end to end (the encoder keeps its own
        look-ahead, so a chunk's frames come out once their right context has arrived)."""
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        return StreamingGeometry(
            window_frames=chunk_size * self.subsampling_rate, stride_frames=chunk_size * self.subsampling_rate
        )

    def get_streaming_init_states(self, batch_size: int, device=None) -> list:
        from oasr.models.moonshine_streaming.streaming import init_state, to_tensors

        return [to_tensors(init_state(self, device=device)) for _ in range(batch_size)]

    def stack_streaming_states(self, states: list) -> list:
        return [s for group in states for s in group]

    def unstack_streaming_states(self, states: list) -> list:
        return [[s] for s in states]

    def streaming_forward(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, states: list, final: list[bool] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, list]:
        """One window of samples per stream (``final``: the stream ends after it).

        Shapes:
            feats: (B, W, 1), feat_lens: (B,) -> (B, T', D), (B,) frames, the new states
        """
        from oasr.models.moonshine_streaming.streaming import encode_chunk, from_tensors, to_tensors

        outs, new = [], []
        for i, st in enumerate(states):
            state = from_tensors(st, len(self.layers))
            frames, state = encode_chunk(self, feats[i, : int(feat_lens[i]), 0], state, finish=bool(final and final[i]))
            outs.append(frames)
            new.append(to_tensors(state))
        lens = torch.tensor([o.shape[0] for o in outs], dtype=torch.long, device=feats.device)
        out = feats.new_zeros(len(outs), int(lens.max()) if len(outs) else 0, self.cfg.encoder_hidden_size)
        for i, o in enumerate(outs):
            out[i, : o.shape[0]] = o
        return out, lens, new

    def forward(self, samples: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, valid = self.embedder(samples, lens)
        masks: dict[tuple[int, int], torch.Tensor] = {}
        for layer, (left, right) in zip(self.layers, self.cfg.sliding_windows):
            mask = masks.get((left, right))
            if mask is None:
                mask = masks[(left, right)] = sliding_window_mask(x.shape[1], left, right, valid)
            x = layer(x, mask)
        return self.final_norm(x), valid


# ---------------------------------------------------------------------------
# Decoder


def rotate_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``cos.shape[-1]`` dimensions of ``x`` in interleaved pairs (GPT-J style:
    dims ``2i, 2i+1`` by angle ``i``); the rest pass.

    Shapes:
        x: (B, H, T, Dh); cos, sin: (B, 1, T, R) -> (B, H, T, Dh)
    """
    r = cos.shape[-1]
    rot, rest = x[..., :r], x[..., r:]
    swapped = torch.stack((-rot[..., 1::2], rot[..., 0::2]), dim=-1).flatten(-2)
    return torch.cat((rot * cos + swapped * sin, rest), dim=-1)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: MoonshineStreamingConfig) -> None:
        super().__init__()
        d, h, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        self.self_attn = Projections(d, h, h, hd, cfg.attention_bias, False)
        self.encoder_attn = Projections(d, h, h, hd, cfg.attention_bias, False)
        self.mlp = Mlp(d, cfg.intermediate_size, cfg.hidden_act, gated=True)
        self.input_layernorm = LayerNorm(d, bias=False)
        self.post_attention_layernorm = LayerNorm(d, bias=False)
        self.final_layernorm = LayerNorm(d, bias=False)


class MoonshineStreamingDecoder(BaseDecoder):
    """The adapter, the decoder layers and ``proj_out`` over a per-row self-attention K/V pool;
    each row's cross-attention K/V (its clip's encoder states) travels in
    ``DecoderState.extras`` (``cross_k`` / ``cross_v``: (n, L, H, Tm, Dh), ``memory_mask``:
    (n, Tm)), so ``select`` and ``merge`` move it with the row."""

    supports_paged_kv = True

    def __init__(self, cfg: MoonshineStreamingConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        self.embed_tokens = Embedding(cfg.vocab_size, d, padding_idx=cfg.pad_token_id)
        self.pos_emb = Embedding(cfg.max_position_embeddings, cfg.encoder_hidden_size)
        self.proj = Linear(cfg.encoder_hidden_size, d, bias=False) if cfg.encoder_hidden_size != d else None
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = LayerNorm(d, bias=False)
        self.proj_out = Linear(d, cfg.vocab_size, bias=False)
        half = cfg.rotary_dim // 2
        dim = int(cfg.head_dim * cfg.partial_rotary_factor)
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, 2 * half, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    # -- pieces -------------------------------------------------------------------------

    def adapt(self, memory: torch.Tensor) -> torch.Tensor:
        """Encoder states with their positions, at the decoder width. (B, T, D_enc) -> (B, T, D)"""
        if memory.shape[1] > self.cfg.max_position_embeddings:
            raise ValueError(
                f"{memory.shape[1]} encoder frames exceed the adapter's {self.cfg.max_position_embeddings} positions"
            )
        x = memory + self.pos_emb.weight[: memory.shape[1]].to(memory.dtype)
        return self.proj(x) if self.proj is not None else x

    def _rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (B, 1, T, R) of positions (B, T); angles in float32 as transformers takes them."""
        angles = positions.float()[..., None] * self.inv_freq.float()
        cos = angles.cos().repeat_interleave(2, dim=-1).to(dtype)[:, None]
        sin = angles.sin().repeat_interleave(2, dim=-1).to(dtype)[:, None]
        return cos, sin

    def _layers(self, x: torch.Tensor, positions: torch.Tensor, self_attend, extras: Mapping[str, Any]) -> torch.Tensor:
        """The layer body shared by prefill and step; ``self_attend(li, q, k, v)`` stores and
        reads the self-attention K/V. (n, T, D) -> (n, T, D) after the final norm."""
        cos, sin = self._rotary(positions, x.dtype)
        h_ = self.cfg.num_attention_heads
        mem_mask = extras["memory_mask"][:, None, None, :]  # (n, 1, 1, Tm)
        for li, layer in enumerate(self.layers):
            att = layer.self_attn
            h = layer.input_layernorm(x)
            q = rotate_interleaved(_heads(att.q_proj(h), h_), cos, sin)
            k = rotate_interleaved(_heads(att.k_proj(h), h_), cos, sin)
            x = x + att.o_proj(_merge(self_attend(li, q, k, _heads(att.v_proj(h), h_))))
            cross = layer.encoder_attn
            h = layer.post_attention_layernorm(x)
            q = _heads(cross.q_proj(h), h_)
            c = attention(q, extras["cross_k"][:, li], extras["cross_v"][:, li], mask=mem_mask)
            x = x + cross.o_proj(_merge(c))
            x = x + layer.mlp(layer.final_layernorm(x))
        return self.norm(x)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj_out(x)

    # -- the pooled surface ----------------------------------------------------------------

    def new_pool(
        self, max_rows: int, max_groups: int = 0, *, max_len: int | None = None, device=None, dtype=None
    ) -> KVPool:
        """Self-attention K/V for ``max_rows`` rows; cross-attention K/V live in the state."""
        if max_groups:
            raise ValueError("Moonshine Streaming keeps each row's cross-attention K/V in its state (max_groups: 0)")
        return KVPool(
            n_layers=self.cfg.num_hidden_layers,
            n_heads=self.cfg.num_attention_heads,
            head_dim=self.cfg.head_dim,
            max_rows=max_rows,
            max_len=self.cfg.max_position_embeddings if max_len is None else max_len,
            device=device if device is not None else self.embed_tokens.weight.device,
            dtype=dtype if dtype is not None else self.compute_dtype,
        )

    def prefill(
        self,
        pool: KVPool,
        inputs_embeds: torch.Tensor,
        valid: torch.Tensor,
        *,
        row0: int = 0,
        group0: int = 0,
        **_: Any,
    ) -> tuple[torch.Tensor, DecoderState]:
        """Start rows ``row0 .. row0 + B`` from ``embed_prompt``'s left-padded prompts: every
        valid position but the last is the row's (adapted) encoder memory, the last is the
        decoder start token.

        Shapes:
            inputs_embeds: (B, T, D), valid: (B, T) bool -> logits (B, V) and the state
        """
        b = inputs_embeds.shape[0]
        if row0 + b > pool.max_rows:
            raise ValueError(f"prefill of {b} rows at row {row0} exceeds the pool's {pool.max_rows}")
        memory, mem_mask = inputs_embeds[:, :-1], valid[:, :-1].to(device=inputs_embeds.device, dtype=torch.bool)
        h_ = self.cfg.num_attention_heads
        cross_k = torch.stack([_heads(layer.encoder_attn.k_proj(memory), h_) for layer in self.layers], dim=1)
        cross_v = torch.stack([_heads(layer.encoder_attn.v_proj(memory), h_) for layer in self.layers], dim=1)
        extras = {"cross_k": cross_k, "cross_v": cross_v, "memory_mask": mem_mask}
        positions = torch.zeros(b, 1, dtype=torch.long, device=inputs_embeds.device)

        def self_attend(li: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            pool.k[li, row0 : row0 + b, :, :1] = k
            pool.v[li, row0 : row0 + b, :, :1] = v
            return attention(q, k, v)

        x = self._layers(inputs_embeds[:, -1:], positions, self_attend, extras)
        ones = torch.ones(b, dtype=torch.long, device=inputs_embeds.device)
        state = DecoderState(
            pool=pool,
            row0=row0,
            group0=0,
            n_groups=0,
            lengths=[1] * b,
            lengths_t=ones,
            row_group=[0] * b,
            extras=extras,
        )
        return self.logits(x[:, 0]), state

    def step(self, state: DecoderState, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row at each row's own position. (n,) -> logits (n, V)"""
        n = state.n_rows
        if n == 0:
            return torch.empty(0, self.cfg.vocab_size, device=tokens.device)
        if state.max_length >= self.cfg.max_position_embeddings:
            raise ValueError(f"decoder context of {self.cfg.max_position_embeddings} tokens exhausted")
        pool, row0, positions = state.pool, state.row0, state.lengths_t
        extent = state.max_length + 1
        rows = torch.arange(n, device=tokens.device)
        key_mask = (torch.arange(extent, device=tokens.device)[None, :] <= positions[:, None])[:, None, None, :]

        def self_attend(li: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            kc, vc = pool.k[li, row0 : row0 + n], pool.v[li, row0 : row0 + n]
            kc[rows, :, positions] = k[:, :, 0]
            vc[rows, :, positions] = v[:, :, 0]
            return attention(q, kc[:, :, :extent], vc[:, :, :extent], mask=key_mask)

        x = self._layers(self.embed_tokens(tokens)[:, None], positions[:, None], self_attend, state.extras)
        state.advance()
        return self.logits(x[:, 0])

    def merge(self, a: DecoderState, b: DecoderState) -> DecoderState:
        """``BaseDecoder.merge``, the two states' memories padded to one length first."""
        if a.extras and b.extras:
            t = max(a.extras["memory_mask"].shape[1], b.extras["memory_mask"].shape[1])
            a.extras, b.extras = _pad_memory(a.extras, t), _pad_memory(b.extras, t)
        return super().merge(a, b)


def _pad_memory(extras: dict, t: int) -> dict:
    """Cross-attention extras with the memory axis padded (masked) to ``t`` frames."""
    pad = t - extras["memory_mask"].shape[1]
    if pad == 0:
        return extras
    return {
        "cross_k": F.pad(extras["cross_k"], (0, 0, 0, pad)),
        "cross_v": F.pad(extras["cross_v"], (0, 0, 0, pad)),
        "memory_mask": F.pad(extras["memory_mask"], (0, pad), value=False),
    }


# ---------------------------------------------------------------------------
# The public model


class MoonshineStreamingModel(BaseAsrModel):
    """Moonshine Streaming (English), decoded by the ``llm`` strategy (see the module notes)."""

    architecture = "moonshine_streaming"
    capabilities = frozenset({DecodeType.LLM})
    config_class = MoonshineStreamingConfig

    def __init__(self, config: MoonshineStreamingConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        self.encoder = MoonshineStreamingEncoder(self.config)
        self.decoder = MoonshineStreamingDecoder(self.config)

    def encode_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S, 1) waveform frames (the ``moonshine_waveform`` front end) ->
        (B, T, D_enc) states, (B,) valid frames."""
        return self.encoder(feats[..., 0], feat_lens.to(feats.device))

    def encode_chunk(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, states: list, final: list[bool] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, list]:
        """``BaseAsrModel.encode_chunk``, told which streams end with this window."""
        return self.encoder.streaming_forward(feats, feat_lens, states, final)

    @property
    def languages(self) -> tuple[str, ...]:
        return ("en",)

    def default_token_budget(self, duration_s: float) -> int:
        """New tokens a request may write by default: transformers' Moonshine recipe
        ``max_length = int(6.5 * seconds)`` (start token included), at least one."""
        return max(int(duration_s * TOKENS_PER_SECOND) - 1, 1)

    # -- what the llm strategy asks of a speech model ------------------------------------

    def prompt_ids(
        self, n_audio: int, *, language: str | None = None, context: str | None = None, task: str = "transcribe"
    ) -> list[int]:
        """One placeholder per encoder frame, then the decoder start token.

        Raises:
            ValueError: a context (the model takes no text prompt), a task other than
                transcription, or no audio frame.
        """
        if context:
            raise ValueError("context: Moonshine Streaming takes no text prompt")
        if task != "transcribe":
            raise ValueError(f"task={task!r}: Moonshine Streaming only transcribes")
        if n_audio < 1:
            raise ValueError("the audio is too short for one encoder frame (at least 80 samples)")
        return [self.config.pad_token_id] * n_audio + [self.config.decoder_start_token_id]

    def embed_prompt(
        self, ids: torch.Tensor, valid: torch.Tensor, audio_states: torch.Tensor, n_audio: torch.Tensor
    ) -> torch.Tensor:
        """The adapted encoder states in each row's placeholder places and the start token's
        embedding last (what ``decoder.prefill`` reads).

        Shapes:
            ids, valid: (B, T) left-padded; audio_states: (B, N_max, D_enc); n_audio: (B,) -> (B, T, D)
        """
        x = self.decoder.embed_tokens(ids)
        memory = self.decoder.adapt(audio_states).to(x.dtype)
        t = ids.shape[1]
        for i, n in enumerate(int(v) for v in n_audio.tolist()):
            x[i, t - 1 - n : t - 1] = memory[i, :n]
        return x

    @property
    def stop_ids(self) -> tuple[int, ...]:
        return tuple(self.config.eos_token_ids)

    def parse_output(self, text: str) -> tuple[str | None, str]:
        """(language, transcript): English, the text as written without surrounding spaces."""
        return "en", text.strip()
