"""The tokenizer interface the engine and decode strategies use.

Text a user sends (a prompt, a prefix, hotwords, a speech-LLM's context) never becomes a control
token: ``encode_text`` encodes plain text, a special token's string in it (``<|endoftext|>``,
``<|im_start|>``) split into ordinary pieces as transformers' ``split_special_tokens=True`` does,
for every kind (Hugging Face ``tokenizers`` files, sentencepiece models, units tables). A prompt
template goes through ``encode_prompt``: its ``Control`` parts, written by a model's own code, read
the special tokens they name; the user text between them is plain text.

"Special" is what the vocabulary marks (Hugging Face added tokens flagged special, sentencepiece
control and unknown pieces, ``<...>`` units of a table) plus what the checkpoint declares
(``TokenizerSpec.special_ids``, applied by ``load_tokenizer``; a family may ``mark_special`` more).
"""

from __future__ import annotations

import abc
import importlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from oasr.specs import TokenizerSpec


@dataclass(frozen=True)
class Control:
    """Template text of a prompt, written by a model's code (never by a user): the special
    tokens written in it are read as those tokens by ``Tokenizer.encode_prompt``."""

    text: str


class Tokenizer(abc.ABC):
    """Text <-> token ids."""

    word_delimiter_id: int | None = None
    """The id of a token that only separates words (a character CTC vocabulary's ``|``), which
    the word grouping reads as a boundary; None where words are marked on their pieces."""

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of ids the tokenizer knows (special tokens included)."""

    @abc.abstractmethod
    def encode_text(self, text: str) -> list[int]:
        """Ids of ``text`` as plain text: a special token's string in it is split into ordinary
        pieces, never read as the token (unknown characters may still give the unknown id)."""

    @abc.abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens are the caller's to filter)."""

    @abc.abstractmethod
    def token_to_id(self, token: str) -> int | None:
        """Id of a token string, or None."""

    @abc.abstractmethod
    def id_to_token(self, token_id: int) -> str | None:
        """Token string of an id, or None."""

    @property
    @abc.abstractmethod
    def special_ids(self) -> frozenset[int]:
        """Ids of the control tokens: ``encode_text`` never reads them from text."""

    @abc.abstractmethod
    def _mark_special(self, ids: set[int]) -> None:
        """Make ``ids`` control tokens of this kind of vocabulary (see ``mark_special``)."""

    def mark_special(self, ids: Iterable[int]) -> None:
        """Treat ``ids`` as control tokens too (ids the checkpoint declares not text, such as a
        transducer's blank or Whisper's timestamps): ``encode_text`` no longer reads them from
        text, ``encode_prompt`` reads them in ``Control`` parts. Ids the vocabulary lacks are
        ignored."""
        self._mark_special({int(i) for i in ids})
        for name in ("special_tokens", "_special_split"):
            self.__dict__.pop(name, None)

    @cached_property
    def special_tokens(self) -> dict[str, int]:
        """The control tokens by their text."""
        return {tok: i for i in sorted(self.special_ids) if (tok := self.id_to_token(i))}

    @cached_property
    def _special_split(self) -> re.Pattern[str] | None:
        # Longest first: at each position the longest special string wins, as tokenizers matches.
        tokens = sorted(self.special_tokens, key=len, reverse=True)
        return re.compile("(" + "|".join(map(re.escape, tokens)) + ")") if tokens else None

    def encode_prompt(self, parts: Iterable[str | Control]) -> list[int]:
        """Ids of a prompt template: the special tokens written in its ``Control`` parts are
        their ids; every other character (user text included) is plain text, each run between
        two special tokens encoded as one (``encode_text``), as the tokenizer itself splits a
        rendered template at its special tokens.

        Example: ``[Control("<|im_start|>system\\n"), context, Control("<|im_end|>")]``
        gives ``<|im_start|>``'s id, the plain ids of ``"system\\n" + context``, then
        ``<|im_end|>``'s id, whatever ``context`` holds.
        """
        runs: list[str | int] = []
        split = self._special_split
        for part in parts:
            if isinstance(part, Control):
                pieces = split.split(part.text) if split is not None else [part.text]
                for k, piece in enumerate(pieces):  # odd positions are the special strings
                    if k % 2:
                        runs.append(self.special_tokens[piece])
                    elif piece:
                        _add_text(runs, piece)
            elif part:
                _add_text(runs, str(part))
        ids: list[int] = []
        for run in runs:
            ids.extend(self.encode_text(run) if isinstance(run, str) else (run,))
        return ids

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """UTF-8 bytes of ``ids``, for callers that must not split a multi-byte character."""
        return self.decode(ids).encode("utf-8")


def _add_text(runs: list[str | int], text: str) -> None:
    if runs and isinstance(runs[-1], str):
        runs[-1] += text
    else:
        runs.append(text)


