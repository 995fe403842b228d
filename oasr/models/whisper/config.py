"""Whisper configuration: architecture sizes of every published checkpoint."""

from __future__ import annotations

from dataclasses import dataclass

from oasr.models.configs import ModelConfig


@dataclass
class WhisperConfig(ModelConfig):
    """Whisper's architecture (the generation-control ids live in the DecodingSpec).

    Attributes:
        n_mels: mel bins of the input (80; 128 for large-v3 and turbo).
        n_audio_ctx: encoder positions (1500 = 30 s after the stride-2 conv).
        n_audio_state / n_audio_head / n_audio_layer: encoder width, heads, layers.
        n_vocab: vocabulary size.
        n_text_ctx: decoder positions (448).
        n_text_state / n_text_head / n_text_layer: decoder width, heads, layers.
        encoder_ffn_dim / decoder_ffn_dim: MLP widths (4 x width when None).
        layer_norm_eps: LayerNorm epsilon.
    """

    n_mels: int = 80
    n_audio_ctx: int = 1500
    n_audio_state: int = 512
    n_audio_head: int = 8
    n_audio_layer: int = 6
    n_vocab: int = 51865
    n_text_ctx: int = 448
    n_text_state: int = 512
    n_text_head: int = 8
    n_text_layer: int = 6
    encoder_ffn_dim: int | None = None
    decoder_ffn_dim: int | None = None
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.n_audio_state % self.n_audio_head or self.n_text_state % self.n_text_head:
            raise ValueError("Whisper widths must be divisible by their head counts")
        if self.encoder_ffn_dim is None:
            self.encoder_ffn_dim = 4 * self.n_audio_state
        if self.decoder_ffn_dim is None:
            self.decoder_ffn_dim = 4 * self.n_text_state

    @property
    def n_samples(self) -> int:
        """Input samples of one window (the encoder sees 2 x n_audio_ctx frames of 160 samples)."""
        return self.n_audio_ctx * 2 * 160


def _size(
    width: int, heads: int, layers: int, n_mels: int = 80, n_vocab: int = 51865, text_layers: int | None = None
) -> WhisperConfig:
    return WhisperConfig(
        n_mels=n_mels,
        n_audio_state=width,
        n_audio_head=heads,
        n_audio_layer=layers,
        n_vocab=n_vocab,
        n_text_state=width,
        n_text_head=heads,
        n_text_layer=layers if text_layers is None else text_layers,
    )


# Every published OpenAI Whisper size ("*.en" have the 51864-token English vocabulary).
WHISPER_SIZES: dict[str, WhisperConfig] = {
    "tiny": _size(384, 6, 4),
    "tiny.en": _size(384, 6, 4, n_vocab=51864),
    "base": _size(512, 8, 6),
    "base.en": _size(512, 8, 6, n_vocab=51864),
    "small": _size(768, 12, 12),
    "small.en": _size(768, 12, 12, n_vocab=51864),
    "medium": _size(1024, 16, 24),
    "medium.en": _size(1024, 16, 24, n_vocab=51864),
    "large-v1": _size(1280, 20, 32),
    "large-v2": _size(1280, 20, 32),
    "large-v3": _size(1280, 20, 32, n_mels=128, n_vocab=51866),
    "large-v3-turbo": _size(1280, 20, 32, n_mels=128, n_vocab=51866, text_layers=4),
}
