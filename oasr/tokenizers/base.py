"""The tokenizer interface the engine and decode strategies use."""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence
from pathlib import Path

from oasr.models.base import TokenizerSpec


class Tokenizer(abc.ABC):
    """Text <-> token ids."""

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of ids the tokenizer knows (special tokens included)."""

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Ids of ``text``, without special tokens."""

    @abc.abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens are the caller's to filter)."""

    @abc.abstractmethod
    def token_to_id(self, token: str) -> int | None:
        """Id of a token string, or None."""

    @abc.abstractmethod
    def id_to_token(self, token_id: int) -> str | None:
        """Token string of an id, or None."""

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """UTF-8 bytes of ``ids``, for callers that must not split a multi-byte character."""
        return self.decode(ids).encode("utf-8")


class HFTokenizer(Tokenizer):
    """A Hugging Face ``tokenizers.Tokenizer`` (a ``tokenizer.json``)."""

    def __init__(self, tok) -> None:
        self._tok = tok
        self._byte_decoder: dict[str, int] | None = None

    @classmethod
    def from_file(cls, path: str | Path) -> HFTokenizer:
        from tokenizers import Tokenizer as _Tok

        return cls(_Tok.from_file(str(path)))

    @classmethod
    def from_vocab_merges(
        cls, vocab: str | Path, merges: str | Path, added_tokens: dict[int, str] | None = None
    ) -> HFTokenizer:
        """A byte-level BPE from GPT-2 style ``vocab.json`` + ``merges.txt`` files."""
        from tokenizers import AddedToken, decoders, pre_tokenizers
        from tokenizers import Tokenizer as _Tok
        from tokenizers.models import BPE

        tok = _Tok(BPE.from_file(str(vocab), str(merges)))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        if added_tokens:
            for _, content in sorted(added_tokens.items()):
                tok.add_special_tokens([AddedToken(content, special=True, normalized=False)])
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(int(token_id))

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """Exact bytes for byte-level BPE vocabularies (a token may end mid-character)."""
        if self._byte_decoder is None:
            self._byte_decoder = _gpt2_byte_decoder()
        out = bytearray()
        for i in ids:
            piece = self._tok.id_to_token(int(i))
            if piece is None:
                continue
            if all(c in self._byte_decoder for c in piece):
                out.extend(self._byte_decoder[c] for c in piece)
            else:  # an added (special) token is stored verbatim
                out.extend(piece.encode("utf-8"))
        return bytes(out)


def _gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's reversible byte <-> printable-unicode map, inverted."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def load_tokenizer(spec: TokenizerSpec | None) -> Tokenizer | None:
    """Build the tokenizer a checkpoint declares (``None`` for kind "none").

    Raises:
        ValueError: an unknown kind; FileNotFoundError: a missing file.
    """
    if spec is None or spec.kind == "none":
        return None
    if spec.kind == "huggingface":
        path = Path(spec.path or "")
        if path.is_file():
            return HFTokenizer.from_file(path)
        vocab, merges = path / "vocab.json", path / "merges.txt"
        if vocab.is_file() and merges.is_file():
            added = {}
            cfg = path / "tokenizer_config.json"
            if cfg.is_file():
                for k, v in json.loads(cfg.read_text()).get("added_tokens_decoder", {}).items():
                    added[int(k)] = v["content"]
            return HFTokenizer.from_vocab_merges(vocab, merges, added)
        raise FileNotFoundError(f"no tokenizer.json (or vocab.json + merges.txt) at {path}")
    raise ValueError(f"unknown tokenizer kind {spec.kind!r}")
