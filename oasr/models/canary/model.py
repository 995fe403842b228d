"""Canary: NeMo's ``EncDecMultiTaskModel`` (a FastConformer encoder, a projection to the decoder's
width where they differ, NeMo's transformer decoder and its tied ``TokenClassifier`` head), its
aggregate tokenizer and its two prompt formats.

Reads top to bottom: the tokenizer, the prompts, the decoder's modules, the decoder, the model.
The maths are NeMo's (``nemo.collections.asr.modules.transformer``): token embedding plus fixed
sine positions divided by sqrt(D), a LayerNorm; blocks of self-attention, cross-attention and a
ReLU feed-forward, pre-LN (with a final LayerNorm) or post-LN; log-softmax over the head. The
decoder keeps each layer's self-attention K/V (NeMo re-projects its cached layer inputs: the same
numbers) and the cross-attention K/V of the encoder output.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from oasr.layers import Embedding, LayerNorm, Linear, attention
from oasr.models.base import BaseAsrModel, DecodeType
from oasr.models.canary.config import CanaryConfig, CanaryDecoderConfig
from oasr.models.canary.search import SearchParams, canary_search
from oasr.models.parakeet.model import ParakeetEncoder

# ---------------------------------------------------------------------------
# The aggregate tokenizer

SPECIAL_PART = "spl_tokens"
BOS, EOS, PAD = "<|startoftranscript|>", "<|endoftext|>", "<pad>"
BOCTX = "<|startofcontext|>"
_SPECIAL_RE = re.compile(r"^<\|.+\|>$")
_FRAME_RE = re.compile(r"^<\|(\d+)\|>$")


class CanaryTokenizer:
    """NeMo's ``CanaryTokenizer``: SentencePiece models laid end to end (``spl_tokens`` first, then
    one per language), each id offset by the pieces before its part. Text is encoded with one
    language's model; the prompt tokens are ``spl_tokens``' pieces (``<|...|>`` and ``<pad>``).

    Args:
        parts: (name, SentencePiece model path) in id order.
    """

    def __init__(self, parts: Sequence[tuple[str, str]]) -> None:
        import sentencepiece as spm

        if not parts or parts[0][0] != SPECIAL_PART:
            raise ValueError(f"a Canary tokenizer starts with its {SPECIAL_PART!r} part, got {[p[0] for p in parts]}")
        self.parts: dict[str, tuple[Any, int]] = {}
        self.pieces: list[str] = []
        self.part_of: list[str] = []
        for name, path in parts:
            sp = spm.SentencePieceProcessor(model_file=str(path))
            self.parts[name] = (sp, len(self.pieces))
            for i in range(sp.get_piece_size()):
                self.pieces.append(sp.id_to_piece(i))
                self.part_of.append(name)
        offset = self.parts[SPECIAL_PART][1]
        sp = self.parts[SPECIAL_PART][0]
        self.special: dict[str, int] = {}
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if _SPECIAL_RE.match(piece) or piece == PAD:
                self.special[piece] = offset + i
        for token in (BOS, EOS, PAD):
            if token not in self.special:
                raise ValueError(f"the {SPECIAL_PART} tokenizer has no {token}")
        self.bos_id, self.eos_id, self.pad_id = self.special[BOS], self.special[EOS], self.special[PAD]
        self._special_ids = frozenset(i for i, p in enumerate(self.part_of) if p == SPECIAL_PART)

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    @property
    def languages(self) -> tuple[str, ...]:
        """The text parts (language codes), in id order."""
        return tuple(name for name in self.parts if name != SPECIAL_PART)

    @property
    def special_ids(self) -> frozenset[int]:
        return self._special_ids

    def text_to_ids(self, text: str, language: str) -> list[int]:
        """``text`` in ``language``'s pieces (aggregate ids)."""
        if language not in self.parts or language == SPECIAL_PART:
            raise ValueError(f"no tokenizer for language {language!r} (languages: {list(self.languages)})")
        sp, offset = self.parts[language]
        return [offset + i for i in sp.encode(text)]

    def token_id(self, token: str) -> int:
        """The id of a prompt token ``<|...|>``."""
        try:
            return self.special[token]
        except KeyError:
            raise ValueError(f"{token} is not a token of this Canary model") from None

    def decode(self, ids: Sequence[int]) -> str:
        """The transcript of ``ids``: text pieces joined, ``▁`` as spaces, stripped (prompt tokens and
        ids past the vocabulary are not text)."""
        text = "".join(self.pieces[i] for i in ids if 0 <= i < len(self.pieces) and i not in self._special_ids)
        return text.replace("▁", " ").strip()

    def frame_of(self, token_id: int) -> int | None:
        """N for a frame token ``<|N|>`` (canary2's timestamps), else None."""
        if token_id not in self._special_ids:
            return None
        m = _FRAME_RE.match(self.pieces[token_id])
        return int(m.group(1)) if m else None

    def piece_text(self, ids: Sequence[int]) -> str:
        """NeMo's ``ids_to_text``: every piece (prompt tokens included), ``▁`` as spaces."""
        return "".join(self.pieces[i] for i in ids if 0 <= i < len(self.pieces)).replace("▁", " ")


