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
Every mask is per utterance: a padded batch gives each row what it gets alone. Offline only
(cache-aware streaming is not wired yet: ``streaming_kind`` is "none").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers import ConformerConvolution, Conv2d, Embedding, FeedForward, LayerNorm, Linear
from oasr.layers.attention import attention
from oasr.layers.relpos_xl import RelPositionMultiHeadAttentionXL, xl_relative_positions
from oasr.models.base import BaseAsrModel, DecodeType
from oasr.models.ctc import BlankVocabMixin
from oasr.models.nemotron.config import NemotronConfig, NemotronEncoderConfig
from oasr.models.nemotron.predictor import AdditiveJoint, LstmPredictor
from oasr.models.nemotron.search import GreedyResult, greedy_search, nemo_transducer_search
from oasr.models.parakeet.model import FastConformerEncoder

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
        h, dh = self.n_heads, self.d_head

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
        a = torch.arange(nq, device=x.device)
        kw = torch.arange(w, device=x.device)
        qi = torch.arange(nb, device=x.device)[:, None] * nq + a[None, :]  # (nb, Q) absolute query
        kj = torch.arange(nb, device=x.device)[:, None] * nq - hist + kw[None, :]  # (nb, W) absolute key
        diff = torch.div(qi[:, :, None], self.chunk, rounding_mode="floor") - torch.div(
            kj[:, None, :].clamp(min=0), self.chunk, rounding_mode="floor"
        )
        in_window = (diff >= 0) & (diff <= self.left_chunks) & (kj[:, None, :] >= 0)  # (nb, Q, W)
        inside = kj[None, :, None, :] < lengths[:, None, None, None]  # (B, nb, 1, W)
        own = qi[:, :, None] == kj[:, None, :]
        allowed = in_window[None] & (inside | own[None])  # (B, nb, Q, W)
        mask = bd.masked_fill(~allowed[:, None], float("-inf"))

        out = attention(
            (q + self.bias_u[:, None, None, :]).reshape(b, h * nb, nq, dh),
            k.reshape(b, h * nb, w, dh),
            v.reshape(b, h * nb, w, dh),
            mask=mask.reshape(b, h * nb, nq, w),
            scale=scale,
        )  # (B, H * nb, Q, Dh)
        out = out.reshape(b, h, nb * nq, dh)[:, :, :t].transpose(1, 2).reshape(b, t, self.d_model)
        return self.linear_out(out)


class NemotronBlock(nn.Module):
    """One macaron conformer block: half-step FFs, chunked-limited attention, causal
    convolution module with a LayerNorm, final LayerNorm.

    Shapes:
        x: (B, T, D), lengths: (B,), valid: (B, T) bool -> (B, T, D)
    """

    def __init__(self, cfg: NemotronEncoderConfig) -> None:
        super().__init__()
        d, act = cfg.hidden_size, cfg.hidden_act
        ff = dict(activation=act, bias=cfg.attention_bias, names=("linear1", "linear2"))
        self.norm_feed_forward1 = LayerNorm(d)
        self.feed_forward1 = FeedForward(d, cfg.intermediate_size, **ff)
        self.norm_self_att = LayerNorm(d)
        self.self_attn = ChunkedLimitedAttention(
            d, cfg.num_attention_heads, cfg.attention_bias, cfg.attention_chunk, cfg.left_chunks
        )
        self.norm_conv = LayerNorm(d)
        self.conv = ConformerConvolution(
            d,
            cfg.conv_kernel_size,
            bias=cfg.convolution_bias,
            norm="layer_norm",
            activation=act,
            padding=(cfg.conv_kernel_size - 1, 0),
        )
        self.norm_feed_forward2 = LayerNorm(d)
        self.feed_forward2 = FeedForward(d, cfg.intermediate_size, **ff)
        self.norm_out = LayerNorm(d)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        h = self.feed_forward1(self.norm_feed_forward1(x))
        y, x = self.norm_self_att.add_forward(0.5 * h, x)
        h = self.self_attn(y, lengths)
        y, x = self.norm_conv.add_forward(h, x)
        h = self.conv(y, valid)
        y, x = self.norm_feed_forward2.add_forward(h, x)
        h = self.feed_forward2(y)
        return self.norm_out(x + 0.5 * h)


