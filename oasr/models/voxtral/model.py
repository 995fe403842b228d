"""Voxtral: a Whisper-style audio tower over 30-s windows, a projector that merges four
tower frames into one audio token, and a Mistral (Llama) causal LM that writes the
transcript or answers about the audio.

Module names mirror transformers' ``VoxtralForConditionalGeneration`` for the audio side
(``audio_tower``, ``multi_modal_projector.linear_{1,2}``); the LM is the shared ``CausalLm``
under ``decoder`` (the converter renames ``language_model.*`` onto it).

Long audio is cut as the reference cuts it: the clip is zero-padded to a whole number of
30-s windows, the log-mel is taken over the padded clip and split into windows, each
window runs through the tower alone (no key-padding mask: the padding is read, as
transformers reads it) and the windows' audio tokens are concatenated, in order, into one
span of ``[AUDIO]`` placeholders (375 per window on the release).

Reads top to bottom: the tower, the projector, the prompt, then the public model with the
speech-LLM surface the ``llm`` decode strategy drives (``encode_offline``, ``prompt_ids``,
``embed_prompt``, ``languages``, ``parse_output``, ``stop_ids``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from oasr.languages import names_of
from oasr.layers import Linear, LinearActivation
from oasr.models.base import BaseAsrModel
from oasr.models.decoders.causal_lm import CausalLm, PromptTokenizerMixin
from oasr.models.voxtral.config import (
    AUDIO_TOKEN,
    BEGIN_AUDIO_TOKEN,
    BOS_TOKEN,
    END_INST_TOKEN,
    INST_TOKEN,
    TRANSCRIBE_TOKEN,
    VoxtralConfig,
    VoxtralEncoderConfig,
)
from oasr.models.whisper.model import WhisperStyleEncoder
from oasr.tokenizers import Control

TOWER_WINDOWS = 8  # 30-s windows the tower runs at once


class VoxtralTower(WhisperStyleEncoder):
    """Whisper's encoder over whole 30-s windows: two GELU convolutions, learned positions,
    pre-norm layers without a mask, the final LayerNorm. (transformers builds an average
    pool too but never runs it; the projector merges frames instead.)

    Shapes:
        windows: (W, n_mels, 2 * max_source_positions) -> (W, max_source_positions, d_model)
    """

    subsampling_rate = 8  # mel frames per audio token, after the projector's grouping of four

    def __init__(self, cfg: VoxtralEncoderConfig) -> None:
        d, heads, ffn, eps = cfg.d_model, cfg.encoder_attention_heads, cfg.encoder_ffn_dim, cfg.layer_norm_eps
        super().__init__(cfg.num_mel_bins, d, cfg.max_source_positions, cfg.encoder_layers, heads, ffn, eps)
        self.cfg = cfg

    def forward(
        self, windows: torch.Tensor, feat_lens: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        w, n_mels, t = windows.shape
        if n_mels != self.cfg.num_mel_bins or t != self.cfg.n_frames:
            raise ValueError(
                f"the Voxtral tower reads 30-s windows of shape (W, {self.cfg.num_mel_bins}, {self.cfg.n_frames}); "
                f"got {tuple(windows.shape)}"
            )
        x = self.embed(windows)  # (W, T', D)
        for layer in self.layers:
            x = layer(x)
        lens = torch.full((w,), x.shape[1], dtype=torch.long, device=x.device)
        return self.layer_norm(x), lens


class VoxtralProjector(nn.Module):
    """Four consecutive tower frames (concatenated) -> LM width: linear, GELU, linear, no biases.

    Shapes:
        (W, T', d_audio) -> (W, T' / k, d_text) with k = ffn_dim / d_audio
    """

    def __init__(self, cfg: VoxtralEncoderConfig, d_text: int) -> None:
        super().__init__()
        self.group = cfg.frames_per_token
        self.linear_1 = LinearActivation(cfg.encoder_ffn_dim, d_text, "gelu", bias=False)
        self.linear_2 = Linear(d_text, d_text, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, t, d = x.shape
        x = x.reshape(w, t // self.group, self.group * d)  # (W, T'/k, k*D): k frames side by side
        return self.linear_2(self.linear_1(x))


# ---------------------------------------------------------------------------
# Prompt

# The languages the Voxtral model card names; a forced one is written "lang:<code>" before
# [TRANSCRIBE] (mistral-common's transcription request).
LANGUAGES: dict[str, str] = names_of(("en", "es", "fr", "pt", "hi", "de", "nl", "it"))


class VoxtralModel(PromptTokenizerMixin, BaseAsrModel):
    """Voxtral (offline; decoded by the ``llm`` strategy).

    Two prompts, as the reference builds them (mistral-common's tekken templates):

    * transcription (no ``context``): ``<s>[INST][BEGIN_AUDIO][AUDIO]...[/INST]`` then
      ``lang:<code>`` when the language is known, then ``[TRANSCRIBE]``
      (``VoxtralProcessor.apply_transcription_request``);
    * chat (``context`` given: an instruction or question about the audio):
      ``<s>[INST][BEGIN_AUDIO][AUDIO]...<context>[/INST]``, a user turn of the audio followed
      by the text, as ``VoxtralProcessor.apply_chat_template`` renders it. ``context`` is
      plain text: one that spells ``[INST]`` or ``[AUDIO]`` keeps those as text.

    Args:
        config: the architecture, the special ids and the tokenizer.
    """

    family = "Voxtral"
    architecture = "voxtral"
    safe_dtypes = (torch.bfloat16, torch.float16, torch.float32)  # the release's dtype first
    writes_language = False  # the transcript carries no language tag: stream it from the first token
    text_skips_special_tokens = True  # its model card decodes with skip_special_tokens=True

    config_class = VoxtralConfig

    def __init__(self, config: VoxtralConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        config = self.config
        self.audio_tower = VoxtralTower(config.audio)
        self.multi_modal_projector = VoxtralProjector(config.audio, config.text.hidden_size)
        self.decoder = CausalLm(config.text)

    @property
    def encoder(self) -> VoxtralTower:
        """The audio tower (the engine's encoder)."""
        return self.audio_tower

    # -- audio ----------------------------------------------------------------------

    def encode_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio tokens at the LM width: each row's 30-s windows through the tower (all the
        batch's windows in one call) and the projector, concatenated in order.

        Args:
            feats: log-mel, (B, T, n_mels) as front ends batch them or (B, n_mels, T) as
                transformers does; row ``b`` holds ``feat_lens[b]`` frames, a whole number of
                windows (the front end pads each clip to one).
            feat_lens: (B,) mel frames of each row.

        Returns:
            states (B, N_max, D_lm), n_audio (B,): ``tokens_per_window`` per window.

        Raises:
            ValueError: a row that is not a whole number of windows.
        """
        a = self.config.audio
        if feats.dim() == 3 and feats.shape[-1] == a.num_mel_bins and feats.shape[1] != a.num_mel_bins:
            feats = feats.transpose(1, 2)  # (B, n_mels, T)
        lens = [int(n) for n in feat_lens.tolist()]
        if any(n < a.n_frames or n % a.n_frames or n > feats.shape[2] for n in lens):
            raise ValueError(
                f"Voxtral reads whole {a.n_frames}-frame windows (clips zero-padded to a multiple of 30 s); "
                f"got row lengths {lens} for features of shape {tuple(feats.shape)}"
            )
        feats = feats.to(self.compute_dtype)
        windows = torch.cat(
            [feats[b, :, :n].unflatten(1, (n // a.n_frames, a.n_frames)).transpose(0, 1) for b, n in enumerate(lens)]
        )  # (W, n_mels, n_frames): every row's windows, in order
        # A few windows at a time: a batch of long clips holds many, and each one's activations
        # (1500 positions x the tower's width and heads) are what bounds the memory.
        tokens = torch.cat(
            [self.multi_modal_projector(self.audio_tower(part)[0]) for part in windows.split(TOWER_WINDOWS)]
        )  # (W, tokens_per_window, D_lm)
        n_windows = [n // a.n_frames for n in lens]
        n_audio = torch.tensor([k * a.tokens_per_window for k in n_windows], dtype=torch.long, device=feats.device)
        out = tokens.new_zeros(len(lens), int(n_audio.max()), tokens.shape[-1])
        for b, rows in enumerate(tokens.split(n_windows)):
            out[b, : int(n_audio[b])] = rows.flatten(0, 1)
        return out, n_audio

    # -- prompt -----------------------------------------------------------------------

    @property
    def languages(self) -> tuple[str, ...]:
        """The ISO codes of the model card's languages."""
        return tuple(LANGUAGES)

    def prompt_parts(
        self, n_audio: int, *, language: str | None = None, context: str | None = None
    ) -> list[str | Control]:
        """The prompt as ``Tokenizer.encode_prompt`` parts (see the class docstring); the
        user's ``context`` is plain text.

        Raises:
            ValueError: a language with ``context`` (the chat prompt has no language slot).
        """
        code = self.resolve_language(language)
        head = [Control(BOS_TOKEN + INST_TOKEN + BEGIN_AUDIO_TOKEN + AUDIO_TOKEN * n_audio)]
        if context:
            if code is not None:
                raise ValueError(
                    "language applies to Voxtral's transcription prompt; with context (a chat instruction about "
                    "the audio) leave it unset"
                )
            return [*head, context, Control(END_INST_TOKEN)]
        tail: list[str | Control] = [Control(END_INST_TOKEN)]
        if code is not None:
            tail.append(f"lang:{code}")
        tail.append(Control(TRANSCRIBE_TOKEN))
        return head + tail

    def prompt_ids(
        self,
        n_audio: int,
        *,
        language: str | None = None,
        context: str | None = None,
        task: str = "transcribe",
    ) -> list[int]:
        """Token ids of the prompt (transcription, or chat with ``context``), ending where
        generation starts; ``n_audio`` ``[AUDIO]`` placeholders.

        Raises:
            ValueError: an unsupported language or task, or a language with ``context``.
        """
        self.check_prompt_request(n_audio, task)
        parts = self.prompt_parts(n_audio, language=language, context=context)
        return self.encode_audio_prompt(parts, n_audio, AUDIO_TOKEN)

    # -- output -----------------------------------------------------------------------

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Generation stops at any of these (``</s>``, the generation config's eos)."""
        return tuple(self.config.stop_ids)

    def parse_output(self, text: str) -> tuple[str | None, str]:
        """(None, transcript): Voxtral writes no language tag."""
        return None, text.strip()
