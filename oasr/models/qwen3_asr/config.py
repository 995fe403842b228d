"""Qwen3-ASR configuration: the windowed audio tower, the Qwen3 causal LM, the chat
ids and the supported-language table.

Two published checkpoint layouts carry the same architecture:

* the transformers ``qwen3_asr`` layout (the ``-hf`` conversions): ``config.json`` holds
  ``audio_config`` (``model_type: qwen3_asr_encoder``), ``text_config`` (``qwen3``) and
  ``audio_token_id`` at the top level;
* the original release (``Qwen/Qwen3-ASR-0.6B`` / ``-1.7B``): everything sits under
  ``thinker_config`` (``audio_config`` ``qwen3_asr_audio_encoder``, ``text_config``
  ``qwen3_asr_text`` with a multimodal-RoPE section, the audio ids) and the top level may
  list ``support_languages``.

``Qwen3AsrConfig.from_hf`` reads either. A field a ``config.json`` omits takes the
default of that layout's own reference config class, so both sizes are built from the
config alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oasr.languages import names_of
from oasr.models.base import LoadError
from oasr.models.configs import ModelConfig
from oasr.models.decoders.causal_lm import CausalLmConfig

# Special tokens of the Qwen3-ASR tokenizer.
IM_START_TOKEN = "<|im_start|>"
IM_END_TOKEN = "<|im_end|>"
ENDOFTEXT_TOKEN = "<|endoftext|>"
AUDIO_START_TOKEN = "<|audio_start|>"
AUDIO_END_TOKEN = "<|audio_end|>"
AUDIO_PAD_TOKEN = "<|audio_pad|>"
ASR_TEXT_TOKEN = "<asr_text>"

# The forced-language names the model was trained with ("language {Name}<asr_text>"), by ISO code.
LANGUAGE_CODE_TO_NAME: dict[str, str] = names_of(
    ("ar", "yue", "zh", "cs", "da", "nl", "en", "fil", "fi", "fr", "de", "el", "hi", "hu", "id")
    + ("it", "ja", "ko", "mk", "ms", "fa", "pl", "pt", "ro", "ru", "es", "sv", "th", "tr", "vi")
)

# transformers' Qwen3ASREncoderConfig defaults (the -hf layout).
_HF_AUDIO_DEFAULTS: dict[str, Any] = {
    "num_mel_bins": 128,
    "encoder_layers": 24,
    "encoder_attention_heads": 16,
    "encoder_ffn_dim": 4096,
    "d_model": 1024,
    "n_window": 50,
    "output_dim": 3584,
    "n_window_infer": 800,
    "downsample_hidden_size": 480,
    "activation_function": "gelu",
}
# The original release's Qwen3ASRAudioEncoderConfig defaults.
_ORIGINAL_AUDIO_DEFAULTS: dict[str, Any] = {
    "num_mel_bins": 128,
    "encoder_layers": 32,
    "encoder_attention_heads": 20,
    "encoder_ffn_dim": 5120,
    "d_model": 1280,
    "n_window": 100,
    "output_dim": 3584,
    "n_window_infer": 400,
    "downsample_hidden_size": 480,
    "activation_function": "gelu",
}
# transformers' Qwen3ASRConfig text sub-config init kwargs (over Qwen3Config's defaults).
_HF_TEXT_DEFAULTS: dict[str, Any] = {
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 65536,
    "tie_word_embeddings": True,
}
# The original release's Qwen3ASRTextConfig defaults.
_ORIGINAL_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 151936,
    "hidden_size": 4096,
    "intermediate_size": 22016,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "head_dim": 128,
    "max_position_embeddings": 128000,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "rope_theta": 5000000.0,
    "attention_bias": False,
}


def post_cnn_length(n: int) -> int:
    """Frames left of ``n`` mel frames after the three (k3, s2, p1) convolutions (0 stays 0)."""
    for _ in range(3):
        n = (n - 1) // 2 + 1 if n > 0 else 0
    return n


def published_text(hidden_size: int, intermediate_size: int) -> CausalLmConfig:
    """The Qwen3 LM of a published size: 28 layers, 16 query / 8 K/V heads of 128, RoPE base
    1e6, tied embeddings over the 151936-token vocabulary."""
    return CausalLmConfig.from_hf(
        {"hidden_size": hidden_size, "intermediate_size": intermediate_size, "vocab_size": 151936, "rope_theta": 1e6},
        model_type="qwen3",
        defaults=_HF_TEXT_DEFAULTS,
    )


@dataclass
class Qwen3AsrAudioConfig(ModelConfig):
    """The audio tower: conv2d stem per mel chunk, windowed encoder, projection head.

    Attributes:
        num_mel_bins: log-mel bins of the input (128).
        d_model: encoder width; encoder_layers / encoder_attention_heads / encoder_ffn_dim:
            depth, heads, MLP width.
        downsample_hidden_size: channels of the three stem convolutions.
        output_dim: width of the projection head (the LM's hidden size).
        n_window: half a stem chunk, in mel frames (chunks of ``2 * n_window`` frames).
        n_window_infer: mel frames one attention window spans (a multiple of ``2 * n_window``).
        activation_function: stem, MLP and head activation ("gelu", exact).
        layer_norm_eps: LayerNorm epsilon (PyTorch's default, as both references build it).
    """

    num_mel_bins: int = 128
    d_model: int = 1024
    encoder_layers: int = 24
    encoder_attention_heads: int = 16
    encoder_ffn_dim: int = 4096
    downsample_hidden_size: int = 480
    output_dim: int = 2048
    n_window: int = 50
    n_window_infer: int = 800
    activation_function: str = "gelu"
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.d_model % self.encoder_attention_heads or self.d_model % 2:
            raise ValueError(
                f"audio d_model={self.d_model} must be even and divisible by encoder_attention_heads="
                f"{self.encoder_attention_heads}"
            )
        if self.activation_function != "gelu":
            raise ValueError(f"audio activation_function={self.activation_function!r} is not supported (gelu only)")
        if self.n_window < 1 or self.n_window_infer < 2 * self.n_window or self.n_window_infer % (2 * self.n_window):
            raise ValueError(
                f"n_window_infer={self.n_window_infer} must be a positive multiple of 2 * n_window={2 * self.n_window}"
            )

    @property
    def chunk_frames(self) -> int:
        """Mel frames per stem chunk (100)."""
        return 2 * self.n_window

    @property
    def chunk_tokens(self) -> int:
        """Encoder frames of a full stem chunk (13); the sinusoid table restarts every chunk."""
        return post_cnn_length(self.chunk_frames)

    @property
    def window_tokens(self) -> int:
        """Encoder frames per attention window (13 x 8 = 104)."""
        return self.chunk_tokens * (self.n_window_infer // self.chunk_frames)

    @property
    def freq_bins(self) -> int:
        """Frequency rows left after the stem (128 -> 16)."""
        return post_cnn_length(self.num_mel_bins)

    def n_tokens(self, n_frames: int) -> int:
        """Encoder frames (= audio placeholders) of ``n_frames`` mel frames."""
        full, tail = divmod(int(n_frames), self.chunk_frames)
        return full * self.chunk_tokens + post_cnn_length(tail)

    @classmethod
    def from_hf(cls, hf: Mapping[str, Any], defaults: Mapping[str, Any]) -> Qwen3AsrAudioConfig:
        """From an ``audio_config`` dict; omitted keys take ``defaults`` (the layout's)."""
        keys = (
            "num_mel_bins",
            "d_model",
            "encoder_layers",
            "encoder_attention_heads",
            "encoder_ffn_dim",
            "downsample_hidden_size",
            "output_dim",
            "n_window",
            "n_window_infer",
            "activation_function",
        )
        return cls.from_dict({k: defaults[k] if hf.get(k) is None else hf[k] for k in keys})


@dataclass
class Qwen3AsrConfig(ModelConfig):
    """Qwen3-ASR: audio tower + Qwen3 LM + the chat-prompt ids.

    Attributes:
        audio: the audio tower.
        text: the Qwen3 causal LM (``qk_norm``; tied embeddings in both releases).
        audio_token_id / audio_start_token_id / audio_end_token_id: the placeholder
            and the tokens around its span.
        im_start_token_id / im_end_token_id: chat-turn markers.
        asr_text_token_id: ``<asr_text>``, between the language preamble and the transcript.
        eos_token_ids: generation stops at any of these (``<|endoftext|>``, ``<|im_end|>``).
        languages: the forced-language names the model accepts (canonical spelling).
        tokenizer_path: where the checkpoint's tokenizer is (``tokenizer.json`` or the
            directory with ``vocab.json`` + ``merges.txt``), for ``prompt_ids``; set by the
            converter, None for a model built from a bare config.
    """

    audio: Qwen3AsrAudioConfig = field(default_factory=Qwen3AsrAudioConfig)
    text: CausalLmConfig = field(default_factory=lambda: published_text(hidden_size=2048, intermediate_size=6144))
    audio_token_id: int = 151676
    audio_start_token_id: int = 151669
    audio_end_token_id: int = 151670
    im_start_token_id: int = 151644
    im_end_token_id: int = 151645
    asr_text_token_id: int = 151704
    eos_token_ids: tuple[int, ...] = (151643, 151645)
    languages: tuple[str, ...] = tuple(LANGUAGE_CODE_TO_NAME.values())
    tokenizer_path: str | None = None

    def __post_init__(self) -> None:
        if self.audio.output_dim != self.text.hidden_size:
            raise ValueError(
                f"audio output_dim={self.audio.output_dim} must equal the LM hidden_size={self.text.hidden_size} "
                f"(tower states replace token embeddings)"
            )
        if not self.text.qk_norm:
            raise ValueError("Qwen3-ASR's LM is a Qwen3 model (qk_norm=True)")
        if not self.eos_token_ids:
            raise ValueError("eos_token_ids must name at least one stop token")

    @classmethod
    def from_hf(cls, hf: Mapping[str, Any], **ids: Any) -> Qwen3AsrConfig:
        """From a ``config.json`` of either layout.

        Args:
            hf: the parsed ``config.json``.
            ids: overrides for the token-id fields (the converter reads them from the
                tokenizer), ``languages`` and ``tokenizer_path``.

        Raises:
            LoadError: a layout or a value this implementation does not support.
        """
        try:
            if isinstance(hf.get("thinker_config"), Mapping):
                thinker = hf["thinker_config"]
                audio = Qwen3AsrAudioConfig.from_hf(thinker.get("audio_config") or {}, _ORIGINAL_AUDIO_DEFAULTS)
                text_hf = dict(thinker.get("text_config") or {})
                text = CausalLmConfig.from_hf(text_hf, model_type="qwen3", defaults=_ORIGINAL_TEXT_DEFAULTS)
                top = {**hf, **thinker}
                languages = hf.get("support_languages")
            else:
                audio = Qwen3AsrAudioConfig.from_hf(hf.get("audio_config") or {}, _HF_AUDIO_DEFAULTS)
                text_hf = dict(hf.get("text_config") or {})
                text = CausalLmConfig.from_hf(text_hf, model_type="qwen3", defaults=_HF_TEXT_DEFAULTS)
                top = hf
                languages = None
            fields: dict[str, Any] = {"audio": audio, "text": text}
            for key in ("audio_token_id", "audio_start_token_id", "audio_end_token_id"):
                if top.get(key) is not None:
                    fields[key] = int(top[key])
            eos = top.get("eos_token_id")
            if eos is not None:
                fields["eos_token_ids"] = tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))
            if languages:
                fields["languages"] = tuple(str(x) for x in languages)
            fields.update({k: v for k, v in ids.items() if v is not None})
            return cls(**fields)
        except (TypeError, ValueError) as e:
            raise LoadError(f"unsupported Qwen3-ASR config: {e}") from e


def _size(audio: dict[str, int], text: dict[str, int]) -> Qwen3AsrConfig:
    return Qwen3AsrConfig(audio=Qwen3AsrAudioConfig(**audio), text=published_text(**text))


# The two published sizes (both: 28-layer Qwen3 LM, GQA 16:8 of head_dim 128, tied embeddings).
QWEN3_ASR_SIZES: dict[str, Qwen3AsrConfig] = {
    "0.6B": _size(
        dict(d_model=896, encoder_layers=18, encoder_attention_heads=14, encoder_ffn_dim=3584, output_dim=1024),
        dict(hidden_size=1024, intermediate_size=3072),
    ),
    "1.7B": _size(
        dict(d_model=1024, encoder_layers=24, encoder_attention_heads=16, encoder_ffn_dim=4096, output_dim=2048),
        dict(hidden_size=2048, intermediate_size=6144),
    ),
}
