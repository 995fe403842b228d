"""Qwen2-Audio configuration: the Whisper-geometry audio tower, the Qwen2 causal LM,
and the ids and prompt shape the speech-LLM surface needs.

``Qwen2AudioConfig.from_hf`` reads a transformers ``qwen2_audio`` ``config.json``. Its
``text_config`` may omit fields (the published Qwen2-Audio-7B leaves out the hidden
size, the depth and the head count); they are filled from the Hugging Face
``Qwen2Config`` defaults by ``CausalLmConfig.from_hf``, as transformers does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from oasr.models.base import LoadError
from oasr.models.configs import ModelConfig
from oasr.models.decoders.causal_lm import CausalLmConfig

# The special tokens of the Qwen2-Audio tokenizer, by the names its processor uses.
AUDIO_TOKEN = "<|AUDIO|>"
AUDIO_BOS_TOKEN = "<|audio_bos|>"
AUDIO_EOS_TOKEN = "<|audio_eos|>"
IM_START_TOKEN = "<|im_start|>"
IM_END_TOKEN = "<|im_end|>"
ENDOFTEXT_TOKEN = "<|endoftext|>"

# Published Qwen2-Audio-7B ids, used when a config does not name them.
DEFAULT_AUDIO_TOKEN_ID = 151646
DEFAULT_AUDIO_BOS_ID = 151647
DEFAULT_AUDIO_EOS_ID = 151648
DEFAULT_IM_START_ID = 151644
DEFAULT_IM_END_ID = 151645
DEFAULT_ENDOFTEXT_ID = 151643


def _default_stops(*ids: int | None) -> tuple[int, ...]:
    return tuple(dict.fromkeys(int(i) for i in ids if i is not None))


@dataclass
class Qwen2AudioEncoderConfig(ModelConfig):
    """The audio tower (a Whisper encoder with a key-padding mask, a stride-2 average
    pool and a post-pool LayerNorm).

    Attributes:
        num_mel_bins: log-mel bins of the input (128).
        d_model: tower width.
        encoder_layers / encoder_attention_heads / encoder_ffn_dim: depth, heads, MLP width.
        max_source_positions: positions after the stride-2 convolution (1500 = a 30-s window).
        layer_norm_eps: LayerNorm epsilon (PyTorch's default, as transformers builds it).
    """

    num_mel_bins: int = 128
    d_model: int = 1280
    encoder_layers: int = 32
    encoder_attention_heads: int = 20
    encoder_ffn_dim: int = 5120
    max_source_positions: int = 1500
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.d_model % self.encoder_attention_heads:
            raise ValueError(
                f"audio d_model={self.d_model} is not divisible by encoder_attention_heads="
                f"{self.encoder_attention_heads}"
            )

    @property
    def n_frames(self) -> int:
        """Mel frames of the one window the tower reads (2 x max_source_positions)."""
        return 2 * self.max_source_positions

    @classmethod
    def from_hf(cls, hf: Mapping[str, Any]) -> Qwen2AudioEncoderConfig:
        """From a transformers ``Qwen2AudioEncoderConfig`` dict (missing keys take its defaults).

        Raises:
            LoadError: an activation or embedding scale this tower does not implement.
        """
        act = hf.get("activation_function", "gelu")
        if act != "gelu":
            raise LoadError(f"audio_config.activation_function={act!r} is not supported (Qwen2-Audio uses 'gelu')")
        if hf.get("scale_embedding", False):
            raise LoadError("audio_config.scale_embedding=True is not supported (no Qwen2-Audio release uses it)")
        d = cls()
        return cls(
            num_mel_bins=int(hf.get("num_mel_bins", d.num_mel_bins)),
            d_model=int(hf.get("d_model", d.d_model)),
            encoder_layers=int(hf.get("encoder_layers", d.encoder_layers)),
            encoder_attention_heads=int(hf.get("encoder_attention_heads", d.encoder_attention_heads)),
            encoder_ffn_dim=int(hf.get("encoder_ffn_dim", d.encoder_ffn_dim)),
            max_source_positions=int(hf.get("max_source_positions", d.max_source_positions)),
        )


@dataclass
class Qwen2AudioConfig(ModelConfig):
    """Qwen2-Audio: audio tower -> linear projector -> Qwen2 causal LM.

    Attributes:
        audio: the audio tower.
        text: the causal LM (Qwen2: q/k/v bias, untied head on the 7B).
        audio_token_id: the audio placeholder ``<|AUDIO|>`` the tower states overwrite.
        audio_bos_id / audio_eos_id: ``<|audio_bos|>`` / ``<|audio_eos|>`` around the span.
        im_start_id / im_end_id: chat-turn markers (None when the vocabulary has none).
        stop_ids: generation stops at any of these (the generation config's eos ids,
            ``<|endoftext|>`` and ``<|im_end|>``).
        prompt_style: "chat" (the Instruct checkpoints' chat template: system turn, user
            turn with "Audio 1: <audio span>" and the instruction, assistant turn) or
            "base" (the pretrained checkpoint's plain "<audio span><instruction>").
        tokenizer_path: the checkpoint's tokenizer (tokenizer.json, or the directory of
            vocab.json + merges.txt); the prompt's text is tokenized with it.
    """

    audio: Qwen2AudioEncoderConfig
    text: CausalLmConfig
    audio_token_id: int = DEFAULT_AUDIO_TOKEN_ID
    audio_bos_id: int = DEFAULT_AUDIO_BOS_ID
    audio_eos_id: int = DEFAULT_AUDIO_EOS_ID
    im_start_id: int | None = DEFAULT_IM_START_ID
    im_end_id: int | None = DEFAULT_IM_END_ID
    stop_ids: tuple[int, ...] = (DEFAULT_ENDOFTEXT_ID, DEFAULT_IM_END_ID)
    prompt_style: Literal["chat", "base"] = "chat"
    tokenizer_path: str | None = None

    def __post_init__(self) -> None:
        if self.prompt_style == "chat" and (self.im_start_id is None or self.im_end_id is None):
            raise ValueError("prompt_style='chat' needs im_start_id and im_end_id")
        if not self.stop_ids:
            raise ValueError("Qwen2AudioConfig.stop_ids must name at least one stop token")

    @classmethod
    def from_hf(
        cls,
        hf: Mapping[str, Any],
        *,
        special_ids: Mapping[str, int | None] | None = None,
        stop_ids: tuple[int, ...] | None = None,
        prompt_style: Literal["chat", "base"] = "chat",
        tokenizer_path: str | None = None,
    ) -> Qwen2AudioConfig:
        """From a transformers ``qwen2_audio`` config dict.

        Args:
            hf: the parsed ``config.json``.
            special_ids: ids of the special tokens by their text (``"<|audio_bos|>"``, ...)
                as the checkpoint's tokenizer assigns them; missing ones keep the
                published Qwen2-Audio ids.
            stop_ids: the generation stop ids (default: endoftext and im_end).
            prompt_style: see the class attributes.
            tokenizer_path: see the class attributes.
        """
        if hf.get("model_type") not in (None, "qwen2_audio"):
            raise LoadError(f"model_type={hf.get('model_type')!r} is not a Qwen2-Audio config")
        text_hf = dict(hf.get("text_config") or {})
        text_type = text_hf.get("model_type", "qwen2")
        if text_type != "qwen2":
            raise LoadError(f"text_config.model_type={text_type!r} is not supported (Qwen2-Audio's LM is 'qwen2')")
        text_hf["model_type"] = "qwen2"
        ids = dict(special_ids or {})

        def pick(token: str, default: int | None) -> int | None:
            value = ids.get(token)
            return default if value is None else int(value)

        audio_token_id = int(hf.get("audio_token_index", hf.get("audio_token_id", DEFAULT_AUDIO_TOKEN_ID)))
        im_end = pick(IM_END_TOKEN, DEFAULT_IM_END_ID)
        stops = tuple(stop_ids) if stop_ids else _default_stops(pick(ENDOFTEXT_TOKEN, DEFAULT_ENDOFTEXT_ID), im_end)
        return cls(
            audio=Qwen2AudioEncoderConfig.from_hf(hf.get("audio_config") or {}),
            text=CausalLmConfig.from_hf(text_hf),
            audio_token_id=audio_token_id,
            audio_bos_id=int(pick(AUDIO_BOS_TOKEN, DEFAULT_AUDIO_BOS_ID)),
            audio_eos_id=int(pick(AUDIO_EOS_TOKEN, DEFAULT_AUDIO_EOS_ID)),
            im_start_id=pick(IM_START_TOKEN, DEFAULT_IM_START_ID),
            im_end_id=im_end,
            stop_ids=stops,
            prompt_style=prompt_style,
            tokenizer_path=tokenizer_path,
        )
