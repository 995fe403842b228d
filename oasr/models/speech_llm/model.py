"""Qwen2-Audio: a Whisper-geometry audio tower, a linear projector, and a Qwen2 causal
LM that writes the transcript.

Module names mirror transformers' ``Qwen2AudioForConditionalGeneration`` for the
audio side (``audio_tower``, ``multi_modal_projector``); the LM is the shared
``CausalLm`` under ``decoder`` (the converter renames ``language_model.*`` onto it).

Reads top to bottom: the tower layer, the tower (convolutions, learned positions,
key-padding-masked layers, stride-2 average pool, post-pool LayerNorm), the projector,
the prompt table, then the public model with the speech-LLM surface the ``llm``
decode strategy drives (``encode_offline``, ``prompt_ids``, ``embed_prompt``,
``languages``, ``parse_output``, ``stop_ids``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from oasr.languages import names_of
from oasr.layers import Linear
from oasr.models.base import BaseAsrModel
from oasr.models.decoders.causal_lm import CausalLm, PromptTokenizerMixin
from oasr.models.speech_llm.config import (
    AUDIO_BOS_TOKEN,
    AUDIO_EOS_TOKEN,
    AUDIO_TOKEN,
    IM_END_TOKEN,
    IM_START_TOKEN,
    Qwen2AudioConfig,
    Qwen2AudioEncoderConfig,
)
from oasr.models.whisper.model import WhisperStyleEncoder
from oasr.tokenizers import Control


def conv_output_lengths(mel_lens: torch.Tensor) -> torch.Tensor:
    """Valid frames after the stride-2 convolution: ``(mel - 1) // 2 + 1``."""
    return (mel_lens - 1) // 2 + 1


def pool_output_lengths(conv_lens: torch.Tensor) -> torch.Tensor:
    """Valid states after the stride-2 average pool: ``(conv - 2) // 2 + 1``.

    transformers applies the two stages in turn; for odd convolution lengths this is
    not ``mel // 4`` (a 3-frame conv output gives 1 state), so both stages are kept.
    """
    return (conv_lens - 2) // 2 + 1


class Qwen2AudioTower(WhisperStyleEncoder):
    """Two convolutions (the second strides by 2), learned positions, pre-norm layers
    under a key-padding mask, a stride-2 average pool, then the LayerNorm.

    The whole 30-s window runs (padding frames included, as transformers does); only
    keys past each row's valid length are masked, so padded query rows still compute
    and are dropped by the caller through the returned lengths.

    Shapes:
        feats: (B, n_mels, 2 * max_source_positions), feat_lens: (B,) valid mel frames
        -> states (B, max_source_positions // 2, d_model), lens (B,)
    """

    subsampling_rate = 4

    def __init__(self, cfg: Qwen2AudioEncoderConfig) -> None:
        d, heads, ffn, eps = cfg.d_model, cfg.encoder_attention_heads, cfg.encoder_ffn_dim, cfg.layer_norm_eps
        super().__init__(cfg.num_mel_bins, d, cfg.max_source_positions, cfg.encoder_layers, heads, ffn, eps)
        self.cfg = cfg

    def output_lengths(self, feat_lens: torch.Tensor) -> torch.Tensor:
        """Valid states per row for ``feat_lens`` valid mel frames (the two-stage formula)."""
        return pool_output_lengths(conv_output_lengths(feat_lens))

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        b, n_mels, t = feats.shape
        if n_mels != self.cfg.num_mel_bins or t != self.cfg.n_frames:
            raise ValueError(
                f"the Qwen2-Audio tower reads one padded window of shape (B, {self.cfg.num_mel_bins}, "
                f"{self.cfg.n_frames}); got {tuple(feats.shape)}"
            )
        if feat_lens is None:
            feat_lens = torch.full((b,), t, dtype=torch.long, device=feats.device)
        feat_lens = feat_lens.to(device=feats.device, dtype=torch.long).clamp(1, t)
        conv_lens = conv_output_lengths(feat_lens)
        x = self.embed(feats)  # (B, T', D)
        for layer in self.layers:
            x = layer(x, conv_lens)
        n = x.shape[1] // 2
        x = x[:, : 2 * n].unflatten(1, (n, 2)).mean(dim=2)  # AvgPool1d(2): (B, T'/2, D)
        return self.layer_norm(x), pool_output_lengths(conv_lens)


class Qwen2AudioProjector(nn.Module):
    """Audio tower width -> LM width (one linear layer with bias)."""

    def __init__(self, d_audio: int, d_text: int) -> None:
        super().__init__()
        self.linear = Linear(d_audio, d_text)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


# ---------------------------------------------------------------------------
# Prompt

# The ASR instruction of Qwen2-Audio's own ASR evaluation; a forced language follows
# it as a "<|code|>" tag in the prompt text.
ASR_INSTRUCTION = "Detect the language and recognize the speech:"
# The chat template's system turn when the conversation names none.
DEFAULT_SYSTEM = "You are a helpful assistant."

# The languages and dialects the Qwen2-Audio model card names for speech recognition,
# by the tag code its ASR prompt uses.
LANGUAGES: dict[str, str] = names_of(("en", "zh", "yue", "fr", "it", "es", "de", "ja"))
_LEADING_TAG = re.compile(r"^\s*<\|([a-z]{2,3})\|>")


