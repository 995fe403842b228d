"""Qwen3-ASR: a windowed audio tower whose states replace the audio placeholders of a
chat prompt, and a Qwen3 causal LM that writes ``language {Name}<asr_text>{transcript}``.

The audio tower reads a 128-bin Whisper log-mel:

* the stem: the mel is cut into chunks of ``2 * n_window`` (100) frames, the last one
  zero-padded; each chunk goes through three (k3, s2, p1) conv2d + GELU (frequency
  128 -> 16, time / 8), a bias-free linear to ``d_model``, and the sinusoidal table
  from position 0 (it restarts every chunk); each chunk keeps the frames its real
  length accounts for;
* the encoder: pre-norm transformer layers over each utterance's concatenated frames,
  attending only within windows of ``window_tokens`` (104) frames (the block-diagonal
  mask). Windows are packed as independent rows of one attention call, so long audio
  never builds a quadratic mask; when every utterance fits one window it is one dense
  block per row;
* post-norm, then the ``proj1 -> GELU -> proj2`` head to the LM width.

Module names follow the original release's ``audio_tower`` (``conv2d1..3``,
``conv_out``, ``layers.N.*``, ``ln_post``, ``proj1``, ``proj2``) under ``encoder.`` and the
Hugging Face Qwen3 names under ``decoder.``; ``convert.py`` maps both layouts onto them.

Reads top to bottom: attention, encoder layer, window packing, the tower, then the
public model (the speech-LLM surface the ``llm`` strategy consumes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from oasr.languages import code_of, parse_language
from oasr.layers import Conv2d, Gelu, LayerNorm, Linear, LinearActivation, sinusoids
from oasr.models.base import BaseAsrModel, BaseEncoder
from oasr.models.decoders.causal_lm import CausalLm, PromptTokenizerMixin
from oasr.models.qwen3_asr.config import (
    ASR_TEXT_TOKEN,
    AUDIO_END_TOKEN,
    AUDIO_PAD_TOKEN,
    AUDIO_START_TOKEN,
    IM_END_TOKEN,
    IM_START_TOKEN,
    Qwen3AsrAudioConfig,
    Qwen3AsrConfig,
)
from oasr.models.whisper.model import WhisperEncoderLayer
from oasr.tokenizers import Control

# Stem chunks per convolution call: bounds the (chunks, channels, 64, 50) activation of
# the first convolution on long audio.
_STEM_CHUNKS_PER_CALL = 128


def post_cnn_lengths(lengths: torch.Tensor) -> torch.Tensor:
    """Frames left after the three (k3, s2, p1) convolutions, elementwise (0 stays 0)."""
    for _ in range(3):
        lengths = torch.where(lengths > 0, (lengths - 1) // 2 + 1, torch.zeros_like(lengths))
    return lengths


@dataclass(frozen=True)
class WindowLayout:
    """How a batch's encoder frames are packed into attention windows.

    A row of ``n`` frames splits into windows of ``width`` frames (the last one partial);
    each window is one row of the packed batch and attends only to itself, which is the
    block-diagonal window mask. When every row fits one window the layout is dense: one
    block per row, ``width`` the longest row.

    Attributes:
        width: frames per packed window.
        slots: windows reserved per batch row in the unpacked ``(B, slots * width)`` view.
        index: (n_windows,) position of each packed window in the ``(B * slots)`` view.
        key_lengths: (n_windows,) valid frames per window; None when every window is full.
        dense: every row is a single window.
    """

    width: int
    slots: int
    index: torch.Tensor
    key_lengths: torch.Tensor | None
    dense: bool

    @property
    def n_windows(self) -> int:
        return int(self.index.numel())

    @classmethod
    def build(cls, n_tokens: torch.Tensor, window: int) -> WindowLayout:
        """The layout of rows of ``n_tokens`` frames (all >= 1) under windows of ``window`` frames."""
        n_max = int(n_tokens.max())
        device = n_tokens.device
        if n_max <= window:
            full = bool((n_tokens == n_max).all())
            index = torch.arange(n_tokens.numel(), device=device)
            return cls(n_max, 1, index, None if full else n_tokens.clone(), dense=True)
        slots = -(-n_max // window)
        starts = torch.arange(slots, device=device)[None, :] * window  # (1, S)
        lengths = (n_tokens[:, None] - starts).clamp(min=0, max=window)  # (B, S)
        used = lengths > 0
        index = used.flatten().nonzero().squeeze(-1)
        kl = lengths.flatten()[index]
        return cls(window, slots, index, None if bool((kl == window).all()) else kl, dense=False)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, D) frames -> (n_windows, width, D) windows."""
        b, n, d = x.shape
        total = self.slots * self.width
        if total > n:
            x = torch.nn.functional.pad(x, (0, 0, 0, total - n))
        return x[:, :total].reshape(b * self.slots, self.width, d).index_select(0, self.index)

    def unpack(self, windows: torch.Tensor, batch: int, n: int) -> torch.Tensor:
        """(n_windows, width, D) -> (B, n, D); frames past a row's length are zero."""
        d = windows.shape[-1]
        out = windows.new_zeros(batch * self.slots, self.width, d)
        out[self.index] = windows
        return out.view(batch, self.slots * self.width, d)[:, :n]


