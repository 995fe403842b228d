"""The sentencepiece and units-table tokenizer kinds."""

from __future__ import annotations

import pytest

from oasr.models.base import TokenizerSpec
from oasr.tokenizers import SentencePieceTokenizer, TableTokenizer, load_tokenizer


def test_table_tokenizer_round_trip(tmp_path):
    units = ["<blank>", "<unk>", "▁HE", "LLO", "▁WORLD", "▁A", "<sos/eos>"]
    path = tmp_path / "units.txt"
    path.write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)), encoding="utf-8")
    tok = load_tokenizer(TokenizerSpec(kind="table", path=str(path)))
    assert isinstance(tok, TableTokenizer)
    assert tok.vocab_size == 7
    assert tok.decode([2, 3, 4]) == "HELLO WORLD"
    assert tok.encode_text("HELLO WORLD A") == [2, 3, 4, 5]
    assert tok.encode_text("HELLOZ")[-1] == 1  # unknown character -> <unk>
    assert tok.token_to_id("<sos/eos>") == 6 and tok.id_to_token(4) == "▁WORLD"


def test_table_tokenizer_characters(tmp_path):
    path = tmp_path / "units.txt"
    path.write_text("<blank> 0\n<unk> 1\n你 2\n好 3\n", encoding="utf-8")
    tok = TableTokenizer.from_file(path)
    assert tok.decode([2, 3]) == "你好"
    assert tok.encode_text("你好") == [2, 3]


def test_table_tokenizer_rejects_a_malformed_line(tmp_path):
    path = tmp_path / "units.txt"
    path.write_text("<blank> 0\nno-id-here\n", encoding="utf-8")
    with pytest.raises(ValueError, match="units.txt:2"):
        TableTokenizer.from_file(path)
    with pytest.raises(FileNotFoundError):
        TableTokenizer.from_file(tmp_path / "absent.txt")


def test_sentencepiece_tokenizer(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["hello world", "the quick brown fox", "jumps over the lazy dog"] * 20))
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=30, model_type="bpe", bos_id=-1, eos_id=-1
    )
    tok = load_tokenizer(TokenizerSpec(kind="sentencepiece", path=str(tmp_path / "sp.model")))
    assert isinstance(tok, SentencePieceTokenizer)
    ids = tok.encode_text("hello world")
    assert tok.decode(ids) == "hello world"
    assert tok.token_to_id(tok.id_to_token(ids[0])) == ids[0]
    assert tok.token_to_id("definitely-not-a-piece") is None
    assert tok.vocab_size == 30


def test_unknown_kind_is_named():
    with pytest.raises(ValueError, match="unknown tokenizer kind 'bogus'"):
        load_tokenizer(TokenizerSpec(kind="bogus"))