class HFTokenizer(Tokenizer):
    """A Hugging Face ``tokenizers.Tokenizer`` (a ``tokenizer.json``); it takes ``tok`` over:
    ``encode_special_tokens`` is set, so encoding splits the special added tokens as plain text
    (transformers' ``split_special_tokens=True``). Added tokens not flagged special are text
    by the tokenizer's own declaration and are read as it reads them."""

    def __init__(self, tok) -> None:
        self._tok = tok
        tok.encode_special_tokens = True
        self._byte_decoder: dict[str, int] | None = None

    @classmethod
    def from_file(cls, path: str | Path) -> HFTokenizer:
        from tokenizers import Tokenizer as _Tok

        return cls(_Tok.from_file(str(path)))

    @classmethod
    def from_vocab_merges(
        cls, vocab: str | Path, merges: str | Path, added_tokens: dict[int, tuple[str, bool]] | None = None
    ) -> HFTokenizer:
        """A byte-level BPE from GPT-2 style ``vocab.json`` + ``merges.txt`` files, with
        ``added_tokens`` as ``id -> (content, special)`` (``tokenizer_config.json``'s
        ``added_tokens_decoder``), added in id order."""
        from tokenizers import AddedToken, decoders, pre_tokenizers
        from tokenizers import Tokenizer as _Tok
        from tokenizers.models import BPE

        tok = _Tok(BPE.from_file(str(vocab), str(merges)))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        for _, (content, special) in sorted((added_tokens or {}).items()):
            token = AddedToken(content, special=special, normalized=False)
            if special:
                tok.add_special_tokens([token])
            else:
                tok.add_tokens([token])
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode_text(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(int(token_id))

    @property
    def special_ids(self) -> frozenset[int]:
        return frozenset(i for i, t in self._tok.get_added_tokens_decoder().items() if t.special)

    def _mark_special(self, ids: set[int]) -> None:
        # An added token re-added with special=True keeps its id and is flagged special. A piece
        # of the model's own vocabulary is left as it is (the model may still spell it).
        from tokenizers import AddedToken

        again = [
            AddedToken(
                t.content,
                single_word=t.single_word,
                lstrip=t.lstrip,
                rstrip=t.rstrip,
                normalized=t.normalized,
                special=True,
            )
            for i, t in self._tok.get_added_tokens_decoder().items()
            if i in ids and not t.special
        ]
        if again:
            self._tok.add_special_tokens(again)

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """Exact bytes for byte-level BPE vocabularies (a token may end mid-character). Any other
        vocabulary (a SentencePiece-style Metaspace BPE: Moonshine's) is decoded by its own decoder,
        special tokens skipped as transformers' ``decode(skip_special_tokens=True)`` does, without
        the replacement characters of a byte sequence cut short (they come back whole later)."""
        if self._tok.decoder is not None and type(self._tok.decoder).__name__ != "ByteLevel":
            return self._tok.decode(list(ids), skip_special_tokens=True).rstrip("\ufffd").encode("utf-8")
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
    """A ``sentencepiece`` model file (``.model``).

    sentencepiece itself never reads a control or unknown piece from text; a piece that is
    declared special (``mark_special``) but readable (user-defined, such as icefall's ``<blk>``,
    or normal) is encoded by a copy of the model where it is a control piece.
    """

    def __init__(self, processor) -> None:
        self._sp = processor
        self._encoder = processor  # what encode_text runs (a copy once readable pieces are special)
        n = processor.get_piece_size()
        self._special = frozenset(i for i in range(n) if processor.is_control(i) or processor.is_unknown(i))

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

    def encode_text(self, text: str) -> list[int]:
        return list(self._encoder.encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        return self._sp.decode([int(i) for i in ids])

    def token_to_id(self, token: str) -> int | None:
        i = self._sp.piece_to_id(token)
        return None if i == self._sp.unk_id() and token != self._sp.id_to_piece(i) else int(i)

    def id_to_token(self, token_id: int) -> str | None:
        return self._sp.id_to_piece(int(token_id)) if 0 <= int(token_id) < self.vocab_size else None

    @property
    def special_ids(self) -> frozenset[int]:
        return self._special

    def _mark_special(self, ids: set[int]) -> None:
        import sentencepiece

        sp = self._sp
        self._special |= {i for i in ids if 0 <= i < self.vocab_size}
        readable = {
            i for i in self._special if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i) or sp.is_byte(i))
        }
        if readable:
            proto = _with_control_pieces(sp.serialized_model_proto(), readable)
            self._encoder = sentencepiece.SentencePieceProcessor(model_proto=proto)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(data: bytes) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(field number, the field's bytes, its payload or None) of a protobuf message, in order."""
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = _read_varint(data, pos)
        wire = key & 7
        payload = None
        if wire == 0:
            _, pos = _read_varint(data, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            n, body = _read_varint(data, pos)
            pos = body + n
            payload = data[body:pos]
        else:
            raise ValueError(f"not a sentencepiece model: protobuf wire type {wire}")
        yield key >> 3, data[start:pos], payload


_PIECES, _PIECE_TYPE, _CONTROL = 1, 3, 3  # ModelProto.pieces, SentencePiece.type, Type.CONTROL


def _with_control_pieces(model: bytes, ids: set[int]) -> bytes:
    """A serialized sentencepiece ``ModelProto`` with the pieces ``ids`` turned CONTROL (which
    sentencepiece never reads from text). Read in protobuf's wire format: ``pieces`` is field 1,
    each ``SentencePiece`` holds ``type`` as field 3."""
    out = bytearray()
    index = 0
    for field, raw, payload in _fields(model):
        if field == _PIECES and payload is not None:
            if index in ids:
                kept = b"".join(r for f, r, _ in _fields(payload) if f != _PIECE_TYPE)
                piece = kept + _varint(_PIECE_TYPE << 3) + _varint(_CONTROL)
                raw = _varint(_PIECES << 3 | 2) + _varint(len(piece)) + piece
            index += 1
        out += raw
    return bytes(out)


class TableTokenizer(Tokenizer):
    """A units table: one ``<unit> <id>`` per line (WeNet's ``units.txt``, k2 ``tokens.txt``),
    or the units alone, their index the id: a JSON list (FunASR's ``tokens.json``) or one a
    line (its ``tokens.txt``).

    Decoding joins the units; the SentencePiece word marker ``▁`` becomes a space and
    the leading space is dropped, so BPE and character units both read naturally.
    Encoding is greedy longest-match over the text units (word-initial pieces take the
    marker), enough for hotwords and prompts on a units-only checkpoint. Units written
    ``<...>`` (``<blank>``, ``<sos/eos>``, ``<|zh|>``) and the declared special ids are
    control tokens, never matched in text; a character no text unit covers is ``<unk>``.
    """

    WORD_MARK = "\u2581"

    def __init__(self, units: dict[int, str]) -> None:
        self._id_to_unit = dict(units)
        self._unit_to_id = {u: i for i, u in units.items()}
        self._special = frozenset(i for i, u in units.items() if len(u) > 2 and u[0] == "<" and u[-1] == ">")
        self._index_text_units()

    def _index_text_units(self) -> None:
        self._text_units = {u: i for u, i in self._unit_to_id.items() if i not in self._special}
        self._max_len = max((len(u) for u in self._text_units), default=1)
        self._prefixes = {u[:2] for u in self._text_units if u.startswith(self.WORD_MARK)}

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

    def encode_text(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in text.split():
            piece_text = self.WORD_MARK + word if (self.WORD_MARK + word[:1]) in self._prefixes else word
            i = 0
            while i < len(piece_text):
                for j in range(min(len(piece_text), i + self._max_len), i, -1):
                    unit = self._text_units.get(piece_text[i:j])
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

    def decode(self, ids: Sequence[int]) -> str:
        text = "".join(self._id_to_unit.get(int(i), "") for i in ids)
        return text.replace(self.WORD_MARK, " ").lstrip(" ")

    def token_to_id(self, token: str) -> int | None:
        return self._unit_to_id.get(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._id_to_unit.get(int(token_id))

    @property
    def special_ids(self) -> frozenset[int]:
        return self._special

    def _mark_special(self, ids: set[int]) -> None:
        self._special = self._special | (ids & self._id_to_unit.keys())
        self._index_text_units()


def load_tokenizer(spec: TokenizerSpec | None) -> Tokenizer | None:
    """Build the tokenizer a checkpoint declares (``None`` for kind "none"), its
    ``special_ids`` marked special (``Tokenizer.mark_special``).

    Raises:
        ValueError: an unknown kind; FileNotFoundError: a missing file.
    """
    if spec is None or spec.kind == "none":
        return None
    tok = _build_tokenizer(spec)
    if spec.special_ids:
        tok.mark_special(spec.special_ids)
    return tok


# Kinds read by a ``from_file`` classmethod of a module of their own.
_FILE_KINDS = {
    "chars": "oasr.tokenizers.chars:CharTokenizer",
    "tekken": "oasr.models.voxtral_realtime.tokenizer:TekkenTokenizer",
}


def _build_tokenizer(spec: TokenizerSpec) -> Tokenizer:
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
                    added[int(k)] = (v["content"], bool(v.get("special", True)))
            return HFTokenizer.from_vocab_merges(vocab, merges, added)
        raise FileNotFoundError(f"no tokenizer.json (or vocab.json + merges.txt) at {path}")
    if spec.kind == "sentencepiece":
        return SentencePieceTokenizer.from_file(spec.path or "")
    if spec.kind == "table":
        return TableTokenizer.from_file(spec.path or "")
    if spec.kind in _FILE_KINDS:  # named lazily: the module builds on this one
        module, _, name = _FILE_KINDS[spec.kind].partition(":")
        return getattr(importlib.import_module(module), name).from_file(spec.path or "")
    raise ValueError(f"unknown tokenizer kind {spec.kind!r}")
