"""A character CTC vocabulary as transformers' ``Wav2Vec2CTCTokenizer`` writes it: ``vocab.json``
(token -> id; or language -> that table, MMS's nested form, read for one language) beside
``tokenizer_config.json`` (``word_delimiter_token``, ``do_lower_case``, the special tokens).

Decoding joins the characters, the word delimiter (``|``) a space, the blank (``<pad>``) dropped;
the other special tokens are written out, as transformers' CTC decoding does by default
(``skip_special_tokens=False``); ``do_lower_case`` lower-cases the text. Encoding upper-cases
first when ``do_lower_case`` (the vocabulary is upper-case), spaces become the delimiter and a
character not in the vocabulary is ``<unk>``. ``word_delimiter_id`` tells the word grouping of
the CTC strategies where words end (``oasr.engine.decode.words``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from oasr.tokenizers.base import Tokenizer


def _token_text(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class CharTokenizer(Tokenizer):
    """Characters <-> ids of a wav2vec2-style CTC vocabulary.

    Args:
        vocab: token -> id.
        word_delimiter: the token that separates words ("|"), or None.
        do_lower_case: the vocabulary is upper-case and text is lower-cased on the way out.
        pad, unk, bos, eos: the special tokens (absent ones are None).
    """

    def __init__(
        self,
        vocab: dict[str, int],
        *,
        word_delimiter: str | None = "|",
        do_lower_case: bool = False,
        pad: str | None = "<pad>",
        unk: str | None = "<unk>",
        bos: str | None = "<s>",
        eos: str | None = "</s>",
    ) -> None:
        self._vocab = {str(k): int(v) for k, v in vocab.items()}
        self._id_to_token = {v: k for k, v in self._vocab.items()}
        self.do_lower_case = bool(do_lower_case)
        self.word_delimiter_id = self._vocab.get(word_delimiter) if word_delimiter is not None else None
        self.pad_id = self._vocab.get(pad) if pad is not None else None
        self.unk_id = self._vocab.get(unk) if unk is not None else None
        named = (pad, unk, bos, eos)
        self._special = frozenset(self._vocab[t] for t in named if t is not None and t in self._vocab)

    @classmethod
    def from_file(cls, path: str | Path, language: str | None = None) -> CharTokenizer:
        """From ``vocab.json`` (its directory's ``tokenizer_config.json`` read too).

        Args:
            language: the table of a nested (per-language) vocabulary; None takes the
                tokenizer config's ``target_lang``.

        Raises:
            FileNotFoundError: no vocab.json; ValueError: a malformed one.
        """
        path = Path(path)
        if path.is_dir():
            path = path / "vocab.json"
        if not path.is_file():
            raise FileNotFoundError(f"no vocab.json at {path}")
        vocab = json.loads(path.read_text(encoding="utf-8"))
        cfg_file = path.parent / "tokenizer_config.json"
        cfg = json.loads(cfg_file.read_text(encoding="utf-8")) if cfg_file.is_file() else {}
        if vocab and all(isinstance(v, dict) for v in vocab.values()):  # nested: one table a language
            lang = language or cfg.get("target_lang")
            if lang not in vocab:
                raise ValueError(f"{path}: a per-language vocabulary; name one of its languages, not {lang!r}")
            vocab = vocab[lang]
        if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
            raise ValueError(f"{path}: expected a JSON object of token -> id")
        return cls(
            vocab,
            word_delimiter=_token_text(cfg.get("word_delimiter_token", "|")),
            do_lower_case=bool(cfg.get("do_lower_case", False)),
            pad=_token_text(cfg.get("pad_token", "<pad>")),
            unk=_token_text(cfg.get("unk_token", "<unk>")),
            bos=_token_text(cfg.get("bos_token", "<s>")),
            eos=_token_text(cfg.get("eos_token", "</s>")),
        )

    @property
    def vocab_size(self) -> int:
        return max(self._id_to_token, default=-1) + 1

    def encode_text(self, text: str) -> list[int]:
        if self.do_lower_case:
            text = text.upper()
        ids: list[int] = []
        for word in text.split():
            if ids and self.word_delimiter_id is not None:
                ids.append(self.word_delimiter_id)
            for ch in word:
                i = self._vocab.get(ch)
                if i is None or i in self._special:
                    if self.unk_id is None:
                        raise ValueError(f"{ch!r} is not in the vocabulary and it has no <unk>")
                    i = self.unk_id
                ids.append(i)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        out = []
        for i in ids:
            i = int(i)
            if i == self.pad_id:
                continue
            out.append(" " if i == self.word_delimiter_id else self._id_to_token.get(i, ""))
        text = "".join(out).strip()
        return text.lower() if self.do_lower_case else text

    def token_to_id(self, token: str) -> int | None:
        return self._vocab.get(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._id_to_token.get(int(token_id))

    @property
    def special_ids(self) -> frozenset[int]:
        return self._special

    def _mark_special(self, ids: set[int]) -> None:
        self._special = self._special | (ids & self._id_to_token.keys())


__all__ = ["CharTokenizer"]