class NemotronEncoder(FastConformerEncoder):
    """Cache-aware FastConformer encoder, run offline.

    Shapes:
        feats: (B, T, num_mel_bins), feat_lens: (B,) -> hidden (B, T', D), hidden_lens (B,)
    """

    subsampling_class = NemotronSubsampling
    block_class = NemotronBlock

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, lengths = self.embed(feats, feat_lens)
        valid = _valid(lengths, x.shape[1])
        for layer in self.layers:
            x = layer(x, lengths, valid)
        return x, lengths


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


def resolve_prompt_id(table: Mapping[str, int], language: str | None, default: int) -> int:
    """The prompt id of ``language`` in a checkpoint's prompt table.

    The code itself if listed (``en``); else its ``xx-XX`` spelling (``zh`` -> ``zh-ZH``);
    else the one id all its ``xx-YY`` locales share (``vi`` -> ``vi-VN``). None -> ``default``.

    Raises:
        ValueError: the table does not know the code, or its locales map to different prompts.
    """
    if language is None:
        return default
    code = str(language).strip()
    if code in table:
        return int(table[code])
    base = code.lower()
    if "-" not in base and base:
        spelled = f"{base}-{base.upper()}"
        if spelled in table:
            return int(table[spelled])
        locales = {k: int(v) for k, v in table.items() if k.lower().startswith(base + "-")}
        ids = set(locales.values())
        if len(ids) == 1:
            return ids.pop()
        if len(ids) > 1:
            raise ValueError(
                f"language {language!r} is ambiguous for this checkpoint: its locales map to different prompts "
                f"{dict(sorted(locales.items()))}; name one of them"
            )
    known = sorted(table)
    raise ValueError(
        f"language {language!r} is not in this checkpoint's prompt table "
        f"({len(known)} entries: {', '.join(known[:40])}{' ...' if len(known) > 40 else ''})"
    )


class NemotronRnntModel(BlankVocabMixin, BaseAsrModel):
    """FastConformer + language prompt + LSTM RNN-T; blank past the tokenizer's pieces."""

    architecture = "nemotron"
    capabilities = frozenset({DecodeType.TRANSDUCER})
    default_decode_type = DecodeType.TRANSDUCER

    def __init__(self, config: NemotronConfig | Mapping[str, Any]) -> None:
        if not isinstance(config, NemotronConfig):
            config = NemotronConfig.from_dict(config)
        super().__init__(config)
        d, dj = config.encoder.hidden_size, config.decoder_hidden_size
        self.encoder = NemotronEncoder(config.encoder)
        self.prompt_projector = (
            PromptProjector(d, config.prompt_intermediate_size, config.num_prompts) if config.num_prompts else None
        )
        self.predictor = LstmPredictor(config.vocab_size, dj, config.num_decoder_layers, config.blank_id)
        self.joiner = AdditiveJoint(d, dj, config.vocab_size)

    @property
    def encoder_options(self) -> frozenset[str]:
        """``language`` where the checkpoint has a prompt projector (none on the English release)."""
        return frozenset({"language"}) if self.prompt_projector is not None else frozenset()

    def resolve_prompt_id(self, language: str | None) -> int:
        """``language`` (an ISO code, a locale of the table, or None) -> prompt id (see ``resolve_prompt_id``).

        Raises:
            ValueError: an unknown or ambiguous code, or any language on a checkpoint without prompts.
        """
        if self.prompt_projector is None:
            if language is None:
                return 0
            raise ValueError(f"language {language!r}: this checkpoint has no language prompt (its config has none)")
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

    transducer_search = nemo_transducer_search
    """The engine's transducer search (``oasr.engine.decode.transducer``): batched greedy."""

    @torch.no_grad()
    def greedy_decode(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, prompt_ids: torch.Tensor | None = None
    ) -> GreedyResult:
        """Encode and run batched greedy RNN-T search (``oasr.models.nemotron.search``)."""
        hidden, lens = self.encode_offline(feats, feat_lens, prompt_ids)
        return greedy_search(
            self.joiner,
            self.predictor,
            hidden,
            lens,
            blank_id=self.blank_id,
            max_symbols_per_step=self.config.max_symbols_per_step,
        )


__all__ = [
    "ChunkedLimitedAttention",
    "NemotronBlock",
    "NemotronEncoder",
    "NemotronRnntModel",
    "NemotronSubsampling",
    "OFFLINE_BLOCK_FRAMES",
    "PromptProjector",
    "resolve_prompt_id",
]
