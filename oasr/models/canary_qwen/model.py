"""Canary-Qwen (NeMo speechlm2's ``SALM``): a FastConformer perception whose states replace the
audio locator tag of a chat prompt, and a Qwen3 causal LM (its LoRA merged at load) that writes
the transcript.

    audio -> NeMo log-mel (``parakeet_mel``) -> FastConformer encoder (8x) -> modality adapter
    (FastConformer blocks after one linear layer, no subsampling) -> linear to the LM width
    -> spliced into  <|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n  -> Qwen3 -> text

The encoder and the adapter's blocks are Parakeet's (``parakeet/model.py``: Transformer-XL
relative-position attention with untied biases, a batch-norm convolution module, ``xscaling``).
Module names follow SALM's ``perception`` under ``encoder.`` (``encoder``, ``modality_adapter``,
``proj``) with the renames of NeMo's encoder tensors (``models/formats/nemo.py``), and the Hugging
Face Qwen3 names under ``decoder.``.

Reads top to bottom: the adapter's front end, the perception, then the public model (the
speech-LLM surface the ``llm`` strategy consumes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from oasr.layers import Linear
from oasr.models.base import BaseAsrModel, BaseEncoder
from oasr.models.canary_qwen.config import CanaryQwenConfig, ModalityAdapterConfig
from oasr.models.decoders.causal_lm import CausalLm, PromptTokenizerMixin
from oasr.models.parakeet.model import ParakeetEncoder
from oasr.tokenizers import Control

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"


class LinearFrontEnd(nn.Module):
    """The adapter's front end (NeMo's ``pre_encode`` without subsampling): one linear layer.

    Shapes:
        x: (B, T, D_in), lengths: (B,) -> (B, T, D), lengths
    """

    def __init__(self, cfg: ModalityAdapterConfig) -> None:
        super().__init__()
        self.linear = Linear(cfg.num_mel_bins, cfg.hidden_size)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        return lengths

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.linear(x), lengths


class ModalityAdapter(ParakeetEncoder):
    """FastConformer blocks over the encoder's frames (full context, no subsampling)."""

    subsampling_class = LinearFrontEnd


class CanaryQwenPerception(BaseEncoder):
    """SALM's perception after the preprocessor: encoder, modality adapter, projection.

    Shapes:
        feats: (B, T, n_mels), feat_lens: (B,) -> states (B, T', D_lm), lengths (B,) (T' = T / 8)
    """

    def __init__(self, config: CanaryQwenConfig) -> None:
        super().__init__()
        self.encoder = ParakeetEncoder(config.encoder)
        self.modality_adapter = ModalityAdapter(config.adapter)
        self.proj = Linear(config.adapter.hidden_size, config.text.hidden_size)
        self.subsampling_rate = self.encoder.subsampling_rate
        self.output_size = config.text.hidden_size

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, lengths = self.encoder(feats.to(self.compute_dtype), feat_lens)
        x, lengths = self.modality_adapter(x, lengths)
        return self.proj(x), lengths


class CanaryQwenModel(PromptTokenizerMixin, BaseAsrModel):
    """Canary-Qwen (offline only; decoded by the ``llm`` strategy).

    Args:
        config: the perception, the LM, the prompt and its token ids.
    """

    family = "Canary-Qwen"
    architecture = "canary_qwen"
    # The release is bfloat16; Qwen3's activations overflow float16's range.
    safe_dtypes = (torch.bfloat16, torch.float32)
    unsafe_dtype_reason = "its checkpoint is bfloat16 and its language model's activations overflow float16's range"

    config_class = CanaryQwenConfig

    def __init__(self, config: CanaryQwenConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        self.encoder = CanaryQwenPerception(self.config)
        self.decoder = CausalLm(self.config.text)

    # -- audio ---------------------------------------------------------------------------

    def encode_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio states at the LM width, ready to splice into the prompt.

        Args:
            feats: (B, T, n_mels) NeMo log-mels, zero-padded; feat_lens: (B,) frames.

        Returns:
            states (B, T', D_lm) and n_audio (B,) (the states each row's prompt takes).
        """
        return self.encoder(feats, feat_lens)

    # -- prompt ----------------------------------------------------------------------------

    @property
    def languages(self) -> tuple[str, ...]:
        """The ISO codes of what the model transcribes (its prompt names no language)."""
        return tuple(self.config.languages)

    def prompt_ids(
        self, n_audio: int, *, language: str | None = None, context: str | None = None, task: str = "transcribe"
    ) -> list[int]:
        """Token ids of the transcription prompt, ending where generation starts (NeMo's ``qwen``
        prompt format, as ``SALM.generate`` encodes one user turn)::

            <|im_start|>user\\n{prompt, its audio locator tag x n_audio}<|im_end|>\\n<|im_start|>assistant\\n

        ``language`` must be one of ``languages`` (or None); the prompt is the same for it.

        Raises:
            ValueError: a ``context`` (the format has no system turn), an unsupported language
                or task, or ``n_audio < 1``.
        """
        self.check_prompt_request(n_audio, task)
        self.resolve_language(language)
        if context:
            raise ValueError(
                "Canary-Qwen's prompt (NeMo's qwen format, one user turn) has no system turn: context is not taken"
            )
        before, after = self.config.prompt.split(self.config.audio_locator_tag)
        # The tag is a special token, so the text on each side is encoded on its own.
        head = self.tokenizer.encode_prompt([Control(f"{IM_START}user\n"), before])
        tail = self.tokenizer.encode_prompt([after, Control(f"{IM_END}\n{IM_START}assistant\n")])
        return head + [self.config.audio_token_id] * n_audio + tail

    # -- output ------------------------------------------------------------------------------

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Generation stops at any of these (SALM's eos, ``<|im_end|>`` in the release)."""
        return tuple(self.config.eos_token_ids)

    def parse_output(self, text: str) -> tuple[str | None, str]:
        """(the model's language when it transcribes one, transcript) of the generated text."""
        languages = self.languages
        return (languages[0] if len(languages) == 1 else None), text.strip()
