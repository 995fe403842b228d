"""Mistral's ``tekken.json`` tokenizer (byte-level BPE over tiktoken) as an oasr ``Tokenizer``,
read by ``mistral_common`` (Mistral's own library, what transformers' ``MistralCommonBackend``
wraps), so ids and text are the reference's."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from oasr.tokenizers.base import Tokenizer


class TekkenTokenizer(Tokenizer):
    """A ``mistral_common`` ``Tekkenizer``: ids ``0 .. num_special_tokens - 1`` are its control
    tokens, the rest byte-level BPE pieces. ``decode`` drops the control tokens, as
    ``batch_decode(skip_special_tokens=True)`` does."""

    def __init__(self, tok) -> None:
        self.tok = tok
        self._special = frozenset(int(i) for i in tok.special_ids)

    @classmethod
    def from_file(cls, path: str | Path) -> TekkenTokenizer:
        try:
            from mistral_common.tokens.tokenizers.tekken import Tekkenizer
        except ImportError as e:  # pragma: no cover - an install without the library
            raise ImportError("reading tekken.json needs mistral-common (pip install mistral-common)") from e
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no tekken.json at {path}")
        return cls(Tekkenizer.from_file(path))

    @property
    def vocab_size(self) -> int:
        return int(self.tok.n_words)

    def encode_text(self, text: str) -> list[int]:
        return list(self.tok.encode(text, bos=False, eos=False))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of the pieces, each run between control tokens decoded on its own (bytes
        never join across a dropped control token), as ``Tekkenizer.decode`` does."""
        return self.decode_bytes(ids).decode("utf-8", "replace")

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """``decode``'s text as UTF-8, but for the bytes after the last control token, left raw (a
        stream may have cut them mid-character): every run a control token closes is decoded on
        its own, with replacement characters where its bytes are not UTF-8."""
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

        runs: list[bytes] = [b""]
        for i in ids:
            if int(i) in self._special:
                runs.append(b"")
            else:
                runs[-1] += self.tok.id_to_byte_piece(int(i), SpecialTokenPolicy.IGNORE)
        closed = "".join(run.decode("utf-8", "replace") for run in runs[:-1])
        return closed.encode("utf-8") + runs[-1]

    def token_to_id(self, token: str) -> int | None:
        try:
            return int(self.tok.get_control_token(token))
        except Exception:  # not a control token: a one-piece text token, else none
            ids = self.encode_text(token)
            return ids[0] if len(ids) == 1 else None

    def id_to_token(self, token_id: int) -> str | None:
        if not 0 <= int(token_id) < self.vocab_size:
            return None
        return self.tok.id_to_piece(int(token_id))

    @property
    def special_ids(self) -> frozenset[int]:
        return self._special

    def _mark_special(self, ids: set[int]) -> None:
        self._special = self._special | frozenset(i for i in ids if 0 <= i < self.vocab_size)