class Qwen2AudioModel(PromptTokenizerMixin, BaseAsrModel):
    """Qwen2-Audio (offline only; decoded by the ``llm`` strategy).

    Args:
        config: the architecture, the special ids and the prompt shape.
    """

    family = "Qwen2-Audio"
    architecture = "speech_llm"
    safe_dtypes = (torch.bfloat16, torch.float16, torch.float32)  # the release's dtype first

    config_class = Qwen2AudioConfig

    def __init__(self, config: Qwen2AudioConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        config = self.config
        self.audio_tower = Qwen2AudioTower(config.audio)
        self.multi_modal_projector = Qwen2AudioProjector(config.audio.d_model, config.text.hidden_size)
        self.decoder = CausalLm(config.text)

    @property
    def encoder(self) -> Qwen2AudioTower:
        """The audio tower (the engine's encoder)."""
        return self.audio_tower

    # -- audio ----------------------------------------------------------------------

    def encode_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio states at the LM width, ready to splice into the prompt.

        Args:
            feats: log-mel windows, (B, T, n_mels) as front ends batch them or
                (B, n_mels, T) as transformers does; T is the padded 30-s window.
            feat_lens: (B,) valid mel frames of each row (``ceil(samples / hop)``).

        Returns:
            states (B, N_max, D_lm) with N_max the longest row's count, and n_audio (B,).
        """
        n_mels = self.config.audio.num_mel_bins
        if feats.dim() == 3 and feats.shape[-1] == n_mels and feats.shape[1] != n_mels:
            feats = feats.transpose(1, 2)
        feats = feats.to(self.compute_dtype)
        states, n_audio = self.audio_tower(feats, feat_lens)
        n_max = int(n_audio.max()) if n_audio.numel() else 0
        return self.multi_modal_projector(states[:, :n_max]), n_audio

    # -- prompt -----------------------------------------------------------------------

    @property
    def languages(self) -> tuple[str, ...]:
        """The ISO codes of the model card's ASR languages (its prompt's ``<|code|>`` tags)."""
        return tuple(LANGUAGES)

    def prompt_parts(
        self, n_audio: int, *, language: str | None = None, context: str | None = None
    ) -> list[str | Control]:
        """The prompt as ``Tokenizer.encode_prompt`` parts, with ``n_audio`` audio placeholders:
        the template's ``Control`` text and the user's ``context`` as plain text (see
        ``prompt_ids``)."""
        code = self.resolve_language(language)
        instruction = ASR_INSTRUCTION if code is None else f"{ASR_INSTRUCTION} <|{code}|>"
        audio = AUDIO_BOS_TOKEN + AUDIO_TOKEN * n_audio + AUDIO_EOS_TOKEN
        if self.config.prompt_style == "base":
            if context:
                raise ValueError(
                    "context biasing needs a chat prompt (its system turn); this Qwen2-Audio checkpoint "
                    "has the base prompt"
                )
            return [Control(audio + instruction)]
        return [
            Control(f"{IM_START_TOKEN}system\n"),
            context if context else DEFAULT_SYSTEM,
            Control(
                f"{IM_END_TOKEN}\n{IM_START_TOKEN}user\nAudio 1: {audio}\n{instruction}{IM_END_TOKEN}\n"
                f"{IM_START_TOKEN}assistant\n"
            ),
        ]

    def prompt_ids(
        self, n_audio: int, *, language: str | None = None, context: str | None = None, task: str = "transcribe"
    ) -> list[int]:
        """Token ids of the transcription prompt, ending where generation starts.

        "chat" (Instruct checkpoints) is what the processor's chat template renders for
        a conversation of one user turn holding the audio and the ASR instruction, with
        ``context`` (when given) as the system turn, encoded as plain text (a context that
        spells ``<|im_end|>`` or ``<|AUDIO|>`` keeps those as text); "base" (the pretrained checkpoint)
        is ``<|audio_bos|><|AUDIO|>...<|audio_eos|>`` followed by the instruction. The
        placeholder is repeated ``n_audio`` times, as the processor expands it.

        A forced language is named in the prompt text as the ``<|code|>`` tag after the
        instruction (Qwen2-Audio's ASR prompt convention); None/""/"auto" leaves it out.

        Raises:
            ValueError: an unsupported language or task, or context with the base prompt.
        """
        self.check_prompt_request(n_audio, task)
        parts = self.prompt_parts(n_audio, language=language, context=context)
        return self.encode_audio_prompt(parts, n_audio, AUDIO_TOKEN)

    # -- output -----------------------------------------------------------------------

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Generation stops at any of these (``<|endoftext|>``, ``<|im_end|>``, the config's eos)."""
        return tuple(self.config.stop_ids)

    def parse_output(self, text: str) -> tuple[str | None, str]:
        """(ISO code of the detected language or None, transcript) of the generated text.

        A leading ``<|code|>`` language tag of the model's table (what the model writes
        when it names the language it detected) is taken off and reported.
        """
        m = _LEADING_TAG.match(text)
        if m is not None and m.group(1) in LANGUAGES:
            return m.group(1), text[m.end() :].strip()
        return None, text.strip()