# ---------------------------------------------------------------------------
# Prompts (NeMo's ``CanaryPromptFormatter`` / ``Canary2PromptFormatter`` user turns)


@dataclass(frozen=True)
class CanaryPrompt:
    """What a request asks of Canary.

    Attributes:
        source_language / target_language: codes of the tokenizer's languages (the target differs
            for speech translation, AST).
        punctuation: ``<|pnc|>`` (punctuation and capitalisation) or ``<|nopnc|>``.
        itn / timestamps / diarize: canary2's ``<|itn|>``, ``<|timestamp|>``, ``<|diarize|>`` (or their
            ``<|no...|>``); None: the archive's ``prompt_defaults``, else off.
        emotion: canary2's emotion token; None: the defaults', else ``<|emo:undefined|>``.
        context: canary2's decoder context (text in the target language).
    """

    source_language: str
    target_language: str
    punctuation: bool = True
    itn: bool | None = None
    timestamps: bool | None = None
    diarize: bool | None = None
    emotion: str | None = None
    context: str = ""


def _flag(value: bool | None, name: str, defaults: Mapping[str, str]) -> str:
    if value is None:
        default = defaults.get(name, f"<|no{name}|>")
        return default if default.startswith("<|") else (f"<|{name}|>" if default in _TRUE else f"<|no{name}|>")
    return f"<|{name}|>" if value else f"<|no{name}|>"


_TRUE = ("yes", "1", "True", "true")


def prompt_ids(
    tokenizer: CanaryTokenizer, prompt_format: str, prompt: CanaryPrompt, defaults: Mapping[str, str]
) -> list[int]:
    """The decoder's prompt, token for token as NeMo's formatter builds the user turn.

    canary: ``<|startoftranscript|> <|src|> <|transcribe|>/<|translate|> <|tgt|> <|pnc|>/<|nopnc|>``
    (translate when the target differs from the source).
    canary2: ``<|startofcontext|> [context] <|startoftranscript|> <|emo:..|> <|src|> <|tgt|>
    <|pnc|> <|itn|> <|timestamp|> <|diarize|>`` (each flag or its ``<|no...|>``).
    """
    tok = tokenizer.token_id
    src, tgt = f"<|{prompt.source_language}|>", f"<|{prompt.target_language}|>"
    pnc = "<|pnc|>" if prompt.punctuation else "<|nopnc|>"
    if prompt_format == "canary":
        task = "<|transcribe|>" if prompt.source_language == prompt.target_language else "<|translate|>"
        return [tok(BOS), tok(src), tok(task), tok(tgt), tok(pnc)]
    ids = [tok(BOCTX)]
    if prompt.context:
        ids += tokenizer.text_to_ids(prompt.context, prompt.target_language)
    emotion = prompt.emotion or defaults.get("emotion") or "<|emo:undefined|>"
    ids += [tok(BOS), tok(emotion), tok(src), tok(tgt), tok(pnc)]
    ids += [
        tok(_flag(getattr(prompt, attr), name, defaults))
        for attr, name in (("itn", "itn"), ("timestamps", "timestamp"), ("diarize", "diarize"))
    ]
    return ids


# ---------------------------------------------------------------------------
# Decoder modules


