"""What the ``aed`` strategy needs of a model's vocabulary, as a protocol: the model supplies it
(``BaseAsrModel.aed_vocabulary(tokenizer)``, required by the AED capability), so the engine
never imports a family. Whisper's ``WhisperTokenizer`` is the one implementation today.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class AedSpecialTokens(Protocol):
    """The special ids of an attention decoder with Whisper-style prompts and timestamps."""

    eot: int
    sot: int
    sot_prev: int | None
    no_timestamps: int
    timestamp_begin: int
    no_speech: int | None
    language_ids: tuple[tuple[str, int], ...]  # (code, id) in vocabulary order

    @property
    def is_multilingual(self) -> bool: ...


class AedVocabulary(Protocol):
    """Prompts, specials, language tokens and word splitting of an AED model's vocabulary."""

    special: AedSpecialTokens

    @property
    def eot(self) -> int: ...

    @property
    def timestamp_begin(self) -> int: ...

    @property
    def language_to_id(self) -> dict[str, int]: ...

    @property
    def id_to_language(self) -> dict[int, str]: ...

    @property
    def non_speech_tokens(self) -> tuple[int, ...]: ...

    def sot_sequence(self, language: str | None, task: str | None, *, without_timestamps: bool = False) -> list[int]:
        """The start-of-transcript prompt for a language and task."""
        ...

    def encode_text(self, text: str) -> list[int]:
        """Ids of user text (a prompt, prefix or hotwords) as plain text: no control token."""
        ...

    def decode(self, tokens: Sequence[int]) -> str: ...

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        """UTF-8 bytes of the text tokens (a token may end inside a character), for streaming."""
        ...

    def split_to_word_tokens(self, tokens: Sequence[int], language: str | None) -> tuple[list[str], list[list[int]]]:
        """Words and their token ids (for word timestamps)."""
        ...


__all__ = ["AedSpecialTokens", "AedVocabulary"]
