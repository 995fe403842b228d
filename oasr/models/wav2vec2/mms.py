"""MMS (facebook/mms-1b-all and its kind): the wav2vec2 stable-layer-norm encoder with a
language adapter after every layer, and a CTC head and character vocabulary per language,
switched per request by ``language`` (``adapters.py`` reads the files and runs the rows).

    samples -> the wav2vec2 encoder (``model.py``), each layer followed by
               ``h = h + adapter(h)`` with the row's language's adapter weights
            -> the row's language's head -> CTC log-probs over its vocabulary

A request names one of ``languages``: MMS's ISO 639-3 adapter names (``eng``, ``fra``,
``cmn-script_simplified``), which the shared resolver also reaches from ISO 639-1 codes, English
names and locales (``en``, ``French``, ``zh-Hans``). A request that names none runs the
checkpoint's own weights (``model.safetensors``) with the tokenizer's ``target_lang``
vocabulary: what transformers' ``Wav2Vec2ForCTC.from_pretrained`` and ``AutoProcessor`` give
without ``target_lang``. A language named runs its ``adapter.<lang>.safetensors`` and its
vocabulary, as ``model.load_adapter(lang)`` + ``processor.tokenizer.set_target_lang(lang)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from oasr.models.wav2vec2.adapters import AdapterBank, AdapterLayer, RowAdapters, adapter_files, row_logits
from oasr.models.wav2vec2.config import Wav2Vec2Config
from oasr.models.wav2vec2.model import Wav2Vec2CtcModel, Wav2Vec2Encoder, Wav2Vec2EncoderLayer
from oasr.tokenizers import Tokenizer


@dataclass
class MmsConfig(Wav2Vec2Config):
    """``Wav2Vec2Config`` plus the adapters.

    Attributes:
        adapter_attn_dim: the adapters' bottleneck width (transformers' ``adapter_attn_dim``).
        target_lang: the language of the checkpoint's own adapters and head (the tokenizer's
            ``target_lang``), or None when it names none.
        adapter_dir: the directory of the ``adapter.<lang>.safetensors`` files and the nested
            ``vocab.json`` ("" for a model built from its config alone: only its own language).
        adapter_vocab_sizes: each adapter file's head rows, checked at load (language -> rows).
    """

    adapter_attn_dim: int = 16
    target_lang: str | None = None
    adapter_dir: str = ""
    adapter_vocab_sizes: dict[str, int] = field(default_factory=dict)
    do_stable_layer_norm: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.do_stable_layer_norm:
            raise ValueError(
                "adapter_attn_dim with post-norm layers: transformers builds attention adapters only into "
                "stable-layer-norm layers (do_stable_layer_norm=true), as every MMS checkpoint has"
            )
        if self.adapter_attn_dim < 1:
            raise ValueError(f"adapter_attn_dim={self.adapter_attn_dim} must be positive")


class RowHeads:
    """Each row's CTC head by its language (``row_logits``), with ``CtcProjection``'s outputs.

    Shapes:
        x: (B, T', D) or packed (N, D) -> log-probs (..., V_max) float32 / best path (...,) x2
    """

    def __init__(self, rows: RowAdapters | None, own_head: nn.Module) -> None:
        self.rows = rows
        self.own_head = own_head

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return row_logits(x, self.rows, self.own_head)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits(x).float().log_softmax(dim=-1)

    def best_path(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.logits(x)
        top, ids = logits.max(dim=-1)
        return top.float() - torch.logsumexp(logits.float(), dim=-1), ids


class MmsEncoderLayer(Wav2Vec2EncoderLayer):
    """A stable-layer-norm layer and its adapter (``adapter_layer``, transformers' name).

    Shapes:
        x: (B, T, D) or packed (N, D) -> the same; ``rows``: each row's (or frame's) adapter
    """

    def __init__(self, cfg: MmsConfig, index: int) -> None:
        super().__init__(cfg, stable=True)
        self.adapter_layer = AdapterLayer(index, cfg.hidden_size, cfg.adapter_attn_dim)

    def forward(self, x, key_lengths, packing=None, bias=None, rows: RowAdapters | None = None) -> torch.Tensor:
        x = super().forward(x, key_lengths, packing, bias)
        return x + self.adapter_layer(x, rows)


class MmsEncoder(Wav2Vec2Encoder):
    """The wav2vec2 encoder with ``MmsEncoderLayer``s; ``rows`` (a forward's ``layer_args``)
    picks each row's adapter."""

    def build_layer(self, cfg: MmsConfig, index: int) -> nn.Module:
        return MmsEncoderLayer(cfg, index)

    def run_layers(self, x, key_lengths, packing, rows: RowAdapters | None = None) -> torch.Tensor:
        if rows is not None and packing is not None:
            rows = rows.of_frames(packing.cu_seqlens)  # packed: the groups are frames
        for layer in self.layers:
            x = layer(x, key_lengths, packing, rows=rows)
        return x


class MmsCtcModel(Wav2Vec2CtcModel):
    """MMS: the encoder with per-language adapters and heads (see the module); its forwards
    take each row's language (``languages``: entries of ``languages``, None for the default)."""

    architecture = "mms"
    config_class = MmsConfig
    encoder_class = MmsEncoder

    def __init__(self, config: MmsConfig | dict[str, Any]) -> None:
        super().__init__(config)
        cfg = self.config
        files = adapter_files(cfg.adapter_dir) if cfg.adapter_dir else {}
        files = {lang: files[lang] for lang in cfg.adapter_vocab_sizes}  # those the load checked
        self.bank = AdapterBank(files, cfg.adapter_vocab_sizes, cfg.target_lang, cfg.num_hidden_layers)
        self._tokenizers: dict[str, Tokenizer] = {}

    # -- languages ----------------------------------------------------------------------

    @property
    def encoder_options(self) -> frozenset[str]:
        return frozenset({"language"})

    @property
    def languages(self) -> tuple[str, ...]:
        """The adapter files' languages and the checkpoint's own (MMS's names, ISO 639-3)."""
        return self.bank.languages

    @property
    def default_language(self) -> str | None:
        """The language of the checkpoint's own weights (the tokenizer's ``target_lang``)."""
        return self.config.target_lang

    def language_vocabulary(self, language: str | None) -> tuple[Tokenizer, int]:
        """A language's tokenizer (its table of the nested ``vocab.json``) and head width; None:
        the default language's.

        Raises:
            ValueError: no language given and the checkpoint names no default.
        """
        lang = language if language is not None else self.default_language
        if lang is None:
            raise ValueError(
                f"this MMS checkpoint names no default language (its tokenizer has no target_lang); "
                f"name one of its {len(self.languages)} languages"
            )
        tok = self._tokenizers.get(lang)
        if tok is None:
            from oasr.tokenizers.chars import CharTokenizer

            tok = CharTokenizer.from_file(Path(self.config.adapter_dir) / "vocab.json", language=lang)
            tok.mark_special((self.blank_id,))
            self._tokenizers[lang] = tok
        return tok, self.bank.vocab_size(language, self.config.vocab_size)

    # -- forwards -----------------------------------------------------------------------

    def _rows(self, languages: Sequence[str | None] | None, device: torch.device) -> RowAdapters | None:
        """Each row's adapter weights (None: every row the checkpoint's own)."""
        if languages is None or all(lang is None for lang in languages):
            return None
        return RowAdapters.of_rows(self.bank.adapters(languages, device, self.compute_dtype), device)

    def encode_offline(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, languages: Sequence[str | None] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder with each row's adapters.

        Shapes:
            feats: (B, S, 1), feat_lens: (B,), languages: B entries -> hidden (B, T, D), lens (B,)
        """
        return self.encoder(feats, feat_lens, rows=self._rows(languages, feats.device))

    def _encode_with_heads(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, languages: Sequence[str | None] | None
    ) -> tuple[torch.Tensor, torch.Tensor, RowHeads]:
        """The encoder's states and lengths of a padded batch, and its rows' heads."""
        rows = self._rows(languages, feats.device)
        hidden, lens = self.encoder(feats, feat_lens, rows=rows)
        return hidden, lens, RowHeads(rows, self.lm_head)

    def ctc_head_for(self, languages: Sequence[str | None] | None, cu_seqlens: torch.Tensor | None = None) -> RowHeads:
        """The rows' heads (``cu_seqlens``: (B + 1,) row bounds of packed encoder frames)."""
        rows = self._rows(languages, self.device)
        if rows is not None and cu_seqlens is not None:
            rows = rows.of_frames(cu_seqlens)
        return RowHeads(rows, self.lm_head)

    def forward_offline(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, languages: Sequence[str | None] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder + each row's head -> log-probs (B, T, V_max) float32 (a row's columns past its
        head's width are padding), lens (B,)."""
        hidden, lens, heads = self._encode_with_heads(feats, feat_lens, languages)
        return heads(hidden), lens

    def forward_offline_best_path(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, languages: Sequence[str | None] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each frame's best symbol of the row's head and its log-probability: (B, T) x2, lens."""
        hidden, lens, heads = self._encode_with_heads(feats, feat_lens, languages)
        top, ids = heads.best_path(hidden)
        return top, ids, lens

    def encode_offline_packed(
        self, feats: torch.Tensor, cu_seqlens: torch.Tensor, languages: Sequence[str | None] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder over packed rows with each row's adapters: (N, 1), (B + 1,) -> (N', D), (B + 1,)."""
        if feats.dim() != 2:
            raise ValueError(f"packed features must be (N, F) rows end to end, got {tuple(feats.shape)}")
        return self.encoder.forward_packed(feats, cu_seqlens, rows=self._rows(languages, feats.device))

    def forward_offline_packed(
        self, feats: torch.Tensor, cu_seqlens: torch.Tensor, languages: Sequence[str | None] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Packed rows through the encoder and each row's head -> log-probs (N', V_max), cu (B + 1,)."""
        hidden, cu = self.encode_offline_packed(feats, cu_seqlens, languages)
        return self.ctc_head_for(languages, cu)(hidden), cu


__all__ = ["MmsConfig", "MmsCtcModel", "MmsEncoder", "MmsEncoderLayer", "RowHeads"]
