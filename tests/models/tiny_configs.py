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


TINY_CONFIGS: dict[str, Callable[[], Any]] = {
    "whisper": _whisper,
}
