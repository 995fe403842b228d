"""Granite Speech: a conformer encoder, a Q-Former window projector and a Granite causal LM
that writes the transcript (or the translation).

    audio -> stacked log-mel (``granite_mel``) -> conformer (block-wise Shaw attention,
    depthwise convolution, a mid-encoder CTC head fed back) -> windows of ``window_size``
    frames, each read by ``window_size // downsample_rate`` Q-Former queries -> linear to
    the LM width -> spliced into the chat prompt at its ``<|audio|>`` tokens -> Granite LM

Module names mirror transformers' ``GraniteSpeechForConditionalGeneration`` for the audio
side (``encoder``, ``projector``); the LM is the shared ``CausalLm`` under ``decoder``.

transformers runs a padded batch through the encoder unmasked (a short row's last block and
convolution read the padding); here each row is masked to its own frames, so a row of a
batch equals the clip run alone.

Reads top to bottom: the conformer's modules, the encoder, the Q-Former, the projector,
then the public model with the speech-LLM surface the ``llm`` strategy drives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from oasr.languages import names_of
from oasr.layers import BatchNorm1d, Conv1d, Embedding, LayerNorm, Linear, attention
from oasr.layers.relpos_shaw import shaw_block_attention, shaw_distances
from oasr.models.base import BaseAsrModel, BaseEncoder
from oasr.models.decoders.causal_lm import CausalLm, PromptTokenizerMixin
from oasr.models.granite_speech.config import (
    AUDIO_TOKEN,
    GraniteSpeechConfig,
    GraniteSpeechEncoderConfig,
    QFormerConfig,
)
from oasr.tokenizers import Control

# ---------------------------------------------------------------------------
# Conformer


class ConformerFeedForward(nn.Module):
    """Pre-norm feed-forward: LayerNorm, up, SiLU, down. (..., D) -> (..., D)"""

    def __init__(self, cfg: GraniteSpeechEncoderConfig) -> None:
        super().__init__()
        self.pre_norm = LayerNorm(cfg.hidden_dim)
        self.up_proj = Linear(cfg.hidden_dim, cfg.hidden_dim * cfg.feedforward_mult)
        self.down_proj = Linear(cfg.hidden_dim * cfg.feedforward_mult, cfg.hidden_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.up_proj(self.pre_norm(x))))


class BlockRelativeAttention(nn.Module):
    """Self-attention inside blocks of ``context_size`` frames, with Shaw relative position
    embeddings (one learned vector per clamped distance, dotted with the query).

    Shapes:
        x: (B, T, D), lens: (B,) valid frames -> (B, T, D) (frames past a row's length are junk)
    """

    def __init__(self, cfg: GraniteSpeechEncoderConfig) -> None:
        super().__init__()
        inner = cfg.dim_head * cfg.num_heads
        self.n_head, self.dim_head, self.block = cfg.num_heads, cfg.dim_head, cfg.context_size
        self.pre_norm = LayerNorm(cfg.hidden_dim)
        self.to_q = Linear(cfg.hidden_dim, inner, bias=False)
        self.to_kv = Linear(cfg.hidden_dim, 2 * inner, bias=False)
        self.to_out = Linear(inner, cfg.hidden_dim)
        self.rel_pos_emb = Embedding(2 * cfg.max_pos_emb + 1, cfg.dim_head)
        dist = shaw_distances(cfg.context_size, cfg.max_pos_emb)
        self.register_buffer("attention_dists", dist, persistent=False)  # (C, C)

    def forward(self, x: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        x = self.pre_norm(x)
        q = self.to_q(x).view(b, t, self.n_head, -1).transpose(1, 2)  # (B, H, T, Dh)
        k, v = (y.reshape(b, t, self.n_head, -1).transpose(1, 2) for y in self.to_kv(x).chunk(2, dim=-1))
        valid = torch.arange(t, device=x.device)[None, :] < lens.to(x.device)[:, None]  # (B, T): a row's keys
        rel = self.rel_pos_emb(self.attention_dists)  # (C, C, Dh)
        out = shaw_block_attention(q, k, v, rel, self.block, valid)  # (B, H, T, Dh)
        return self.to_out(out.transpose(1, 2).reshape(b, t, -1))


class DepthwiseConv(nn.Module):
    """Depthwise 1-D convolution, padded ``(k // 2, k // 2 - (k + 1) % 2)`` (same length)."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.padding = (kernel // 2, kernel // 2 - (kernel + 1) % 2)
        self.conv = Conv1d(channels, channels, kernel, groups=channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(nn.functional.pad(x, self.padding))


class ConformerConvModule(nn.Module):
    """LayerNorm, pointwise up + GLU, depthwise conv, BatchNorm, SiLU, pointwise down.

    Frames past a row's length are zeroed before the depthwise convolution, so it reads the
    zero padding a clip alone gets.

    Shapes:
        x: (B, T, D), valid: (B, 1, T) -> (B, T, D)
    """

    def __init__(self, cfg: GraniteSpeechEncoderConfig) -> None:
        super().__init__()
        inner = cfg.hidden_dim * cfg.conv_expansion_factor
        self.norm = LayerNorm(cfg.hidden_dim)
        self.up_conv = Conv1d(cfg.hidden_dim, 2 * inner, 1)
        self.depth_conv = DepthwiseConv(inner, cfg.conv_kernel_size)
        self.batch_norm = BatchNorm1d(inner)
        self.down_conv = Conv1d(inner, cfg.hidden_dim, 1)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        y = nn.functional.glu(self.up_conv(self.norm(x).transpose(1, 2)), dim=1)  # (B, I, T)
        y = self.depth_conv(y * valid)
        y = nn.functional.silu(self.batch_norm(y))
        return self.down_conv(y).transpose(1, 2)


class ConformerBlock(nn.Module):
    """Half-step feed-forward, attention, convolution, half-step feed-forward, LayerNorm."""

    def __init__(self, cfg: GraniteSpeechEncoderConfig) -> None:
        super().__init__()
        self.ff1 = ConformerFeedForward(cfg)
        self.attn = BlockRelativeAttention(cfg)
        self.conv = ConformerConvModule(cfg)
        self.ff2 = ConformerFeedForward(cfg)
        self.post_norm = LayerNorm(cfg.hidden_dim)

    def forward(self, x: torch.Tensor, lens: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        x = 0.5 * self.ff1(x) + x
        x = self.attn(x, lens) + x
        x = self.conv(x, valid) + x
        x = 0.5 * self.ff2(x) + x
        return self.post_norm(x)


class GraniteSpeechEncoder(nn.Module):
    """Input projection, conformer blocks; after the middle block the CTC head's softmax is
    projected back and added to the stream (``out`` / ``out_mid``).

    Shapes:
        feats: (B, T, input_dim), lens: (B,) -> (B, T, hidden_dim) (junk past each length)
    """

    def __init__(self, cfg: GraniteSpeechEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_linear = Linear(cfg.input_dim, cfg.hidden_dim)
        self.layers = nn.ModuleList(ConformerBlock(cfg) for _ in range(cfg.num_layers))
        self.out = Linear(cfg.hidden_dim, cfg.output_dim)
        self.out_mid = Linear(cfg.output_dim, cfg.hidden_dim)

    def forward(self, feats: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        valid = (torch.arange(feats.shape[1], device=feats.device)[None, :] < lens[:, None])[:, None, :]
        valid = valid.to(feats.dtype)  # (B, 1, T)
        x = self.input_linear(feats)
        for i, layer in enumerate(self.layers, start=1):
            x = layer(x, lens, valid)
            if i == self.cfg.num_layers // 2:
                x = x + self.out_mid(self.out(x).softmax(dim=-1))
        return x


# ---------------------------------------------------------------------------
# Q-Former projector


class QFormerAttention(nn.Module):
    """BERT-style attention with its post-LayerNorm residual (``attention`` / ``output``)."""

    def __init__(self, cfg: QFormerConfig, kv_width: int) -> None:
        super().__init__()
        self.n_head = cfg.num_attention_heads
        self.attention = nn.Module()
        self.attention.query = Linear(cfg.hidden_size, cfg.hidden_size)
        self.attention.key = Linear(kv_width, cfg.hidden_size)
        self.attention.value = Linear(kv_width, cfg.hidden_size)
        self.output = nn.Module()
        self.output.dense = Linear(cfg.hidden_size, cfg.hidden_size)
        self.output.LayerNorm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        """x: (N, Q, D) queries, kv: (N, S, Dkv) -> (N, Q, D)"""
        att, h = self.attention, self.n_head
        q = att.query(x).unflatten(-1, (h, -1)).transpose(1, 2)  # (N, H, Q, Dh)
        k = att.key(kv).unflatten(-1, (h, -1)).transpose(1, 2)
        v = att.value(kv).unflatten(-1, (h, -1)).transpose(1, 2)
        o = attention(q, k, v).transpose(1, 2).flatten(2)
        return self.output.LayerNorm(self.output.dense(o) + x)


class QFormerLayer(nn.Module):
    def __init__(self, cfg: QFormerConfig, index: int) -> None:
        super().__init__()
        self.attention = QFormerAttention(cfg, cfg.hidden_size)
        self.crossattention = (
            QFormerAttention(cfg, cfg.encoder_hidden_size) if index % cfg.cross_attention_frequency == 0 else None
        )
        self.intermediate_query = nn.Module()
        self.intermediate_query.dense = Linear(cfg.hidden_size, cfg.intermediate_size)
        self.output_query = nn.Module()
        self.output_query.dense = Linear(cfg.intermediate_size, cfg.hidden_size)
        self.output_query.LayerNorm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, enc: torch.Tensor) -> torch.Tensor:
        x = self.attention(x, x)
        if self.crossattention is not None:
            x = self.crossattention(x, enc)
        y = nn.functional.gelu(self.intermediate_query.dense(x))
        return self.output_query.LayerNorm(self.output_query.dense(y) + x)


class QFormer(nn.Module):
    """BLIP-2's Q-Former over learned queries only (``layernorm``, ``encoder.layer.N``).

    Shapes:
        queries: (N, Q, D), enc: (N, S, D_enc) -> (N, Q, D)
    """

    def __init__(self, cfg: QFormerConfig) -> None:
        super().__init__()
        self.layernorm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(QFormerLayer(cfg, i) for i in range(cfg.num_hidden_layers))

    def forward(self, queries: torch.Tensor, enc: torch.Tensor) -> torch.Tensor:
        x = self.layernorm(queries)
        for layer in self.encoder.layer:
            x = layer(x, enc)
        return x


class WindowProjector(nn.Module):
    """Each window of ``window_size`` encoder frames (the last zero-padded) is read by the
    learned queries; their outputs, window after window, go through ``linear`` to the LM width.

    Shapes:
        enc: (B, T, D_enc) zero past each row's frames -> (B, ceil(T / W) * Q, D_lm)
    """

    def __init__(self, config: GraniteSpeechConfig) -> None:
        super().__init__()
        self.window, q = config.window_size, config.queries
        # The learned queries (transformers' ``query`` parameter, (1, Q, D), stored here as (Q, D)).
        self.query = Embedding(q, config.projector.hidden_size)
        self.qformer = QFormer(config.projector)
        self.linear = Linear(config.projector.hidden_size, config.text.hidden_size)

    def forward(self, enc: torch.Tensor) -> torch.Tensor:
        b, t, d = enc.shape
        nb = math.ceil(t / self.window)
        windows = nn.functional.pad(enc, (0, 0, 0, nb * self.window - t)).view(b * nb, self.window, d)
        queries = self.query.weight.to(enc.dtype).expand(b * nb, -1, -1)
        out = self.qformer(queries, windows)  # (B*nb, Q, Dq)
        return self.linear(out.reshape(b, nb * out.shape[1], -1))


class GraniteSpeechAudio(BaseEncoder):
    """Encoder and projector: the engine's encoder.

    Shapes:
        feats: (B, T, input_dim), feat_lens: (B,) -> states (B, N_max, D_lm), n_audio (B,)
    """

    def __init__(self, config: GraniteSpeechConfig) -> None:
        super().__init__()
        self.encoder = GraniteSpeechEncoder(config.encoder)
        self.projector = WindowProjector(config)
        self.window, self.queries = config.window_size, config.queries
        self.subsampling_rate = config.downsample_rate * 2  # mel frames per LM position
        self.output_size = config.text.hidden_size

    def output_lengths(self, feat_lens: torch.Tensor) -> torch.Tensor:
        """LM positions per row: one group of queries per (started) window."""
        return (feat_lens + self.window - 1) // self.window * self.queries

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        feat_lens = feat_lens.to(device=feats.device, dtype=torch.long)
        x = self.encoder(feats.to(self.compute_dtype), feat_lens)
        keep = torch.arange(x.shape[1], device=x.device)[None, :, None] < feat_lens[:, None, None]
        n_audio = self.output_lengths(feat_lens)
        states = self.projector(x * keep)
        return states[:, : int(n_audio.max())], n_audio


# ---------------------------------------------------------------------------
# Prompt

TRANSCRIBE_INSTRUCTION = "can you transcribe the speech into a written format?"  # the model card's
TRANSLATE_INSTRUCTION = "translate the speech to {language}"
# The ids the system turn's text is swapped in at (never produced by a template).
_CONTEXT_SLOT = "\x00oasr-context\x00"


def _raise_template_error(message: str) -> None:
    """The chat template's ``raise_exception`` (as transformers gives templates)."""
    raise ValueError(f"the chat template refused the prompt: {message}")


class GraniteSpeechModel(PromptTokenizerMixin, BaseAsrModel):
    """Granite Speech (offline only; decoded by the ``llm`` strategy).

    Args:
        config: the encoder, the projector, the LM and the prompt.
    """

    family = "Granite Speech"
    architecture = "granite_speech"
    safe_dtypes = (torch.bfloat16, torch.float32)
    unsafe_dtype_reason = "its checkpoint is bfloat16 and its language model's activations overflow float16's range"
    supports_translation = True
    writes_language = False  # no language preamble: streamed text is sent as it is decoded
    text_skips_special_tokens = True  # its model card decodes with skip_special_tokens=True

    config_class = GraniteSpeechConfig

    def __init__(self, config: GraniteSpeechConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        self.encoder = GraniteSpeechAudio(self.config)
        self.decoder = CausalLm(self.config.text)
        # transformers embeds every ``<|audio|>`` id as id 0 (a generated one too; the prompt's
        # are then overwritten by the audio states).
        self.decoder.embed_as_zero = self.config.audio_token_id

    def encode_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio states at the LM width, ready to splice into the prompt.

        Args:
            feats: (B, T, 2 * n_mels) stacked log-mels, zero-padded; feat_lens: (B,) frames.

        Returns:
            states (B, N_max, D_lm) and n_audio (B,) (the ``<|audio|>`` tokens of each prompt).
        """
        return self.encoder(feats, feat_lens)

    @property
    def languages(self) -> tuple[str, ...]:
        """The ISO codes of the model card's languages."""
        return tuple(self.config.languages)

    def instruction(self, *, language: str | None = None, task: str = "transcribe") -> str:
        """The user turn's text after the audio: the model card's ASR request, or for
        ``task="translate"`` a request to translate into ``language`` (English when unset)."""
        code = self.resolve_language(language)
        if task == "transcribe":
            return TRANSCRIBE_INSTRUCTION
        if task == "translate":
            return TRANSLATE_INSTRUCTION.format(language=names_of((code or "en",))[code or "en"])
        raise ValueError(f"{self.family} serves task='transcribe' or 'translate', got task={task!r}")

    def render_chat(self, user: str, system: str | None) -> str:
        """The checkpoint's chat template over one user turn (and a system turn when given),
        with the generation prompt, as transformers' ``apply_chat_template`` renders it."""
        from datetime import datetime

        from jinja2.sandbox import ImmutableSandboxedEnvironment

        if not self.config.chat_template:
            raise RuntimeError(f"{self.family}: the checkpoint has no chat template")
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        env.globals["raise_exception"] = _raise_template_error
        messages = ([{"role": "system", "content": system}] if system is not None else []) + [
            {"role": "user", "content": user}
        ]
        return env.from_string(self.config.chat_template).render(messages=messages, add_generation_prompt=True)

    def prompt_ids(
        self, n_audio: int, *, language: str | None = None, context: str | None = None, task: str = "transcribe"
    ) -> list[int]:
        """Token ids of the prompt, ending where generation starts: the chat template over a
        user turn ``<|audio|>{instruction}`` (the placeholder repeated ``n_audio`` times, as
        the processor expands it), with ``context`` (when given) as the system turn, encoded
        as plain text (a context that spells ``<|audio|>`` keeps it as text).

        Raises:
            ValueError: an unsupported language or task, or ``n_audio < 1``.
        """
        if n_audio < 1:
            raise ValueError(f"n_audio must be >= 1, got {n_audio}")
        text = self.render_chat(
            AUDIO_TOKEN + self.instruction(language=language, task=task), _CONTEXT_SLOT if context else None
        )
        text = text.replace(AUDIO_TOKEN, AUDIO_TOKEN * n_audio)
        parts: list[str | Control] = []
        for i, piece in enumerate(text.split(_CONTEXT_SLOT)):
            if i:
                parts.append(context)
            if piece:
                parts.append(Control(piece))
        return self.encode_audio_prompt(parts, n_audio, AUDIO_TOKEN)

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Generation stops at any of these (the generation config's eos)."""
        return tuple(self.config.eos_token_ids)

    def parse_output(self, text: str) -> tuple[str | None, str]:
        """(no language: the model does not name it, transcript) of the generated text."""
        return None, text.strip()
