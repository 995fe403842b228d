"""The shared decoder-only causal LM of the speech-LLM families (Qwen2, Qwen3 and Granite).

One module covers both generations through config flags: Qwen2 has biased q/k/v
projections; Qwen3 normalises each query and key head (RMSNorm over the head
width) before the rotary embedding and may carry an explicit ``head_dim``. Both
use grouped-query attention, NEOX rotary positions, a SwiGLU MLP and pre-norm
RMSNorm residual streams. Granite (a Llama geometry) adds three scalings, set through
the config by its family: embedding, attention score and residual.

Module names mirror Hugging Face's ``Qwen2Model`` / ``Qwen3Model`` (``embed_tokens``,
``layers.N.self_attn.{q,k,v,o}_proj``, ``layers.N.mlp.{gate,up,down}_proj``, ...), so
a family maps its checkpoint's language-model prefix onto this module and the rest
of each name carries over unchanged.

Prompts arrive left-padded (the speech prompt is built per request, so lengths
differ). Each row's positions are ``cumsum(valid) - 1``; in the pool a row's K/V is
stored compactly from slot 0 (the padding is dropped at prefill), so slot index ==
position and ``step`` writes every row's new K/V at its own length.

Reads top to bottom: config, attention, MLP, layer, the LM (dense forward for
parity, then prefill / step over the pool).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from oasr.languages import resolve_language
from oasr.layers import Embedding, Linear, LinearActivation, NeoxRotaryEmbedding, RMSNorm, attention
from oasr.layers.embedding import table_logits
from oasr.models.configs import ModelConfig
from oasr.models.decoders.base import RowPoolDecoder
from oasr.models.decoders.kv_pool import DecoderState, KVPool, PoolExhausted, RowGroups
from oasr.specs import DecodeType

# Hugging Face's Qwen2Config / Qwen3Config defaults: what an omitted text_config field means.
_QWEN2_DEFAULTS: dict[str, Any] = {
    "vocab_size": 151936,
    "hidden_size": 4096,
    "intermediate_size": 22016,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": None,  # None -> num_attention_heads
    "head_dim": None,  # None -> hidden_size // num_attention_heads
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}
_QWEN3_DEFAULTS: dict[str, Any] = {**_QWEN2_DEFAULTS, "head_dim": 128, "attention_bias": False}


@dataclass
class CausalLmConfig(ModelConfig):
    """Geometry of a Qwen2 / Qwen3 causal LM. Defaults are Hugging Face's Qwen2 defaults.

    Attributes:
        vocab_size, hidden_size, intermediate_size, num_hidden_layers: the usual.
        num_attention_heads: query heads; num_key_value_heads: K/V heads (GQA when fewer).
        head_dim: per-head width; None means ``hidden_size // num_attention_heads``.
        rms_norm_eps: epsilon of every RMSNorm (layer norms and the QK norms).
        rope_theta: rotary base.
        max_position_embeddings: the context (default ``max_len`` of a new pool).
        tie_word_embeddings: logits through the token embedding (no ``lm_head``).
        attention_bias: q/k/v projections carry a bias (Qwen2: always).
        o_proj_bias: the output projection carries a bias (Qwen3 with ``attention_bias``).
        qk_norm: per-head RMSNorm on queries and keys before the rotary embedding (Qwen3).
        hidden_act: activation of the gate projection ("silu" for both generations).
        mlp_bias: the MLP projections carry a bias (Granite's ``mlp_bias``).
        embedding_multiplier / residual_multiplier: Granite's scalings (input embeddings times
            the first, each sub-layer's output times the second before its residual add); 1.0
            for Qwen.
        attention_multiplier: the attention score scale (Granite's); None: ``head_dim ** -0.5``.
    """

    vocab_size: int = 151936
    hidden_size: int = 4096
    intermediate_size: int = 22016
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = 32
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = False
    attention_bias: bool = True
    o_proj_bias: bool = False
    qk_norm: bool = False
    hidden_act: str = "silu"
    mlp_bias: bool = False
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    attention_multiplier: float | None = None

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )

    @classmethod
    def from_hf(
        cls, text_config: Mapping[str, Any], *, model_type: str | None = None, defaults: Mapping[str, Any] | None = None
    ) -> CausalLmConfig:
        """Read a Hugging Face Qwen2 / Qwen3 ``text_config`` dict.

        Omitted fields take Hugging Face's ``Qwen2Config`` (or ``Qwen3Config``) defaults,
        as transformers itself fills them (a published Qwen2-Audio config relies on this).

        Args:
            text_config: the config dict (extra keys are ignored).
            model_type: "qwen2" or "qwen3" family; default the dict's ``model_type``,
                else "qwen2". Any type starting with "qwen3" reads as Qwen3.
            defaults: family-specific defaults for omitted fields that override the
                Qwen2/Qwen3 ones (e.g. a wrapper's sub-config init kwargs).

        Raises:
            ValueError: a feature this LM does not implement (sliding-window attention,
                scaled RoPE, another activation).
        """
        d = dict(text_config)
        kind = str(model_type or d.get("model_type") or "qwen2").lower()
        if kind.startswith("qwen3"):
            qwen3 = True
        elif kind.startswith("qwen2"):
            qwen3 = False
        else:
            raise ValueError(f"CausalLmConfig.from_hf reads Qwen2 / Qwen3 text configs, got model_type={kind!r}")
        base = dict(_QWEN3_DEFAULTS if qwen3 else _QWEN2_DEFAULTS)
        base.update(defaults or {})

        def get(key: str) -> Any:
            value = d.get(key)
            return base.get(key) if value is None else value

        if d.get("use_sliding_window"):
            raise ValueError("sliding-window attention (use_sliding_window=true) is not supported")
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, Mapping) else "default"
        if rope_type not in (None, "default"):
            # An mrope_section with rope_type "default" is accepted: speech prompts give the
            # three multimodal axes the same position, which is plain 1-D RoPE.
            raise ValueError(f"RoPE scaling {rope_type!r} is not supported (only the default rotary embedding)")
        theta = d.get("rope_theta")
        if theta is None and isinstance(rope, Mapping):
            theta = rope.get("rope_theta")
        act = get("hidden_act")
        if act != "silu":
            raise ValueError(f"hidden_act={act!r} is not supported (Qwen2/Qwen3 use silu)")
        heads = int(get("num_attention_heads"))
        kv = get("num_key_value_heads")
        attention_bias = bool(get("attention_bias")) if qwen3 else True
        return cls(
            vocab_size=int(get("vocab_size")),
            hidden_size=int(get("hidden_size")),
            intermediate_size=int(get("intermediate_size")),
            num_hidden_layers=int(get("num_hidden_layers")),
            num_attention_heads=heads,
            num_key_value_heads=heads if kv is None else int(kv),
            head_dim=None if get("head_dim") is None else int(get("head_dim")),
            rms_norm_eps=float(get("rms_norm_eps")),
            rope_theta=float(base["rope_theta"] if theta is None else theta),
            max_position_embeddings=int(get("max_position_embeddings")),
            tie_word_embeddings=bool(get("tie_word_embeddings")),
            attention_bias=attention_bias,
            o_proj_bias=attention_bias if qwen3 else False,
            qk_norm=qwen3,
            hidden_act="silu",
        )


class CausalLmAttention(nn.Module):
    """Grouped-query self-attention projections (+ the Qwen3 per-head QK norms).

    Shapes:
        project: x (B, T, D), cos / sin (B, T, Dh) -> q (B, H, T, Dh), k / v (B, Hkv, T, Dh)
        merge: (B, H, T, Dh) -> (B, T, D)
    """

    def __init__(self, cfg: CausalLmConfig) -> None:
        super().__init__()
        d, hd = cfg.hidden_size, cfg.resolved_head_dim
        self.n_head, self.n_kv_head, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, hd
        self.q_proj = Linear(d, self.n_head * hd, bias=cfg.attention_bias)
        self.k_proj = Linear(d, self.n_kv_head * hd, bias=cfg.attention_bias)
        self.v_proj = Linear(d, self.n_kv_head * hd, bias=cfg.attention_bias)
        self.o_proj = Linear(self.n_head * hd, d, bias=cfg.o_proj_bias)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def project(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_head, self.head_dim)
        k = self.k_proj(x).view(b, t, self.n_kv_head, self.head_dim)
        v = self.v_proj(x).view(b, t, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, Hkv, T, Dh)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = NeoxRotaryEmbedding.apply_rotary(q.transpose(1, 2), cos, sin)  # (B, H, T, Dh)
        k = NeoxRotaryEmbedding.apply_rotary(k.transpose(1, 2), cos, sin)  # (B, Hkv, T, Dh)
        return q, k, v

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        b, h, t, dh = x.shape
        return self.o_proj(x.transpose(1, 2).reshape(b, t, h * dh))


class CausalLmMlp(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))`` (the activation rides the gate GEMM).

    Shapes:
        x: (..., D) -> (..., D)
    """

    def __init__(self, cfg: CausalLmConfig) -> None:
        super().__init__()
        b = cfg.mlp_bias
        self.gate_proj = LinearActivation(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act, bias=b)
        self.up_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=b)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, bias=b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.gate_proj(x) * self.up_proj(x))


class CausalLmLayer(nn.Module):
    def __init__(self, cfg: CausalLmConfig) -> None:
        super().__init__()
        self.self_attn = CausalLmAttention(cfg)
        self.mlp = CausalLmMlp(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


# A layer's attention given its projected (q, k, v): returns the attention output (B, H, T, Dh).
_AttendFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class CausalLm(RowPoolDecoder):
    """Qwen2 / Qwen3 decoder-only LM over a per-row K/V pool.

    Dense entry points: ``embed`` (ids -> embeddings), ``forward_hidden`` (a left-padded
    batch -> final-norm hidden states) and ``logits``. Incremental: ``new_pool`` /
    ``prefill`` (left-padded prompt embeddings) / ``step`` / ``select`` / ``merge``.
    """

    supports_paged_kv = True
    supports_step_graphs = True

    def __init__(self, cfg: CausalLmConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(CausalLmLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = None if cfg.tie_word_embeddings else Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.rotary = NeoxRotaryEmbedding(cfg.resolved_head_dim, cfg.rope_theta)
        # An int8 copy of the tied embedding for ``logits``, set by int8 quantization.
        self.tied_head: nn.Module | None = None
        # An id embedded as id 0's row wherever it appears, generated tokens included (Granite
        # Speech's ``<|audio|>``, as transformers embeds it); None: every id its own row.
        self.embed_as_zero: int | None = None

    # -- pieces ---------------------------------------------------------------------

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings. (B, T) -> (B, T, D)"""
        if self.embed_as_zero is not None:
            ids = ids.masked_fill(ids == self.embed_as_zero, 0)
        return self.embed_tokens(ids)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., D) final-norm hidden states -> (..., V) in the model dtype."""
        if self.lm_head is None:
            if self.tied_head is not None:
                return self.tied_head(hidden)
            return self.embed_tokens.logits(hidden)
        if type(self.lm_head) is Linear:  # float: the few-rows form; an int8 head runs its own kernel
            return table_logits(hidden, self.lm_head.weight)
        return self.lm_head(hidden)

    def _logits_out(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits for sampling: float32 (float64 stays float64)."""
        logits = self.logits(hidden)
        return logits.float() if logits.element_size() < 4 else logits

    def _layers(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: _AttendFn) -> torch.Tensor:
        """The layer stack and the final norm; ``attend(li, q, k, v)`` does each layer's attention.

        Shapes:
            x: (B, T, D), cos / sin: (B, T, Dh) -> (B, T, D)
        """
        emb, res = self.cfg.embedding_multiplier, self.cfg.residual_multiplier
        if emb != 1.0:
            x = x * emb
        h = self.layers[0].input_layernorm(x) if len(self.layers) else x
        for li, layer in enumerate(self.layers):
            att = layer.self_attn
            q, k, v = att.project(h, cos, sin)
            a = att.merge(attend(li, q, k, v))
            h, x = layer.post_attention_layernorm.add_forward(a if res == 1.0 else a * res, x)
            m = layer.mlp(h)
            if res != 1.0:
                m = m * res
            if li + 1 < len(self.layers):
                h, x = self.layers[li + 1].input_layernorm.add_forward(m, x)
            else:
                x = x + m
        return self.norm(x)

    @staticmethod
    def _check_left_padded(valid: torch.Tensor) -> torch.Tensor:
        """Per-row lengths of a left-padded ``valid`` mask (B, T); refuses any other layout."""
        valid = valid.to(torch.bool)
        lens = valid.sum(1)
        t = valid.shape[1]
        expected = torch.arange(t, device=valid.device)[None, :] >= (t - lens)[:, None]
        if not torch.equal(valid, expected):
            raise ValueError("valid must mark a left-padded batch (each row's tokens are a suffix)")
        if bool((lens == 0).any()):
            raise ValueError("every row needs at least one valid position")
        return lens

    def _dense_attention(self, valid: torch.Tensor) -> Callable[..., torch.Tensor]:
        """Causal attention over a left-padded batch: without padding, SDPA's own causal
        path (no (T, T) mask, so the fused kernels apply); else the explicit mask."""
        if bool(valid.all()):
            return lambda q, k, v: attention(q, k, v, is_causal=True, scale=self.cfg.attention_multiplier)
        mask = self._prompt_mask(valid)
        return lambda q, k, v: attention(q, k, v, mask=mask, scale=self.cfg.attention_multiplier)

    def _prompt_mask(self, valid: torch.Tensor) -> torch.Tensor:
        """Causal "may attend" mask over a left-padded batch: valid keys at or before the
        query. A padding query attends to itself only, so its (unused) state stays finite
        and cannot leak NaN into the valid rows through the values.

        Shapes:
            valid: (B, T) bool -> (B, 1, T, T)
        """
        t = valid.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=valid.device).tril()
        eye = torch.eye(t, dtype=torch.bool, device=valid.device)
        return ((causal[None] & valid[:, None, :]) | eye[None])[:, None]

    # -- dense forward (no pool) ----------------------------------------------------------

    def forward_hidden(self, inputs_embeds: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """All positions of a left-padded batch through the LM, without a cache.

        Args:
            inputs_embeds: (B, T, D) left-padded embeddings.
            valid: (B, T) bool, True on real positions (a suffix of each row).

        Returns:
            (B, T, D) hidden states after the final norm (padding positions are junk).
        """
        valid = valid.to(device=inputs_embeds.device, dtype=torch.bool)
        self._check_left_padded(valid)
        positions = (valid.long().cumsum(1) - 1).clamp(min=0)
        cos, sin = self.rotary.cos_sin(positions, inputs_embeds.dtype)
        attend = self._dense_attention(valid)
        return self._layers(inputs_embeds, cos, sin, lambda li, q, k, v: attend(q, k, v))

    def forward(self, inputs_embeds: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Logits at every position of a left-padded batch. (B, T, D), (B, T) -> (B, T, V)"""
        return self.logits(self.forward_hidden(inputs_embeds, valid))

    # -- incremental surface ---------------------------------------------------------------

    def pool_geometry(self) -> tuple[int, int, int, int]:
        cfg = self.cfg
        return cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.resolved_head_dim, cfg.max_position_embeddings

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
        """Run left-padded prompts, writing their K/V into rows ``row0..row0+B`` of ``pool``.

        Each row's K/V is stored compactly from slot 0 (its padding dropped), at
        positions ``cumsum(valid) - 1``.

        Args:
            pool: from ``new_pool``.
            inputs_embeds: (B, T, D) left-padded prompt embeddings.
            valid: (B, T) bool, True on real positions (a suffix of each row).
            row0: first pool row to write.

        Returns:
            logits at each row's last position (B, V) (float32; float64 for a float64
            model), and the state (``lengths`` = prompt lengths).
        """
        if group0:
            raise ValueError("a decoder-only LM keeps no cross-attention groups (group0 must be 0)")
        b, t, _ = inputs_embeds.shape
        valid = valid.to(device=inputs_embeds.device, dtype=torch.bool)
        lens = self._check_left_padded(valid)
        if row0 + b > pool.max_rows:
            raise PoolExhausted(f"prefill of {b} rows at row {row0} exceeds the pool ({pool.max_rows} rows)")
        if t > pool.max_len:
            raise PoolExhausted(f"a prompt of {t} tokens exceeds the pool's {pool.max_len} tokens per row")
        positions = (valid.long().cumsum(1) - 1).clamp(min=0)
        cos, sin = self.rotary.cos_sin(positions, inputs_embeds.dtype)
        dense = self._dense_attention(valid)
        # Slot j of row i holds padded position pad_i + j: the padding is shifted out.
        pad = (t - lens)[:, None]
        gather = (torch.arange(t, device=valid.device)[None, :] + pad).clamp(max=t - 1)  # (B, T)

        def attend(li: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            idx = gather[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[-1])
            pool.k[li, row0 : row0 + b, :, :t] = k.gather(2, idx)
            pool.v[li, row0 : row0 + b, :, :t] = v.gather(2, idx)
            return dense(q, k, v)

        hidden = self._layers(inputs_embeds, cos, sin, attend)
        state = DecoderState(
            pool=pool,
            row0=row0,
            group0=0,
            n_groups=0,
            lengths=[int(x) for x in lens.tolist()],
            lengths_t=lens.to(torch.long),
            row_group=[0] * b,
        )
        return self._logits_out(hidden[:, -1]), state

    def step(self, state: DecoderState, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row at each row's own position; K/V is written in place.

        Shapes:
            tokens: (n,) ids -> logits (n, V) (float32; float64 for a float64 model)
        """
        return self.step_embeds(state, self.embed(tokens))

    def step_embeds(self, state: DecoderState, embeds: torch.Tensor) -> torch.Tensor:
        """``step`` from embeddings. (n, D) -> logits (n, V); updates ``state``."""
        n = state.n_rows
        if n == 0:
            return torch.empty(0, self.cfg.vocab_size, device=embeds.device)
        if state.max_length >= state.pool.max_len:
            raise PoolExhausted(f"a row reached the pool's {state.pool.max_len} tokens")
        positions = state.lengths_t.to(embeds.device)  # (n,) == each row's next slot
        logits = self._step(state.pool, state.row0, embeds, positions, state.max_length + 1)
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
        """``BaseDecoder.step_rows`` (``group0`` and ``groups`` are ignored: no encoder windows)."""
        return self._step(pool, row0, self.embed(tokens), positions, extent)

    def _step(self, pool: KVPool, r0: int, embeds: torch.Tensor, positions: torch.Tensor, extent: int) -> torch.Tensor:
        cos, sin = self.rotary.cos_sin(positions[:, None], embeds.dtype)  # (n, 1, Dh)
        attend = self.pooled_self_attention(pool, r0, positions, extent, scale=self.cfg.attention_multiplier)
        hidden = self._layers(embeds[:, None, :], cos, sin, attend)
        return self._logits_out(hidden[:, 0])


class PromptTokenizerMixin:
    """For a speech LLM that builds its own prompts (decoded by the ``llm`` strategy): the
    checkpoint's tokenizer, shared with the loader (``attach_tokenizer``) or loaded from
    ``config.tokenizer_path`` on first use, the prompt's embeddings with the audio spliced in
    (``embed_prompt``, through the model's ``decoder`` at its ``config.audio_token_id``
    placeholders), the request's language against the model's ``languages`` and the checks
    every prompt makes (``check_prompt_request``).

    The class sets ``family`` (named in the errors).
    """

    family: str = "this model"
    capabilities = frozenset({DecodeType.LLM})
    default_decode_type = DecodeType.LLM
    _tokenizer = None

    def resolve_language(self, language: str | None) -> str | None:
        """The ISO code of a language of the model's table (``languages``): a code (2- or
        3-letter), an English name in any case or a locale (``de-AT`` -> ``de``); None, "",
        "auto" and "none" mean detect (None).

        Raises:
            ValueError: a language outside the table, naming the supported ones.
        """
        return resolve_language(language, self.languages, model=self.family)

    def check_prompt_request(self, n_audio: int, task: str) -> None:
        """Refuse what no speech-LLM prompt serves: a task other than transcription, or no audio.

        Raises:
            ValueError: naming the task, or the count of audio placeholders.
        """
        if task != "transcribe":
            raise ValueError(f"{self.family} serves task='transcribe' only, got task={task!r}")
        if n_audio < 1:
            raise ValueError(f"n_audio must be >= 1, got {n_audio}")

    @property
    def tokenizer(self):
        """The checkpoint's tokenizer."""
        if self._tokenizer is None:
            from oasr.models.base import TokenizerSpec
            from oasr.tokenizers import load_tokenizer

            if not getattr(self.config, "tokenizer_path", None):
                raise RuntimeError(
                    f"{self.family} builds its prompt with the checkpoint's tokenizer: load the model from its "
                    "directory, or call attach_tokenizer()"
                )
            self._tokenizer = load_tokenizer(TokenizerSpec(kind="huggingface", path=self.config.tokenizer_path))
        return self._tokenizer

    def encode_audio_prompt(self, parts: Sequence[Any], n_audio: int, audio_token: str) -> list[int]:
        """``tokenizer.encode_prompt(parts)``, checked to hold ``n_audio`` audio placeholders
        (``config.audio_token_id``; ``audio_token`` is its text, named in the error).

        Raises:
            ValueError: the tokenizer does not encode ``audio_token`` as that single id.
        """
        ids = self.tokenizer.encode_prompt(parts)
        if sum(1 for i in ids if i == self.config.audio_token_id) != n_audio:
            raise ValueError(
                f"the tokenizer does not encode {audio_token} as the single id {self.config.audio_token_id}"
            )
        return ids

    def attach_tokenizer(self, tokenizer) -> None:
        """Use ``tokenizer`` (an ``oasr.tokenizers.Tokenizer``) for prompts."""
        self._tokenizer = tokenizer

    def embed_prompt(
        self, ids: torch.Tensor, valid: torch.Tensor, audio_states: torch.Tensor, n_audio: torch.Tensor
    ) -> torch.Tensor:
        """Token embeddings with each row's audio placeholders overwritten by its states.

        Shapes:
            ids: (B, T) left-padded, valid: (B, T) bool, audio_states: (B, N_max, D),
            n_audio: (B,) -> (B, T, D)

        Raises:
            ValueError: a row whose placeholder count differs from its ``n_audio``.
        """
        x = self.decoder.embed(ids)
        slots = (ids == self.config.audio_token_id) & valid.to(device=ids.device, dtype=torch.bool)  # (B, T)
        n_audio = n_audio.to(device=ids.device, dtype=torch.long)
        counts = slots.sum(dim=1)
        if not torch.equal(counts, n_audio):
            raise ValueError(f"audio placeholders per row {counts.tolist()} != audio states {n_audio.tolist()}")
        keep = torch.arange(audio_states.shape[1], device=ids.device)[None, :] < n_audio[:, None]  # (B, N_max)
        # Boolean indexing walks rows in order on both sides: row i's states fill row i's slots.
        x[slots] = audio_states.to(device=x.device, dtype=x.dtype)[keep]
        return x
