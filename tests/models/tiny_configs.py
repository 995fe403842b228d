"""A tiny config for every registered architecture, built on CPU in the contract tests.

A newly registered architecture without an entry here fails
``test_every_architecture_has_a_tiny_config`` instead of going untested.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _whisper() -> Any:
    from oasr.models.whisper import WhisperConfig

    return WhisperConfig(
        n_mels=80,
        n_audio_ctx=1500,
        n_audio_state=16,
        n_audio_head=2,
        n_audio_layer=2,
        n_vocab=51865,
        n_text_ctx=448,
        n_text_state=16,
        n_text_head=2,
        n_text_layer=2,
    )


def _lasr() -> Any:
    from oasr.models.lasr import LasrConfig

    # Even depthwise kernel, as MedASR's 32 (padded one frame more on the right).
    return LasrConfig(
        vocab_size=45,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        conv_kernel_size=8,
        subsampling_conv_channels=16,
    )


def _parakeet() -> Any:
    from oasr.models.parakeet import ParakeetConfig, ParakeetEncoderConfig

    encoder = ParakeetEncoderConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        subsampling_conv_channels=8,
    )
    return ParakeetConfig(encoder=encoder, vocab_size=45)


def _conformer() -> Any:
    from oasr.models.conformer import ConformerEncoderConfig, ConformerModelConfig
    from oasr.models.decoders.transformer_decoder import TransformerDecoderConfig

    encoder = ConformerEncoderConfig(
        input_dim=80, output_size=16, attention_heads=2, linear_units=32, num_blocks=2, cnn_module_kernel=7
    )
    decoder = TransformerDecoderConfig(
        vocab_size=45, d_model=16, attention_heads=2, linear_units=32, num_blocks=1, bidirectional=True, r_num_blocks=1
    )
    return ConformerModelConfig(encoder=encoder, vocab_size=45, decoder=decoder)


TINY_CONFIGS: dict[str, Callable[[], Any]] = {
    "conformer": _conformer,
    "lasr": _lasr,
    "parakeet": _parakeet,
    "whisper": _whisper,
}
