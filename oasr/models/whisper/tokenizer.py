"""Whisper's special tokens, language table and word splitting, over any ``Tokenizer``."""

from __future__ import annotations

import operator
import string
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from oasr.languages import LANGUAGES, normalize_language  # noqa: F401 (re-exported)
from oasr.languages import UNSPACED_LANGUAGES as _UNSPACED_LANGUAGES
from oasr.tokenizers import Tokenizer


def special_id(name: str, via: str = "special") -> property:
    """A read-only property: the id of Whisper's special token ``name``, read off the owner's
    ``WhisperSpecialTokens`` at the dotted path ``via``."""
    return property(operator.attrgetter(f"{via}.{name}"), doc=f"The id of Whisper's ``{name}`` token.")


@dataclass(frozen=True)
class WhisperSpecialTokens:
    """The ids Whisper's decoding needs (all from the checkpoint's vocabulary)."""

    eot: int
    sot: int
    sot_prev: int | None
    sot_lm: int | None
    no_timestamps: int
    timestamp_begin: int
    no_speech: int | None
    transcribe: int | None
    translate: int | None
    language_ids: tuple[tuple[str, int], ...]  # (code, id) in vocabulary order

    @property
    def is_multilingual(self) -> bool:
        return len(self.language_ids) > 0


class WhisperTokenizer:
    """Whisper's view of a tokenizer: special tokens, prompts, word splitting.

    Args:
        tokenizer: the vocabulary (``tokenizer.json`` of the checkpoint).
        special: special ids (``WhisperSpecialTokens.from_tokenizer`` derives them).
    """

    def __init__(self, tokenizer: Tokenizer, special: WhisperSpecialTokens) -> None:
        self.tokenizer = tokenizer
        self.special = special

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer, multilingual: bool = True) -> WhisperTokenizer:
        """Derive the special ids from the vocabulary.

        Args:
            multilingual: whether the checkpoint is multilingual (vocabulary size >=
                51865). English-only vocabularies contain language tokens too, but
                their prompts never use them.
        """

        def tid(tok: str) -> int | None:
            return tokenizer.token_to_id(tok)

        eot, sot, no_ts = tid("<|endoftext|>"), tid("<|startoftranscript|>"), tid("<|notimestamps|>")
        if eot is None or sot is None or no_ts is None:
            raise ValueError(
                "the tokenizer is not a Whisper vocabulary: it lacks <|endoftext|>, "
                "<|startoftranscript|> or <|notimestamps|>"
            )
        # Every id from <|endoftext|> up is a control token (languages, tasks, timestamps), never
        # read from user text, whether or not the vocabulary file flags it special.
        tokenizer.mark_special(range(eot, tokenizer.vocab_size))
        langs: tuple[tuple[str, int], ...] = ()
        if multilingual:
            found = [(code, i) for code in LANGUAGES if (i := tid(f"<|{code}|>")) is not None]
            langs = tuple(sorted(found, key=lambda x: x[1]))
        no_speech = tid("<|nospeech|>")
        if no_speech is None:
            no_speech = tid("<|nocaptions|>")
        special = WhisperSpecialTokens(
            eot=eot,
            sot=sot,
            sot_prev=tid("<|startofprev|>"),
            sot_lm=tid("<|startoflm|>"),
            no_timestamps=no_ts,
            timestamp_begin=no_ts + 1,
            no_speech=no_speech,
            transcribe=tid("<|transcribe|>"),
            translate=tid("<|translate|>"),
            language_ids=langs,
        )
        return cls(tokenizer, special)

    # -- ids ---------------------------------------------------------------------

    eot = special_id("eot")
    timestamp_begin = special_id("timestamp_begin")

    @cached_property
    def language_to_id(self) -> dict[str, int]:
        return dict(self.special.language_ids)

    @cached_property
    def id_to_language(self) -> dict[int, str]:
        return {i: c for c, i in self.special.language_ids}

    def language_token(self, language: str) -> int:
        code = normalize_language(language)
        if code not in self.language_to_id:
            raise ValueError(f"language {language!r} is not in this model's vocabulary")
        return self.language_to_id[code]

    def sot_sequence(self, language: str | None, task: str | None, *, without_timestamps: bool = False) -> list[int]:
        """``<|startoftranscript|> [<|lang|> <|task|>] [<|notimestamps|>]``."""
        seq = [self.special.sot]
        if self.special.is_multilingual:
            if language is not None:
                seq.append(self.language_token(language))
            if task is not None:
                tok = self.special.translate if task == "translate" else self.special.transcribe
                if tok is not None:
                    seq.append(tok)
        if without_timestamps:
            seq.append(self.special.no_timestamps)
        return seq

    # -- text ----------------------------------------------------------------------

    def encode_text(self, text: str) -> list[int]:
        """Ids of ``text`` as plain text (``Tokenizer.encode_text``): a prompt, prefix or hotwords
        that spell ``<|de|>`` or ``<|endoftext|>`` stay text, below ``<|endoftext|>``."""
        return self.tokenizer.encode_text(text)

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of the text tokens (every special and timestamp token is dropped)."""
        return self.tokenizer.decode([t for t in tokens if t < self.eot])

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        """Exact UTF-8 bytes of the text tokens (``Tokenizer.decode_bytes``), for streaming."""
        return self.tokenizer.decode_bytes([t for t in tokens if t < self.eot])

    def decode_with_timestamps(self, tokens: Sequence[int]) -> str:
        """Text with timestamp tokens rendered as ``<|1.08|>``."""
        out: list[list[int] | str] = [[]]
        for t in tokens:
            if t >= self.timestamp_begin:
                out.append(f"<|{(t - self.timestamp_begin) * 0.02:.2f}|>")
                out.append([])
            else:
                out[-1].append(t)  # type: ignore[union-attr]
        return "".join(s if isinstance(s, str) else self.tokenizer.decode([t for t in s if t < self.eot]) for s in out)

    @cached_property
    def non_speech_tokens(self) -> tuple[int, ...]:
        """Ids of symbols / speaker tags Whisper should not emit (``suppress_tokens=[-1]``).

        Keeps single-character tokens for "-" and "'" which occur inside words, and
        suppresses them only when they start a token with a leading space.
        """
        symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
        symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
        miscellaneous = set("♩♪♫♬♭♮♯")
        result: set[int] = set()
        for sym in ("-", "'"):
            ids = self.encode_text(" " + sym)
            if ids:
                result.add(ids[0])
        for sym in symbols + list(miscellaneous):
            for ids in (self.encode_text(sym), self.encode_text(" " + sym)):
                if len(ids) == 1 or (sym in miscellaneous and ids):
                    result.add(ids[0])
        return tuple(sorted(result))

    # -- words ---------------------------------------------------------------------

    def split_to_word_tokens(self, tokens: Sequence[int], language: str | None) -> tuple[list[str], list[list[int]]]:
        """Group text tokens into words (by spaces, or by unicode boundaries for
        unspaced scripts)."""
        if language in _UNSPACED_LANGUAGES:
            return self._split_unicode(tokens)
        return self._split_spaces(tokens)

    def _split_unicode(self, tokens: Sequence[int]) -> tuple[list[str], list[list[int]]]:
        replacement = "\ufffd"
        decoded_full = self.decode_with_timestamps(tokens)
        words: list[str] = []
        word_tokens: list[list[int]] = []
        current: list[int] = []
        offset = 0
        for t in tokens:
            current.append(t)
            decoded = self.decode_with_timestamps(current)
            # A token that ends mid-character decodes to U+FFFD: keep accumulating.
            pos = offset + decoded.index(replacement) if replacement in decoded else -1
            if replacement not in decoded or (0 <= pos < len(decoded_full) and decoded_full[pos] == replacement):
                words.append(decoded)
                word_tokens.append(current)
                current = []
                offset += len(decoded)
        return words, word_tokens

    def _split_spaces(self, tokens: Sequence[int]) -> tuple[list[str], list[list[int]]]:
        subwords, subword_tokens = self._split_unicode(tokens)
        words: list[str] = []
        word_tokens: list[list[int]] = []
        for sub, toks in zip(subwords, subword_tokens):
            special = toks[0] >= self.eot
            with_space = sub.startswith(" ")
            punctuation = sub.strip() in string.punctuation
            if special or with_space or punctuation or not words:
                words.append(sub)
                word_tokens.append(list(toks))
            else:
                words[-1] += sub
                word_tokens[-1].extend(toks)
        return words, word_tokens
