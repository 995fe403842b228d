"""Nemotron 3 Diarization (transformers' ``nemotron3_diarization``, NVIDIA's streaming Sortformer):
log-mel frames in, per-frame activity of up to ``num_speakers`` speakers (ordered by arrival) out.

    log-mel (B, T, F) -> stack 8 frames, project (no bias)          -> (B, T/8, D)   encoder frames
    per step: [speaker cache | FIFO | look-back | chunk | look-ahead] -> pre-LN transformer with
    rotary attention (positions restart at every step), final LayerNorm
    -> proj (D -> Dh) -> sub-pixel conv (kernel 3, Dh -> 8 Dh) -> (B, 8 N, Dh) -> ReLU, dense,
       ReLU, out_proj -> logits (B, 8 N, S) at the mel frame rate (10 ms)

Every step attends to the speaker cache and the FIFO queue of the encoder frames already seen
(``CacheState``): its chunk frames join the FIFO; when the FIFO overflows its oldest frames move
to the cache, and a cache over its length is compressed to the frames that best represent each
speaker (``compress_cache``: per-speaker scores, boosts, a learned silence embedding in reserved
slots). Offline a recording is cut into ``chunk_length`` chunks with look-ahead; streaming feeds
one chunk per step (``stream_step``). Both run ``run_chunks``, the same loop transformers runs.

Reads top to bottom: the encoder blocks, the head, the cache, the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from oasr.diarization.nemotron3.config import CachePolicy, Nemotron3DiarizationConfig
from oasr.layers import Conv1d, LayerNorm, Linear, LinearActivation, NeoxRotaryEmbedding, attention

# ---------------------------------------------------------------------------
# Encoder


class FeatureStacking(nn.Module):
    """``subsampling_factor`` consecutive mel frames side by side, projected to the encoder width;
    the last incomplete group is zero-padded.

    Shapes:
        feats (B, T, F) -> (B, ceil(T / k), D)
    """

    def __init__(self, cfg: Nemotron3DiarizationConfig) -> None:
        super().__init__()
        self.factor = cfg.subsampling_factor
        self.projection = Linear(cfg.subsampling_factor * cfg.num_mel_bins, cfg.hidden_size, bias=False)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        b, t, f = feats.shape
        pad = -t % self.factor
        feats = nn.functional.pad(feats, (0, 0, 0, pad))
        return self.projection(feats.reshape(b, (t + pad) // self.factor, f * self.factor))  # (B, T/k, k F)


class RotaryAttention(nn.Module):
    """Self-attention with rotary positions on the first ``rotary_dim`` channels of each head
    (NEOX halves); q / k / v without bias, ``o_proj`` with one; grouped K/V heads allowed.

    Shapes:
        x (B, N, D), cos / sin (N, rotary_dim), key_mask (B, 1, 1, N) bool or None -> (B, N, D)
    """

    def __init__(self, cfg: Nemotron3DiarizationConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=True)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, self.head_dim).transpose(1, 2)  # (B, H, N, Dh)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        r = cos.shape[-1]
        return torch.cat((NeoxRotaryEmbedding.apply_rotary(x[..., :r], cos, sin), x[..., r:]), dim=-1)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, key_mask: torch.Tensor | None
    ) -> torch.Tensor:
        q = self._rotate(self._heads(self.q_proj(x), self.n_head), cos, sin)
        k = self._rotate(self._heads(self.k_proj(x), self.n_kv), cos, sin)
        v = self._heads(self.v_proj(x), self.n_kv)
        out = attention(q, k, v, mask=key_mask, scale=self.head_dim**-0.5)  # (B, H, N, Dh)
        b, h, n, dh = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, n, h * dh))


class Mlp(nn.Module):
    """``fc2(act(fc1(x)))``. (..., D) -> (..., D)"""

    def __init__(self, cfg: Nemotron3DiarizationConfig) -> None:
        super().__init__()
        self.fc1 = LinearActivation(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act)
        self.fc2 = Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x))


class EncoderLayer(nn.Module):
    """Pre-LayerNorm block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``. (B, N, D) -> (B, N, D)"""

    def __init__(self, cfg: Nemotron3DiarizationConfig) -> None:
        super().__init__()
        self.self_attn = RotaryAttention(cfg)
        self.layer_norm1 = LayerNorm(cfg.hidden_size)
        self.mlp = Mlp(cfg)
        self.layer_norm2 = LayerNorm(cfg.hidden_size)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, key_mask: torch.Tensor | None
    ) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x), cos, sin, key_mask)
        return x + self.mlp(self.layer_norm2(x))


class AudioTower(nn.Module):
    """The feature stacking and the transformer encoder (transformers' ``audio_tower``)."""

    def __init__(self, cfg: Nemotron3DiarizationConfig) -> None:
        super().__init__()
        self.embedder = FeatureStacking(cfg)
        self.input_layer_norm = LayerNorm(cfg.hidden_size)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_layers))
        self.layer_norm = LayerNorm(cfg.hidden_size)
        self.rotary = NeoxRotaryEmbedding(int(cfg.head_dim * cfg.partial_rotary_factor), base=cfg.rope_theta)

    def encode(self, embeds: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """One step's encoder input -> its encoder states; positions 0.. over the whole input.

        Shapes:
            embeds (B, N, D), mask (B, N) bool (False: padding, never attended to) or None -> (B, N, D)
        """
        cos, sin = self.rotary.cos_sin(torch.arange(embeds.shape[1], device=embeds.device), embeds.dtype)
        key_mask = None if mask is None else mask[:, None, None, :]
        x = self.input_layer_norm(embeds)
        for layer in self.layers:
            x = layer(x, cos, sin, key_mask)
        return self.layer_norm(x)


# ---------------------------------------------------------------------------
# Head


class SubpixelUpsampler(nn.Module):
    """A kernel-3 convolution to ``k`` times the channels, unfolded to ``k`` frames each.

    Shapes:
        x (B, N, Dh) -> (B, k N, Dh)
    """

    def __init__(self, cfg: Nemotron3DiarizationConfig) -> None:
        super().__init__()
        self.factor = cfg.subsampling_factor
        self.conv = Conv1d(cfg.head_hidden_size, cfg.head_hidden_size * cfg.subsampling_factor, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        return self.conv(x.transpose(1, 2)).transpose(1, 2).reshape(b, n * self.factor, d)


class Classifier(nn.Module):
    """``out_proj(relu(dense(relu(x))))``. (..., Dh) -> (..., S)"""

    def __init__(self, cfg: Nemotron3DiarizationConfig) -> None:
        super().__init__()
        self.dense = Linear(cfg.head_hidden_size, cfg.head_hidden_size)
        self.out_proj = Linear(cfg.head_hidden_size, cfg.num_speakers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(torch.relu(self.dense(torch.relu(x))))


class Body(nn.Module):
    """The audio tower, the projection to the head width and the upsampler (transformers' ``model``)."""

    def __init__(self, cfg: Nemotron3DiarizationConfig) -> None:
        super().__init__()
        self.audio_tower = AudioTower(cfg)
        self.proj = Linear(cfg.hidden_size, cfg.head_hidden_size)
        self.upsampler = SubpixelUpsampler(cfg)


# ---------------------------------------------------------------------------
# The speaker cache and the FIFO queue


@dataclass(frozen=True)
class CacheState:
    """The streaming state of a batch of streams: the encoder frames every step attends to.

    Attributes:
        cache: the speaker cache's frames (B, C, D), C <= ``cache_length``.
        cache_probs: their speaker probabilities (B, C, S), kept once the cache is compressed.
        fifo: the most recent chunk frames (B, F, D), F <= ``fifo_length``.
        compressed: whether the cache has been compressed (its frames are then out of order).
    """

    cache: torch.Tensor
    cache_probs: torch.Tensor
    fifo: torch.Tensor
    compressed: bool = False

    @classmethod
    def empty(cls, batch: int, hidden: int, speakers: int, like: torch.Tensor) -> CacheState:
        return cls(
            like.new_zeros(batch, 0, hidden), like.new_zeros(batch, 0, speakers), like.new_zeros(batch, 0, hidden)
        )

    @property
    def frames(self) -> torch.Tensor:
        """Cache then FIFO frames, the start of every step's input. (B, C + F, D)"""
        return torch.cat((self.cache, self.fifo), dim=1)


def frame_scores(probs: torch.Tensor, policy: CachePolicy) -> torch.Tensor:
    """How well each frame represents each speaker: the log-odds of the speaker against the
    others, -inf where the speaker is silent, and where a frame is overlapped speech (a
    non-positive score) of a speaker that has enough positively scored frames.

    Shapes:
        probs (B, N, S) -> (B, N, S)
    """
    floor = policy.prediction_score_threshold
    log_p = torch.log(probs.clamp(min=floor))
    log_q = torch.log((1.0 - probs).clamp(min=floor))
    scores = log_p - log_q + log_q.sum(dim=-1, keepdim=True) - math.log(0.5)
    speech = probs > 0.5
    scores = scores.masked_fill(~speech, float("-inf"))
    positive = scores > 0
    budget = policy.cache_length // policy.num_speakers - policy.silence_frames
    enough = positive.sum(dim=1, keepdim=True) >= math.floor(budget * policy.min_positive_scores_rate)
    return scores.masked_fill(~positive & speech & enough, float("-inf"))


def _boost(scores: torch.Tensor, count: int, boost: float) -> torch.Tensor:
    """``boost`` added to each speaker's ``count`` best frames. (B, N, S) -> (B, N, S)"""
    _, best = torch.topk(scores, count, dim=1, sorted=False)
    return scores.scatter_add(1, best, scores.new_full(best.shape, boost))


def compress_cache(
    embeds: torch.Tensor, probs: torch.Tensor, silence: torch.Tensor, policy: CachePolicy
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``cache_length`` frames that best represent the speakers, grouped by speaker (in
    arrival order) and in time order within a speaker; each speaker's ``silence_frames`` reserved
    slots, and any slot no frame scores for, hold the silence embedding (with zero probabilities).

    The newest frames (past ``cache_length``) get a small bonus; each speaker's best
    ``strong_boost_rate`` and ``weak_boost_rate`` shares of its budget get the bonuses that keep
    every speaker represented and none dominant.

    Shapes:
        embeds (B, N, D), probs (B, N, S), silence (D,) -> (B, L, D), (B, L, S), L = cache_length
    """
    b, n, s = probs.shape
    length = policy.cache_length
    budget = length // s - policy.silence_frames
    scores = frame_scores(probs, policy)
    scores[:, length:] += policy.latest_frames_score_boost
    scores = _boost(scores, math.floor(budget * policy.strong_boost_rate), -2.0 * math.log(0.5))
    scores = _boost(scores, math.floor(budget * policy.weak_boost_rate), -math.log(0.5))
    scores = nn.functional.pad(scores, (0, 0, 0, policy.silence_frames), value=float("inf"))  # silence slots
    scored = n + policy.silence_frames
    embeds = torch.cat((embeds, silence.to(embeds).view(1, 1, -1).expand(b, 1, -1)), dim=1)  # frame n: silence
    probs = nn.functional.pad(probs, (0, 0, 0, 1))
    flat = scores.transpose(1, 2).reshape(b, s * scored)  # speaker-major: index = speaker * scored + frame
    top, index = torch.topk(flat, length, dim=1, sorted=False)
    sentinel = s * scored
    index, _ = torch.sort(index.masked_fill(top == float("-inf"), sentinel), dim=1)
    frame = torch.where(index == sentinel, n, (index % scored).clamp(max=n))  # (B, L)
    rows = torch.arange(b, device=probs.device)[:, None]
    return embeds[rows, frame], probs[rows, frame]


def update_cache(
    state: CacheState,
    step_embeds: torch.Tensor,
    step_logits: torch.Tensor,
    silence: torch.Tensor,
    policy: CachePolicy,
    *,
    chunk_frames: int,
    lookback_frames: int,
    mask: torch.Tensor | None,
) -> CacheState:
    """The state after a step: the chunk's frames join the FIFO; on overflow at least
    ``update_period`` of its oldest frames move to the cache, which is compressed when over its
    length. The probabilities of a frame are the step's sigmoid averaged over its mel frames
    (zero on padding); an uncompressed cache takes this step's, a compressed one keeps its own.

    Shapes:
        step_embeds (B, N, D): the step's input (cache, FIFO, look-back, chunk, look-ahead);
        step_logits (B, k N, S); mask (B, N) bool or None
    """
    k = policy.subsampling_factor
    probs = nn.functional.avg_pool1d(step_logits.sigmoid().transpose(1, 2), k, k).transpose(1, 2)  # (B, N, S)
    if mask is not None:
        probs = probs * mask.to(probs.dtype)[..., None]
    n_cache, n_fifo = state.cache.shape[1], state.fifo.shape[1]
    start = n_cache + n_fifo + lookback_frames
    fifo = torch.cat((state.fifo, step_embeds[:, start : start + chunk_frames]), dim=1)
    total = fifo.shape[1]
    if total <= policy.fifo_length:
        return CacheState(state.cache, state.cache_probs, fifo, state.compressed)
    popped = min(max(policy.update_period, total - policy.fifo_length), total)
    fifo_probs = torch.cat((probs[:, n_cache : n_cache + n_fifo], probs[:, start : start + chunk_frames]), dim=1)
    kept_probs = state.cache_probs if state.compressed else probs[:, :n_cache]
    cache = torch.cat((state.cache, fifo[:, :popped]), dim=1)
    cache_probs = torch.cat((kept_probs, fifo_probs[:, :popped]), dim=1)
    compressed = state.compressed
    if cache.shape[1] > policy.cache_length:
        cache, cache_probs = compress_cache(cache, cache_probs, silence, policy)
        compressed = True
    return CacheState(cache, cache_probs, fifo[:, popped:], compressed)


# ---------------------------------------------------------------------------
# The model


def _after_cached(flags: torch.Tensor | None, span: tuple[int, int, int]) -> torch.Tensor | None:
    """Per-frame flags of a step's input: True for its ``span[0]`` cached frames, then ``flags``'
    frames ``span[1]:span[2]``. (B, N) -> (B, cached + span) or None"""
    if flags is None:
        return None
    cached, lo, hi = span
    return torch.cat((flags.new_ones(flags.shape[0], cached), flags[:, lo:hi]), dim=1)


class Nemotron3DiarizationModel(nn.Module):
    """The diarizer under transformers' parameter names (``model.audio_tower.*``, ``model.proj``,
    ``model.upsampler.conv``, ``classifier.*``, ``silence_embeds``)."""

    def __init__(self, cfg: Nemotron3DiarizationConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Body(cfg)
        self.classifier = Classifier(cfg)
        self.silence_embeds = nn.Parameter(torch.zeros(cfg.hidden_size))

    def embed(self, feats: torch.Tensor) -> torch.Tensor:
        """Encoder input frames of log-mel frames. (B, T, F) -> (B, ceil(T / k), D)"""
        return self.model.audio_tower.embedder(feats)

    def step(self, embeds: torch.Tensor, mask: torch.Tensor | None, present: torch.Tensor | None) -> torch.Tensor:
        """One step's logits at the mel frame rate.

        Args:
            embeds: the step's input frames (B, N, D).
            mask: (B, N) frames that may be attended to, or None for all.
            present: (B, N) frames that exist for the row: False only past a row's own end in a
                padded batch, zeroed before the upsampler's convolution so that the row's last
                frames see what they see alone (the convolution's zero padding). None: all.

        Returns:
            (B, k N, S) logits.
        """
        h = self.model.proj(self.model.audio_tower.encode(embeds, mask))  # (B, N, Dh)
        if present is not None:
            h = h * present.to(h.dtype)[..., None]
        return self.classifier(self.model.upsampler(h))

    def empty_state(self, batch: int, like: torch.Tensor) -> CacheState:
        return CacheState.empty(batch, self.cfg.hidden_size, self.cfg.num_speakers, like)

    def run_chunks(
        self,
        embeds: torch.Tensor,
        state: CacheState,
        policy: CachePolicy,
        *,
        start: int,
        end: int,
        chunk_length: int,
        left_context: int,
        right_context: int,
        mask: torch.Tensor | None = None,
        present: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, CacheState]:
        """Logits of the encoder frames ``start:end`` of ``embeds``, chunk by chunk: each chunk
        takes up to ``left_context`` frames before it and ``right_context`` after it from
        ``embeds`` and is scored after the cache and FIFO frames of ``state``.

        Shapes:
            embeds (B, N, D), mask / present (B, N) bool or None -> logits (B, k (end - start), S)
        """
        k = self.cfg.subsampling_factor
        n = embeds.shape[1]
        out = []
        for s in range(start, end, chunk_length):
            e = min(s + chunk_length, end)
            first = max(s - left_context, 0)
            chunk = embeds[:, first : min(e + right_context, n)]
            cached = state.frames
            step_in = torch.cat((cached, chunk), dim=1)  # (B, C + F + look-back + chunk + look-ahead, D)

            span = (cached.shape[1], first, first + chunk.shape[1])
            step_mask = _after_cached(mask, span)
            logits = self.step(step_in, step_mask, _after_cached(present, span))
            state = update_cache(
                state,
                step_in,
                logits,
                self.silence_embeds,
                policy,
                chunk_frames=e - s,
                lookback_frames=s - first,
                mask=step_mask,
            )
            lo = (cached.shape[1] + s - first) * k
            out.append(logits[:, lo : lo + (e - s) * k])
        return torch.cat(out, dim=1), state

    def forward_offline(self, feats: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """Logits of whole recordings, chunked as the checkpoint's offline mode chunks them.

        Args:
            feats: (B, T, F) log-mel frames, zero past each row's frames.
            frames: (B,) each row's valid frames, ``< T`` (transformers' feature extractor gives
                one frame more than it counts valid; the caller keeps it, as zeros).

        Returns:
            (B, T, S) logits; those past a row's valid frames mean nothing.
        """
        cfg = self.cfg
        k = cfg.subsampling_factor
        embeds = self.embed(feats)
        n = embeds.shape[1]
        frames = frames.to(device=feats.device, dtype=torch.long)
        valid = torch.arange(feats.shape[1], device=feats.device)[None, :] < frames[:, None]  # (B, T)
        mask = valid[:, ::k]  # an encoder frame is valid when its first mel frame is
        own = -(-(frames + 1) // k)  # a row's encoder frames alone: its frames and the extra one
        present = torch.arange(n, device=feats.device)[None, :] < own[:, None]
        logits, _ = self.run_chunks(
            embeds,
            self.empty_state(feats.shape[0], embeds),
            cfg.offline,
            start=0,
            end=n,
            chunk_length=cfg.chunk_length,
            left_context=cfg.chunk_left_context,
            right_context=cfg.chunk_right_context,
            mask=mask,
            present=None if bool(present.all()) else present,
        )
        return logits[:, : feats.shape[1]]

    def stream_step(
        self, feats: torch.Tensor, state: CacheState | None, lookahead: int
    ) -> tuple[torch.Tensor, CacheState]:
        """One streaming step: ``feats`` is a chunk and its ``lookahead`` trailing encoder frames
        (which open the next chunk), scored after ``state``'s frames (None: a new stream).

        Shapes:
            feats (B, T, F) -> logits (B, T - k lookahead, S) (the last step: T, lookahead 0)
        """
        embeds = self.embed(feats)
        end = embeds.shape[1] - lookahead
        if end < 1:
            raise ValueError(f"a streaming step needs a chunk frame besides its {lookahead} look-ahead frames")
        if state is None:
            state = self.empty_state(feats.shape[0], embeds)
        logits, state = self.run_chunks(
            embeds,
            state,
            self.cfg.streaming,
            start=0,
            end=end,
            chunk_length=end,
            left_context=0,
            right_context=lookahead,
        )
        return logits[:, : feats.shape[1]], state
