"""faster-whisper's ``Tokenizer``: Whisper's special tokens and word splitting over a Hugging Face
``tokenizers.Tokenizer``, on oasr's ``WhisperTokenizer``."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

from oasr.models.whisper.tokenizer import special_id

__all__ = ["Tokenizer"]


class Tokenizer:
    """Whisper's tokenizer, as faster-whisper's ``Tokenizer(hf_tokenizer, multilingual, task, language)``.

    Raises:
        ValueError: an unknown ``task`` or ``language``.
    """

    def __init__(self, tokenizer, multilingual: bool, task: str | None = None, language: str | None = None) -> None:
        from tokenizers import Tokenizer as HFTok

        from oasr.models.whisper.tokenizer import WhisperTokenizer
        from oasr.tokenizers import HFTokenizer

        self.tokenizer = tokenizer
        # oasr's wrapper sets encode_special_tokens on the object it takes: give it a copy.
        self._w = WhisperTokenizer.from_tokenizer(HFTokenizer(HFTok.from_str(tokenizer.to_str())), multilingual)
        self.multilingual = multilingual
        sp = self._w.special
        if multilingual:
            if task not in (None, "transcribe", "translate"):
                raise ValueError(f"'{task}' is not a valid task (accepted tasks: transcribe, translate)")
            if language is not None and language not in dict(sp.language_ids):
                raise ValueError(f"'{language}' is not a valid language code")
            self.task = sp.transcribe if task in (None, "transcribe") else sp.translate
            self.language_code = language or "en"
            self.language = sp.language_ids and dict(sp.language_ids)[self.language_code]
        else:
            self.task = None
            self.language = None
            self.language_code = "en"

    transcribe = special_id("transcribe", via="_w.special")
    translate = special_id("translate", via="_w.special")
    sot = special_id("sot", via="_w.special")
    sot_lm = special_id("sot_lm", via="_w.special")
    sot_prev = special_id("sot_prev", via="_w.special")
    eot = special_id("eot", via="_w.special")
    no_timestamps = special_id("no_timestamps", via="_w.special")
    timestamp_begin = special_id("timestamp_begin", via="_w.special")

    @property
    def sot_sequence(self) -> list[int]:
        seq = [self.sot]
        if self.language is not None:
            seq.append(self.language)
        if self.task is not None:
            seq.append(self.task)
        return seq

    @cached_property
    def non_speech_tokens(self) -> tuple[int, ...]:
        return self._w.non_speech_tokens

    def encode(self, text: str) -> list[int]:
        return self._w.encode_text(text)

    def decode(self, tokens: Sequence[int]) -> str:
        return self._w.decode([t for t in tokens if t < self.eot])

    def decode_with_timestamps(self, tokens: Sequence[int]) -> str:
        return self._w.decode_with_timestamps(tokens)

    def split_to_word_tokens(self, tokens: Sequence[int]) -> tuple[list[str], list[list[int]]]:
        return self._w.split_to_word_tokens(tokens, self.language_code)

    def split_tokens_on_unicode(self, tokens: Sequence[int]) -> tuple[list[str], list[list[int]]]:
        return self._w._split_unicode(tokens)

    def split_tokens_on_spaces(self, tokens: Sequence[int]) -> tuple[list[str], list[list[int]]]:
        return self._w._split_spaces(tokens)


def _suppressed(tokenizer: Tokenizer, suppress_tokens: Sequence[int] | None) -> tuple[int, ...]:
    """The ids a decode suppresses for ``suppress_tokens`` (-1: the non-speech symbols), with
    Whisper's task and start-of tokens always added (faster-whisper's ``get_suppressed_tokens``)."""
    ids = set(suppress_tokens or ())
    if -1 in ids:
        ids = (ids - {-1}) | set(tokenizer.non_speech_tokens)
    ids |= {
        t
        for t in (tokenizer.transcribe, tokenizer.translate, tokenizer.sot, tokenizer.sot_prev, tokenizer.sot_lm)
        if t is not None
    }
    ids.add(tokenizer.no_timestamps - 1)  # <|nospeech|> / <|nocaptions|>, just before <|notimestamps|>
    return tuple(sorted(ids))
