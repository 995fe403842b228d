"""The tokenizer interface the engine and decode strategies use."""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence
from pathlib import Path

from oasr.specs import TokenizerSpec


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


class SentencePieceTokenizer(Tokenizer):
    """A ``sentencepiece`` model file (``.model``)."""

    def __init__(self, processor) -> None:
        self._sp = processor

    @classmethod
    def from_file(cls, path: str | Path) -> SentencePieceTokenizer:
        try:
            import sentencepiece
        except ImportError as e:  # pragma: no cover - a declared dependency
            raise ImportError("sentencepiece tokenizers need the `sentencepiece` package") from e
        if not Path(path).is_file():
            raise FileNotFoundError(f"no sentencepiece model at {path}")
        return cls(sentencepiece.SentencePieceProcessor(model_file=str(path)))

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return list(self._sp.encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        return self._sp.decode([int(i) for i in ids])

    def token_to_id(self, token: str) -> int | None:
        i = self._sp.piece_to_id(token)
        return None if i == self._sp.unk_id() and token != self._sp.id_to_piece(i) else int(i)

    def id_to_token(self, token_id: int) -> str | None:
        return self._sp.id_to_piece(int(token_id)) if 0 <= int(token_id) < self.vocab_size else None


class TableTokenizer(Tokenizer):
    """A units table: one ``<unit> <id>`` per line (WeNet's ``units.txt``, k2 ``tokens.txt``),
    or the units alone, their index the id: a JSON list (FunASR's ``tokens.json``) or one a
    line (its ``tokens.txt``).

    Decoding joins the units; the SentencePiece word marker ``▁`` becomes a space and
    the leading space is dropped, so BPE and character units both read naturally.
    Encoding is greedy longest-match over the units (word-initial pieces take the
    marker), enough for hotwords and prompts on a units-only checkpoint.
    """

    WORD_MARK = "\u2581"

    def __init__(self, units: dict[int, str]) -> None:
        self._id_to_unit = dict(units)
        self._unit_to_id = {u: i for i, u in units.items()}
        self._max_len = max((len(u) for u in self._unit_to_id), default=1)

    @classmethod
    def from_file(cls, path: str | Path) -> TableTokenizer:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no units table at {path}")
        if path.suffix == ".json":  # FunASR's tokens.json: a list, the index is the id
            tokens = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
                raise ValueError(f"{path}: expected a JSON list of token strings")
            return cls(dict(enumerate(tokens)))
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if lines and all(len(line.split()) == 1 for line in lines):  # FunASR's tokens.txt: one unit a line
            return cls(dict(enumerate(lines)))
        units: dict[int, str] = {}
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                raise ValueError(f"{path}:{n}: expected '<unit> <id>', got {line!r}")
            units[int(parts[1])] = parts[0]
        return cls(units)

    @property
    def vocab_size(self) -> int:
        return max(self._id_to_unit, default=-1) + 1

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in text.split():
            piece_text = self.WORD_MARK + word if (self.WORD_MARK + word[:1]) in self._prefixes() else word
            i = 0
            while i < len(piece_text):
                for j in range(min(len(piece_text), i + self._max_len), i, -1):
                    unit = self._unit_to_id.get(piece_text[i:j])
                    if unit is not None:
                        ids.append(unit)
                        i = j
                        break
                else:
                    unk = self._unit_to_id.get("<unk>")
                    if unk is None:
                        raise ValueError(f"{piece_text[i]!r} is not in the units table and it has no <unk>")
                    ids.append(unk)
                    i += 1
        return ids

    def _prefixes(self) -> set[str]:
        return {u[:2] for u in self._unit_to_id if u.startswith(self.WORD_MARK)}

    def decode(self, ids: Sequence[int]) -> str:
        text = "".join(self._id_to_unit.get(int(i), "") for i in ids)
        return text.replace(self.WORD_MARK, " ").lstrip(" ")

    def token_to_id(self, token: str) -> int | None:
        return self._unit_to_id.get(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._id_to_unit.get(int(token_id))


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
    if spec.kind == "sentencepiece":
        return SentencePieceTokenizer.from_file(spec.path or "")
    if spec.kind == "table":
        return TableTokenizer.from_file(spec.path or "")
    raise ValueError(f"unknown tokenizer kind {spec.kind!r}")
