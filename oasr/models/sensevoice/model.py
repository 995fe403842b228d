"""SenseVoiceSmall (FunASR): four learned query rows (language, audio event, emotion, text
normalisation) in front of the CMVN'd LFR features, Paraformer's SANM encoder over them, the
``tp`` blocks, and one CTC head. The prompt frames' CTC outputs are the tags (language,
emotion, event, ITN), the audio frames' the text (``tags.py`` reads both).

Module names follow FunASR's state dict (``embed.weight``, ``encoder.encoders0.0.*``,
``encoder.tp_encoders.N.*``, ``encoder.tp_norm``); the head ``ctc.ctc_lo`` is ``ctc`` here
(``convert.py`` renames it), widened to the GEMM-aligned width as every CTC head is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from oasr.layers import Embedding, LayerNorm
from oasr.layers.ctc import CtcProjection
from oasr.models.base import BaseAsrModel, DecodeType
from oasr.models.ctc import CtcMixin
from oasr.models.paraformer.encoder import ParaformerEncoder, SanmEncoderLayer, length_mask
from oasr.models.sensevoice.config import SenseVoiceConfig, SenseVoiceEncoderConfig
from oasr.models.sensevoice.tags import TAG_PIECES, RichTranscript, read_rich_transcript

# The rows of ``embed`` each prompt position reads (funasr's ``lid_dict``, the event / emotion
# queries 1 and 2, ``textnorm_dict``); "auto" leaves the language to the model.
LANGUAGE_QUERIES: dict[str, int] = {"auto": 0, "zh": 3, "en": 4, "yue": 7, "ja": 11, "ko": 12, "nospeech": 13}
EVENT_QUERY, EMOTION_QUERY = 1, 2
TEXTNORM_QUERIES: dict[bool, int] = {True: 14, False: 15}  # withitn / woitn
N_QUERIES = 7 + len(LANGUAGE_QUERIES) + len(TEXTNORM_QUERIES)  # funasr's embedding rows (16)
PROMPT_FRAMES = 4


class SenseVoiceEncoder(ParaformerEncoder):
    """CMVN, the prompt rows in front, Paraformer's SANM blocks and ``after_norm``, then the
    ``tp`` blocks and ``tp_norm`` (``SenseVoiceEncoderSmall``).

    Shapes:
        feats: (B, T, input_size) LFR features before CMVN, lens: (B,),
        queries: (B, P, input_size) -> (B, P + T, D), lens + P
    """

    def __init__(self, cfg: SenseVoiceEncoderConfig) -> None:
        super().__init__(cfg)
        self.tp_encoders = nn.ModuleList([SanmEncoderLayer(cfg.output_size, cfg) for _ in range(cfg.tp_blocks)])
        self.tp_norm = LayerNorm(cfg.output_size, eps=cfg.norm_eps)

    def forward(  # type: ignore[override]
        self, feats: torch.Tensor, lens: torch.Tensor, queries: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if feats.dim() != 3 or feats.shape[-1] != self.cfg.input_size:
            raise ValueError(
                f"SenseVoiceEncoder expects (B, T, {self.cfg.input_size}) LFR features, got {tuple(feats.shape)}"
            )
        if queries.shape[0] != feats.shape[0] or queries.shape[-1] != feats.shape[-1]:
            raise ValueError(f"queries {tuple(queries.shape)} do not go with features {tuple(feats.shape)}")
        x = torch.cat([queries.to(feats.dtype), self.normalize(feats)], dim=1)  # (B, P + T, F)
        lens = lens + queries.shape[1]
        x, lens = self.forward_normalized(x, lens)
        mask = length_mask(lens, x.shape[1]).to(x.dtype)
        for layer in self.tp_encoders:
            x = layer(x, mask, lens)
        return self.tp_norm(x), lens


class SenseVoiceModel(CtcMixin, BaseAsrModel):
    """FunASR's SenseVoiceSmall, decoded by the ``rich_ctc`` strategy.

    The strategy calls, per batch: ``rich_prompt`` for each row's options -> ``forward_rich``
    (CTC log-probs over the prompt and audio frames) -> a CTC search -> the tokenizer's decode
    -> ``rich_transcript``; tokens at the first ``prompt_frames`` frames are tags and are not
    timed, nor are tag pieces elsewhere (``is_tag``).
    """

    architecture = "sensevoice"
    capabilities = frozenset({DecodeType.RICH_CTC})
    config_class = SenseVoiceConfig
    prompt_frames = PROMPT_FRAMES

    def __init__(self, config: SenseVoiceConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        enc = self.config.encoder
        self.encoder = SenseVoiceEncoder(enc)
        self.embed = Embedding(N_QUERIES, enc.input_size)
        self.ctc = CtcProjection(enc.output_size, self.config.vocab_size)

    @property
    def ctc_projection(self) -> CtcProjection:  # type: ignore[override]
        return self.ctc

    @property
    def languages(self) -> tuple[str, ...]:
        """The languages a request may name: SenseVoice's language queries (``nospeech`` among them)."""
        return tuple(k for k in LANGUAGE_QUERIES if k != "auto")

    def rich_prompt(self, language: str | None, itn: bool) -> tuple[int, ...]:
        """The query rows of a request: its language (None: "auto"), the event and emotion
        queries, and with / without inverse text normalisation (funasr's order)."""
        return (LANGUAGE_QUERIES[language or "auto"], EVENT_QUERY, EMOTION_QUERY, TEXTNORM_QUERIES[bool(itn)])

    def encode_rich(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, prompts: torch.Tensor | Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder over each row's prompt rows and audio.

        Shapes:
            feats: (B, T, F), feat_lens: (B,), prompts: (B, P) query ids -> (B, P + T, D), lens (B,)
        """
        prompts = torch.as_tensor(prompts, dtype=torch.long, device=feats.device)
        queries = self.embed(prompts).to(self.compute_dtype)  # (B, P, F)
        return self.encoder(feats.to(self.compute_dtype), feat_lens, queries)

    def forward_rich(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, prompts: torch.Tensor | Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """CTC log-probs over the prompt and audio frames.

        Shapes:
            feats: (B, T, F), feat_lens: (B,), prompts: (B, P) -> (B, P + T, V) float32, lens (B,)
        """
        hidden, lens = self.encode_rich(feats, feat_lens, prompts)
        return self.ctc_log_probs(hidden), lens

    def encode_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder under funasr's default prompt (language "auto", no ITN)."""
        prompt = self.rich_prompt(None, False)
        return self.encode_rich(feats, feat_lens, [prompt] * feats.shape[0])

    def rich_transcript(self, raw: str) -> RichTranscript:
        """Text and tags of the tokenizer's decode of a row's CTC tokens (``tags.py``)."""
        return read_rich_transcript(raw)

    def is_tag(self, piece: str | None) -> bool:
        """Whether a vocabulary piece is one of the tags ``rich_transcript`` reads."""
        return piece in TAG_PIECES


__all__ = ["LANGUAGE_QUERIES", "PROMPT_FRAMES", "SenseVoiceEncoder", "SenseVoiceModel"]
