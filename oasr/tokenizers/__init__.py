"""One tokenizer interface over Hugging Face ``tokenizers`` files (and, per family,
sentencepiece models and token tables)."""

from oasr.tokenizers.base import (
    Control,
    HFTokenizer,
    SentencePieceTokenizer,
    TableTokenizer,
    Tokenizer,
    load_tokenizer,
)
from oasr.tokenizers.chars import CharTokenizer

__all__ = [
    "CharTokenizer",
    "Control",
    "HFTokenizer",
    "SentencePieceTokenizer",
    "TableTokenizer",
    "Tokenizer",
    "load_tokenizer",
]