class Qwen3AsrAudioEncoder(BaseEncoder):
    """Conv2d stem per mel chunk, windowed transformer encoder, post-norm, projection head.

    Shapes:
        feats: (B, T, n_mels) (or (B, n_mels, T)), feat_lens: (B,)
        -> states (B, N_max, output_dim) (or d_model before the head), n_tokens (B,)
    """

    subsampling_rate = 8

    def __init__(self, cfg: Qwen3AsrAudioConfig) -> None:
        super().__init__()
        self.output_size = cfg.output_dim
        self.cfg = cfg
        c, d = cfg.downsample_hidden_size, cfg.d_model
        self.conv2d1 = Conv2d(1, c, 3, stride=2, padding=1)
        self.conv2d2 = Conv2d(c, c, 3, stride=2, padding=1)
        self.conv2d3 = Conv2d(c, c, 3, stride=2, padding=1)
        self.gelu = Gelu()
        self.conv_out = Linear(c * cfg.freq_bins, d, bias=False)
        self.layers = nn.ModuleList(
            WhisperEncoderLayer(
                d, cfg.encoder_attention_heads, cfg.encoder_ffn_dim, cfg.layer_norm_eps, key_bias=True, fp16_clamp=True
            )
            for _ in range(cfg.encoder_layers)
        )
        self.ln_post = LayerNorm(d, cfg.layer_norm_eps)
        self.proj1 = LinearActivation(d, d, "gelu")
        self.proj2 = Linear(d, cfg.output_dim)

    # -- stem ---------------------------------------------------------------------------

    def stem(self, chunks: torch.Tensor) -> torch.Tensor:
        """Stem of whole chunks, with the sinusoidal table restarted in each.

        Shapes:
            chunks: (M, n_mels, chunk_frames) -> (M, chunk_tokens, d_model)
        """
        x = chunks[:, None]  # (M, 1, F, T)
        x = self.gelu(self.conv2d1(x))
        x = self.gelu(self.conv2d2(x))
        x = self.gelu(self.conv2d3(x))  # (M, C, F', T')
        m, c, f, t = x.shape
        x = self.conv_out(x.permute(0, 3, 1, 2).reshape(m, t, c * f))  # (M, T', C * F') -> (M, T', D)
        return x + sinusoids(t, x.shape[-1]).to(device=x.device, dtype=x.dtype)

    def embed(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The stem over every chunk of every row; each row's frames concatenated.

        Shapes:
            feats: (B, T, n_mels), feat_lens: (B,) -> (B, N_max, d_model), n_tokens (B,)
        """
        b, t, f = feats.shape
        cf = self.cfg.chunk_frames
        lens = feat_lens.to(device=feats.device, dtype=torch.long).clamp(max=t)
        if bool((lens < 1).any()):
            raise ValueError(f"every row needs at least one mel frame, got feat_lens={lens.tolist()}")
        n_chunks = -(-t // cf)
        # The padded tail of the last chunk is zero, as the reference pads its mel.
        frame_ok = torch.arange(n_chunks * cf, device=feats.device)[None, :] < lens[:, None]
        x = torch.nn.functional.pad(feats, (0, 0, 0, n_chunks * cf - t)) * frame_ok[..., None].to(feats.dtype)
        x = x.view(b, n_chunks, cf, f)
        chunk_len = (lens[:, None] - torch.arange(n_chunks, device=feats.device)[None, :] * cf).clamp(0, cf)
        used = chunk_len > 0  # (B, C): a prefix of each row
        chunks = x[used].transpose(1, 2)  # (M, F, cf), rows in order
        states = torch.cat([self.stem(c) for c in chunks.split(_STEM_CHUNKS_PER_CALL)])  # (M, ct, D)
        ct = states.shape[1]
        n_tokens = post_cnn_lengths(chunk_len).sum(1)  # (B,)
        # Row b's frame j is frame j % ct of its chunk j // ct (every chunk but the last is full).
        first_chunk = used.sum(1).cumsum(0) - used.sum(1)  # (B,)
        n_max = int(n_tokens.max())
        j = torch.arange(n_max, device=feats.device)[None, :]
        flat = (first_chunk[:, None] + j // ct) * ct + j % ct  # (B, N_max)
        flat = torch.where(j < n_tokens[:, None], flat, torch.zeros_like(flat))
        return states.reshape(-1, states.shape[-1])[flat], n_tokens

    # -- encoder --------------------------------------------------------------------------

    def layout(self, n_tokens: torch.Tensor) -> WindowLayout:
        """The attention windows of rows of ``n_tokens`` encoder frames."""
        return WindowLayout.build(n_tokens, self.cfg.window_tokens)

    def forward(
        self, feats: torch.Tensor, feat_lens: torch.Tensor | None = None, *, project: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio states of a batch of log-mels.

        Args:
            feats: (B, T, n_mels) as front ends batch them, or (B, n_mels, T) as
                transformers lays them out (read as (B, T, n_mels) when T == n_mels);
                frames past each row's length are ignored.
            feat_lens: (B,) valid mel frames per row (default: all T).
            project: apply the ``proj1 -> GELU -> proj2`` head (False returns the
                post-norm encoder states).

        Returns:
            states (B, N_max, output_dim or d_model), zero past each row's length, and
            n_tokens (B,) valid states per row.
        """
        n_mels = self.cfg.num_mel_bins
        if feats.dim() != 3 or n_mels not in (feats.shape[1], feats.shape[2]):
            raise ValueError(f"expected log-mel features (B, T, {n_mels}), got {tuple(feats.shape)}")
        if feats.shape[2] != n_mels:
            feats = feats.transpose(1, 2)
        feats = feats.to(self.compute_dtype)
        if feat_lens is None:
            feat_lens = torch.full((feats.shape[0],), feats.shape[1], dtype=torch.long)
        x, n_tokens = self.embed(feats, feat_lens)
        layout = self.layout(n_tokens)
        w = layout.pack(x)  # (n_windows, width, D)
        for layer in self.layers:
            w = layer(w, layout.key_lengths)
        w = self.ln_post(w)
        if project:
            w = self.proj2(self.proj1(w))
        out = layout.unpack(w, x.shape[0], x.shape[1])
        valid = torch.arange(out.shape[1], device=out.device)[None, :] < n_tokens[:, None]
        return out * valid[..., None].to(out.dtype), n_tokens


# ---------------------------------------------------------------------------
# The model


_PREAMBLE = re.compile(r"language\s+([^\s<]+)", re.IGNORECASE)
# A preamble cut short by the token budget: "language", "language Eng", "language English".
_CUT_PREAMBLE = re.compile(r"language(?:\s+([^\s<]*))?", re.IGNORECASE)


class Qwen3AsrModel(PromptTokenizerMixin, BaseAsrModel):
    """Qwen3-ASR (offline only; decoded by the ``llm`` strategy).

    Args:
        config: the architecture, the chat ids and the language table.
    """

    family = "Qwen3-ASR"
    text_skips_special_tokens = True  # its reference decodes with skip_special_tokens=True, then parses
    architecture = "qwen3_asr"
    # The release is bfloat16; in float16 its LM's activations overflow (only the tower clamps).
    safe_dtypes = (torch.bfloat16, torch.float32)
    unsafe_dtype_reason = "its checkpoint is bfloat16 and its language model's activations overflow float16's range"

    config_class = Qwen3AsrConfig

    def __init__(self, config: Qwen3AsrConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        config = self.config
        self.encoder = Qwen3AsrAudioEncoder(config.audio)
        self.decoder = CausalLm(config.text)
        # The table's names (the prompt's spelling) by ISO code, and back (a name oasr's table
        # lacks is its own code, lower-cased).
        self._names: dict[str, str] = {code_of(n): n for n in config.languages}
        self._codes: dict[str, str] = {n.lower(): code for code, n in self._names.items()}

    @property
    def encoder_options(self) -> frozenset[str]:
        return frozenset({"language", "context"})

    # -- audio ---------------------------------------------------------------------------

    def encode_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio states at the LM width, ready to splice into the prompt.

        Args:
            feats: (B, T, 128) log-mels (or (B, 128, T)), zero-padded; feat_lens: (B,) frames.

        Returns:
            states (B, N_max, D_lm) and n_audio (B,) (the placeholders each row's prompt needs).
        """
        return self.encoder(feats, feat_lens)

    def n_audio_tokens(self, n_frames: int) -> int:
        """Audio placeholders of an utterance of ``n_frames`` mel frames."""
        return self.config.audio.n_tokens(n_frames)

    # -- prompt ----------------------------------------------------------------------------

    @property
    def supported_languages(self) -> tuple[str, ...]:
        """Canonical names a language can be forced to."""
        return tuple(self.config.languages)

    @property
    def languages(self) -> tuple[str, ...]:
        """The ISO codes of the forced-language names (``config.languages``). An unsupported
        name is refused (``resolve_language``), where the qwenasr.cpp port detects instead."""
        return tuple(self._names)

    def prompt_parts(
        self, n_audio: int, *, language: str | None = None, context: str | None = None
    ) -> list[str | Control]:
        """The chat prompt as ``Tokenizer.encode_prompt`` parts: the template's ``Control`` text
        and the user's ``context`` as plain text (see ``prompt_ids``)."""
        code = self.resolve_language(language)
        name = None if code is None else self._names[code]
        audio = AUDIO_START_TOKEN + AUDIO_PAD_TOKEN * n_audio + AUDIO_END_TOKEN
        parts = [
            Control(f"{IM_START_TOKEN}system\n"),
            context or "",
            Control(f"{IM_END_TOKEN}\n{IM_START_TOKEN}user\n{audio}{IM_END_TOKEN}\n{IM_START_TOKEN}assistant\n"),
        ]
        if name is not None:
            parts.append(Control(f"language {name}{ASR_TEXT_TOKEN}"))
        return parts

    def prompt_ids(
        self, n_audio: int, *, language: str | None = None, context: str | None = None, task: str = "transcribe"
    ) -> list[int]:
        """Token ids of the transcription prompt, ending where generation starts::

            <|im_start|>system\\n{context}<|im_end|>\\n
            <|im_start|>user\\n<|audio_start|>{<|audio_pad|> x n_audio}<|audio_end|><|im_end|>\\n
            <|im_start|>assistant\\n[language {Name}<asr_text>]

        ``context`` (biasing text) fills the system turn (empty when None), encoded as plain
        text: a context that spells ``<|im_end|>`` or ``<|audio_pad|>`` keeps those as text and
        cannot end the turn. A forced language primes the assistant turn with
        ``language {Name}<asr_text>``, so the model writes only the transcript; None / "" /
        "auto" leave the turn open and the model writes its own ``language {Name}<asr_text>``
        preamble.

        Raises:
            ValueError: an unsupported language or task, or ``n_audio < 1``.
        """
        self.check_prompt_request(n_audio, task)
        # Tokenise with one placeholder (a special token, atomic under BPE), then expand it.
        ids = self.tokenizer.encode_prompt(self.prompt_parts(1, language=language, context=context))
        at = [i for i, t in enumerate(ids) if t == self.config.audio_token_id]
        if len(at) != 1 or ids[at[0] - 1] != self.config.audio_start_token_id:
            raise ValueError(
                f"the tokenizer does not encode {AUDIO_START_TOKEN}{AUDIO_PAD_TOKEN} as the ids "
                f"{self.config.audio_start_token_id}, {self.config.audio_token_id} of the config"
            )
        return ids[: at[0]] + [self.config.audio_token_id] * n_audio + ids[at[0] + 1 :]

    # -- output ------------------------------------------------------------------------------

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Generation stops at any of these (``<|endoftext|>``, ``<|im_end|>``)."""
        return tuple(dict.fromkeys((*self.config.eos_token_ids, self.config.im_end_token_id)))

    def _language_code(self, value: str) -> str | None:
        """The ISO code of a language name the model wrote (None for "None"; a name that is no
        language is reported as written)."""
        if value.lower() == "none":
            return None
        parsed = parse_language(value)
        return self._codes.get(value.lower()) or (parsed[0] if parsed is not None else value)

    def parse_output(self, text: str) -> tuple[str | None, str]:
        """(ISO code of the detected language or None, transcript) of the generated text.

        The transcript is what follows the last ``<asr_text>``; the language is the last
        ``language {Name}`` of the preamble before it ("language None", the model's answer
        to silence, gives no language and an empty transcript). Without the marker the
        text is the transcript (a forced-language prompt already ends with it), unless it
        is nothing but a preamble cut short by the token budget (``language``,
        ``language Eng``, ``language English``), which gives no text.
        """
        if ASR_TEXT_TOKEN in text:
            preamble, _, transcript = text.rpartition(ASR_TEXT_TOKEN)
            found = _PREAMBLE.findall(preamble)
            if found and found[-1].lower() == "none":
                return None, ""
            return (self._language_code(found[-1]) if found else None), transcript.strip()
        stripped = text.strip()
        m = _CUT_PREAMBLE.fullmatch(stripped)
        if m is not None:
            value = (m.group(1) or "").lower()
            if value in self._codes or value == "none":
                return self._language_code(value), ""
            if any(name.lower().startswith(value) for name in (*self.config.languages, "None")):
                return None, ""
        return None, stripped