def sine_positions(
    n: int, d: int, *, device: torch.device | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """NeMo's ``FixedPositionalEncoding`` table: sin / cos interleaved, divided by sqrt(d). -> (n, d)"""
    position = torch.arange(n, dtype=torch.float64)[:, None]
    div = torch.exp(-math.log(10000.0) / d * torch.arange(0, d, 2, dtype=torch.float64))
    table = torch.zeros(n, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div)
    return (table / math.sqrt(d)).to(device=device, dtype=dtype)


class CanaryAttention(nn.Module):
    """NeMo's ``MultiHeadAttention``: biased q / k / v / out projections, scaled dot product."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query_net = Linear(d, d)
        self.key_net = Linear(d, d)
        self.value_net = Linear(d, d)
        self.out_projection = Linear(d, d)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # (B, H, T, hd)

    def kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split(self.key_net(memory)), self.split(self.value_net(memory))

    def attend(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **mask: Any) -> torch.Tensor:
        b, t, d = x.shape
        out = attention(self.split(self.query_net(x)), k, v, **mask)  # (B, H, T, hd)
        return self.out_projection(out.transpose(1, 2).reshape(b, t, d))


class CanaryFeedForward(nn.Module):
    def __init__(self, d: int, inner: int, act: str) -> None:
        super().__init__()
        self.dense_in = Linear(d, inner)
        self.dense_out = Linear(inner, d)
        self.act = torch.relu if act == "relu" else nn.functional.gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense_out(self.act(self.dense_in(x)))


class CanaryDecoderLayer(nn.Module):
    """NeMo's ``TransformerDecoderBlock`` (``first_sub_layer`` self-attention, ``second_sub_layer``
    cross-attention, ``third_sub_layer`` feed-forward, ``layer_norm_1..3``)."""

    def __init__(self, cfg: CanaryDecoderConfig) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.pre_ln = cfg.pre_ln
        self.layer_norm_1 = LayerNorm(d, eps=1e-5)
        self.first_sub_layer = CanaryAttention(d, cfg.num_attention_heads)
        self.layer_norm_2 = LayerNorm(d, eps=1e-5)
        self.second_sub_layer = CanaryAttention(d, cfg.num_attention_heads)
        self.layer_norm_3 = LayerNorm(d, eps=1e-5)
        self.third_sub_layer = CanaryFeedForward(d, cfg.inner_size, cfg.hidden_act)

    def forward(
        self, x: torch.Tensor, cache: _LayerCache, self_mask: torch.Tensor, cross_lens: torch.Tensor
    ) -> torch.Tensor:
        """One block over new positions ``x`` (B, L, D); their K/V are appended to ``cache``."""
        h = self.layer_norm_1(x) if self.pre_ln else x
        k, v = self.first_sub_layer.kv(h)
        cache.k = k if cache.k is None else torch.cat([cache.k, k], dim=2)
        cache.v = v if cache.v is None else torch.cat([cache.v, v], dim=2)
        y = x + self.first_sub_layer.attend(h, cache.k, cache.v, mask=self_mask)
        if not self.pre_ln:
            y = self.layer_norm_1(y)
        h = self.layer_norm_2(y) if self.pre_ln else y
        y = y + self.second_sub_layer.attend(h, cache.cross_k, cache.cross_v, key_lengths=cross_lens)
        if not self.pre_ln:
            y = self.layer_norm_2(y)
        h = self.layer_norm_3(y) if self.pre_ln else y
        y = y + self.third_sub_layer(h)
        return y if self.pre_ln else self.layer_norm_3(y)


@dataclass
class _LayerCache:
    cross_k: torch.Tensor  # (B, H, T', hd)
    cross_v: torch.Tensor
    k: torch.Tensor | None = None  # (B, H, L, hd)
    v: torch.Tensor | None = None


@dataclass
class DecoderCache:
    """A decode batch's K/V: per layer, the self-attention K/V of every position so far and the
    cross-attention K/V of its encoder output, and the positions fed so far per row."""

    layers: list[_LayerCache]
    enc_lens: torch.Tensor  # (B,)
    length: int = 0

    def select(self, idx: torch.Tensor) -> DecoderCache:
        """Rows ``idx`` (repeats allowed: beams onto their parents)."""
        layers = [
            _LayerCache(
                c.cross_k.index_select(0, idx),
                c.cross_v.index_select(0, idx),
                None if c.k is None else c.k.index_select(0, idx),
                None if c.v is None else c.v.index_select(0, idx),
            )
            for c in self.layers
        ]
        return DecoderCache(layers, self.enc_lens.index_select(0, idx), self.length)


class CanaryDecoder(nn.Module):
    """Embedding (``embedding.token_embedding`` + sine positions + ``embedding.layer_norm``), the
    blocks, ``final_norm`` (pre-LN), the ``head`` (log-softmax).

    Shapes:
        tokens (B, L) at positions ``cache.length ..`` -> log-probs of the last position (B, V)
    """

    def __init__(self, cfg: CanaryDecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        self.embedding = nn.Module()
        self.embedding.token_embedding = Embedding(cfg.vocab_size, d)
        self.embedding.layer_norm = LayerNorm(d, eps=1e-5)
        self.layers = nn.ModuleList(CanaryDecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.final_norm = LayerNorm(d, eps=1e-5) if cfg.pre_ln and cfg.pre_ln_final_layer_norm else None
        self.head = Linear(d, cfg.vocab_size)

    def new_cache(self, memory: torch.Tensor, memory_lens: torch.Tensor) -> DecoderCache:
        """The cross-attention K/V of encoder outputs ``memory`` (B, T', D) (``memory_lens`` valid)."""
        layers = [_LayerCache(*layer.second_sub_layer.kv(memory)) for layer in self.layers]
        return DecoderCache(layers, memory_lens.to(memory.device))

    def forward(self, tokens: torch.Tensor, cache: DecoderCache) -> torch.Tensor:
        b, n = tokens.shape
        start = cache.length
        x = self.embedding.token_embedding(tokens)
        pos = sine_positions(start + n, x.shape[-1], device=x.device, dtype=x.dtype)[start:]
        x = self.embedding.layer_norm(x + pos)
        # Causal: query i (position start + i) sees keys 0 .. start + i.
        q_pos = torch.arange(start, start + n, device=x.device)[:, None]
        self_mask = torch.arange(start + n, device=x.device)[None, :] <= q_pos  # (n, start + n)
        for layer, c in zip(self.layers, cache.layers):
            x = layer(x, c, self_mask, cache.enc_lens)
        cache.length = start + n
        h = x[:, -1]
        if self.final_norm is not None:
            h = self.final_norm(h)
        return torch.log_softmax(self.head(h), dim=-1)


# ---------------------------------------------------------------------------
# The model


class CanaryModel(BaseAsrModel):
    """NeMo's Canary: ``encoder`` (Parakeet's FastConformer), ``encoder_decoder_proj`` where the
    widths differ, ``decoder``; the aggregate ``tokenizer`` and the prompt format of its config."""

    architecture = "canary"
    capabilities = frozenset({DecodeType.MULTITASK})
    config_class = CanaryConfig

    def __init__(self, config: CanaryConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        cfg = self.config
        self.encoder = ParakeetEncoder(cfg.encoder)
        d_enc, d_dec = cfg.encoder.hidden_size, cfg.decoder.hidden_size
        self.encoder_decoder_proj = Linear(d_enc, d_dec) if d_enc != d_dec else None
        self.decoder = CanaryDecoder(cfg.decoder)
        self.tokenizer = CanaryTokenizer(cfg.tokenizers) if cfg.tokenizers else None

    @property
    def languages(self) -> tuple[str, ...] | None:
        return self.tokenizer.languages if self.tokenizer is not None else None

    def encode_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder, projected to the decoder's width. -> (B, T', D_dec), (B,)"""
        hidden, lens = self.encoder(feats, feat_lens)
        if self.encoder_decoder_proj is not None:
            hidden = self.encoder_decoder_proj(hidden)
        return hidden, lens

    def multitask_search(
        self, memory: torch.Tensor, memory_lens: torch.Tensor, prompts: list[list[int]], params: SearchParams
    ) -> list[list[int]]:
        """Each row's transcript ids (``oasr.models.canary.search``: NeMo's greedy or beam search)."""
        return canary_search(self, memory, memory_lens, prompts, params)

    def search_params(self, beam_size: int | None = None, length_penalty: float | None = None) -> SearchParams:
        """The archive's ``decoding`` defaults, with a request's beam size / length penalty over them
        (beam size 1 asked: NeMo's greedy)."""
        d = self.config.decoding
        greedy = d.get("strategy", "beam") != "beam" if beam_size is None else beam_size == 1
        size = int(d.get("beam_size", 1)) if beam_size is None else beam_size
        return SearchParams(
            greedy=greedy,
            beam_size=size,
            length_penalty=float(d.get("length_penalty", 0.0)) if length_penalty is None else length_penalty,
            max_generation_delta=int(d.get("max_generation_delta", -1)),
        )

    @property
    def supports_timestamps(self) -> bool:
        """Whether the model writes frame tokens when prompted (canary2 with ``<|timestamp|>``)."""
        tok = self.tokenizer
        return self.config.prompt_format == "canary2" and tok is not None and "<|timestamp|>" in tok.special

    def timestamp_words(self, ids: Sequence[int]) -> list[tuple[str, float, float, int, int]]:
        """Words between frame-token pairs, as NeMo's ``process_aed_timestamp_outputs`` reads them:
        each ``<|a|> text <|b|>`` (pairs taken left to right, not overlapping) with text is a word
        from a * stride to b * stride seconds (stride: the front end's hop times the encoder's
        subsampling).

        Returns:
            (word, start_s, end_s, first token index, end token index) per word, times within the clip.
        """
        tok = self.tokenizer
        stride = self.config.window_stride * self.encoder.subsampling_rate
        frames = [tok.frame_of(t) for t in ids]
        words = []
        i = 0
        while i < len(ids):
            if frames[i] is None:
                i += 1
                continue
            j = next((k for k in range(i + 1, len(ids)) if frames[k] is not None), None)
            if j is None:
                break
            word = tok.piece_text(ids[i + 1 : j]).strip()
            if word:
                words.append((word, frames[i] * stride, frames[j] * stride, i + 1, j))
            i = j + 1
        return words

    @torch.inference_mode()
    def token_logprobs(self, memory: torch.Tensor, memory_len: int, prompt: list[int], ids: list[int]) -> list[float]:
        """Each of ``ids``' log-probability after ``prompt`` and the ids before it (teacher-forced).

        Shapes:
            memory: (T', D) one clip's projected encoder output
        """
        if not ids:
            return []
        dec = self.decoder
        cache = dec.new_cache(memory[None, :memory_len], torch.tensor([memory_len], device=memory.device))
        out = []
        logp = dec(torch.tensor([prompt], device=memory.device), cache)
        for t in ids:
            out.append(float(logp[0, t]))
            logp = dec(torch.tensor([[t]], device=memory.device), cache)
        return out

    @property
    def default_language(self) -> str | None:
        """The spoken language a request that names none is taken in: the archive's
        ``prompt_defaults`` source language, else the tokenizer's first (None: no tokenizer)."""
        lang = str(self.config.prompt_defaults.get("source_lang", "")).removeprefix("<|").removesuffix("|>")
        languages = self.languages or ()
        if lang in languages:
            return lang
        return languages[0] if languages else None

    def prompt(
        self,
        source_language: str,
        target_language: str,
        *,
        punctuation: bool | None = None,
        itn: bool | None = None,
        timestamps: bool | None = None,
        context: str = "",
    ) -> list[int]:
        """The decoder prompt of a request (``prompt_ids``); ``punctuation`` None: the archive's
        ``prompt_defaults``, else on (NeMo's default).

        Raises:
            ValueError: a language or flag the model's prompt tokens cannot express, or a
                canary-format model asked for canary2's ``itn`` / ``context``.
        """
        if self.tokenizer is None:
            raise ValueError("this Canary model has no tokenizer")
        defaults = self.config.prompt_defaults
        if self.config.prompt_format == "canary" and (itn or timestamps or context):
            raise ValueError("itn, timestamps and context are prompts of canary2 models; this one's format is canary")
        if punctuation is None:
            punctuation = str(defaults.get("pnc", "yes")) in ("<|pnc|>", "pnc", *_TRUE)
        prompt = CanaryPrompt(
            source_language, target_language, punctuation=punctuation, itn=itn, timestamps=timestamps, context=context
        )
        return prompt_ids(self.tokenizer, self.config.prompt_format, prompt, defaults)


__all__ = [
    "CanaryDecoder",
    "CanaryModel",
    "CanaryPrompt",
    "CanaryTokenizer",
    "DecoderCache",
    "prompt_ids",
    "sine_positions",
]
