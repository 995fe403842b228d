"""Punctuation restoration: FunASR's CT-Transformer (``ct-punc``) over transcripts without any.

The life of a batch of transcripts (``Punctuator.punctuate``), as funasr's
``CTTransformer.inference`` treats each one alone:

1. **Words.** Each text is cut at whitespace; within a piece, every non-ASCII character is a
   word of its own and every run of ASCII characters one word (``split_words``). Words map to
   ids through ``tokens.json`` (a word it lacks is ``<unk>``).
2. **Mini-sentences.** The words go in chunks of ``split_size`` (20, funasr's default); the last
   chunk is what is left. A text's chunks run in order: each round feeds the unfinished tail of
   the previous round (the words after its last period or question mark, looked for from the
   second-last word back to the third) in front of the next chunk. A tail over 200 words with
   no sentence end is cut at its last comma, which becomes a period.
3. **One forward per round, for every text at once.** Round k of every text that has one is a
   row of one padded batch (keys and the FSMN memory masked past each row's length), so a
   row's logits are those of the text run alone.
4. **Text.** A word is followed by its mark (``punc_list``; ``_`` is none); an ASCII word takes
   the ASCII form of a comma, period or question mark, is preceded by a space when the word
   before it is ASCII too (or it starts the round), and is capitalised at the start of a round
   or after a sentence end (``str.capitalize``, as funasr). The last round ends the text with a
   period: a trailing comma or enumeration comma becomes one, and a text that ends in no
   sentence end gets one.

A word-level release (``ct-punc``, ``punc_ct-transformer_cn-en-common-vocab471067-large``: it
ships a ``jieba_usr_dict``) cuts words otherwise (``JiebaWords``): runs of English
whitespace-separated tokens (``[a-zA-Z']+``) stay as they are, runs of the other tokens are
joined and cut by jieba (its default dictionary plus the user dictionary, no HMM), as funasr
does; its ``punc_array`` then has one mark per character of a Chinese word (the word's mark on
its last character, none on the others).

The model (``CtTransformer``) is funasr's: a word embedding, the SANM encoder of
``oasr.models.paraformer.encoder`` with ``input_layer: pe`` (scaled by ``sqrt(D)``, FunASR's
sinusoids, no CMVN) and a linear head over ``punc_list``. ``load_punctuator`` reads the
released directory (``config.yaml``, ``model.pt``, ``tokens.json``, ``jieba_usr_dict`` if any).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from oasr.install import install_hint
from oasr.layers import Embedding, LayerNorm, Linear
from oasr.models.base import LoadError
from oasr.models.formats.text import read_mapping
from oasr.models.paraformer.config import SanmEncoderConfig
from oasr.models.paraformer.convert import ENCODER_FIELDS, ENCODER_FIXED, check_conf
from oasr.models.paraformer.encoder import SanmEncoderLayer, funasr_sinusoids, length_mask

SPLIT_SIZE = 20  # funasr's default ``split_size``: words per mini-sentence
LONG_TAIL = 200  # funasr's ``cache_pop_trigger_limit``: a tail this long is cut at a comma
SENTENCE_ENDS = ("。", "？")
ASCII_MARKS = {"，": ",", "。": ".", "？": "?"}
NO_MARK = "_"
RELEASE_FILES = ("config.yaml", "model.pt", "tokens.json")
JIEBA_DICT = "jieba_usr_dict"
_ENGLISH = re.compile(r"[a-zA-Z']+")
_CJK = ("\u0e00", "\u9fa5")  # funasr's test for a Chinese word in the per-character punc_array
_MODEL_FIELDS = ("punc_list", "sentence_end_id", "embed_unit", "att_unit")
_MODEL_IGNORED = frozenset({"punc_weight", "ignore_id", "sos", "eos", "dropout_rate"})
_ENC_IGNORED = frozenset({"padding_idx"})  # the embedding of input_layer "embed", which "pe" lacks


@dataclass
class CtTransformerConfig:
    """A FunASR ``CTTransformer`` (``config.yaml``'s ``model_conf`` and ``encoder_conf``).

    Attributes:
        vocab_size: words in ``tokens.json``.
        punc_list: the marks the head scores, by id (``_`` is "no mark").
        sentence_end_id: the mark a long tail's cut comma becomes (the period).
        embed_unit: the word embedding's width (the encoder's ``input_size``).
        encoder: the SANM encoder; its ``output_size`` is the head's input (``att_unit``).
    """

    vocab_size: int
    punc_list: list[str]
    sentence_end_id: int
    embed_unit: int
    encoder: SanmEncoderConfig

    def __post_init__(self) -> None:
        if NO_MARK not in self.punc_list:
            raise ValueError(f"punc_list {self.punc_list} has no {NO_MARK!r} (no mark)")
        if not 0 <= self.sentence_end_id < len(self.punc_list):
            raise ValueError(f"sentence_end_id {self.sentence_end_id} is outside punc_list")
        if self.encoder.input_size != self.embed_unit:
            raise ValueError(f"encoder input_size {self.encoder.input_size} != embed_unit {self.embed_unit}")


class CtTransformer(nn.Module):
    """Word ids -> punctuation logits: embedding, SANM encoder, linear head.

    Module names follow funasr's state dict (``embed.weight``, ``encoder.encoders0.0...``,
    ``encoder.after_norm``, ``decoder.weight``).

    Shapes:
        ids: (B, T) int64, lens: (B,) -> (B, T, len(punc_list))
    """

    def __init__(self, config: CtTransformerConfig) -> None:
        super().__init__()
        self.config = config
        enc = config.encoder
        self.embed = Embedding(config.vocab_size, config.embed_unit)
        self.encoder = nn.Module()
        self.encoder.encoders0 = nn.ModuleList([SanmEncoderLayer(enc.input_size, enc)])
        blocks = [SanmEncoderLayer(enc.output_size, enc) for _ in range(enc.num_blocks - 1)]
        self.encoder.encoders = nn.ModuleList(blocks)
        self.encoder.after_norm = LayerNorm(enc.output_size, eps=enc.norm_eps)
        self.decoder = Linear(enc.output_size, len(config.punc_list))

    def forward(self, ids: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) * self.config.encoder.output_size**0.5  # (B, T, E)
        t = ids.shape[1]
        x = x + funasr_sinusoids(t, x.shape[-1], x.dtype, x.device)
        mask = length_mask(lens, t).to(x.dtype)  # (B, T, 1)
        for layer in (*self.encoder.encoders0, *self.encoder.encoders):
            x = layer(x, mask, lens)
        return self.decoder(self.encoder.after_norm(x))


def split_words(text: str) -> list[str]:
    """funasr's ``split_words`` without a jieba dictionary: whitespace-separated pieces, each
    cut into single non-ASCII characters and runs of ASCII characters."""
    words: list[str] = []
    for piece in text.split():
        run = ""
        for ch in piece:
            if ch.isascii():
                run += ch
                continue
            if run:
                words.append(run)
                run = ""
            words.append(ch)
        if run:
            words.append(run)
    return words


class JiebaWords:
    """funasr's ``split_words`` with a jieba dictionary: English tokens as they are, the other
    tokens' runs joined and cut by jieba with ``user_dict`` added (no HMM).

    Raises:
        ImportError: jieba is not installed (the ``punc`` extra).
    """

    def __init__(self, user_dict: Path) -> None:
        try:
            import jieba
        except ImportError as e:
            raise ImportError(
                f"{user_dict}: a word-level punctuation model needs jieba: {install_hint('punc', ['jieba'])}"
            ) from e
        jieba.setLogLevel(logging.WARNING)  # not its start-up lines on stderr
        self.tokenizer = jieba.Tokenizer()
        self.tokenizer.load_userdict(str(user_dict))

    def __call__(self, text: str) -> list[str]:
        words: list[str] = []
        run: list[str] = []
        english = False
        for token in [*text.split(), None]:
            is_english = token is not None and _ENGLISH.fullmatch(token) is not None
            if run and (token is None or is_english != english):
                words += run if english else list(self.tokenizer.cut("".join(run), HMM=False))
                run = []
            if token is not None:
                run.append(token)
                english = is_english
        return words


def _chunks(items: list, size: int) -> list[list]:
    """funasr's ``split_to_mini_sentence``: ``size`` items at a time, the rest last."""
    return [items[i : i + size] for i in range(0, len(items), size)] or [items]


@dataclass
class PunctuatedText:
    """One text with its punctuation.

    Attributes:
        text: the punctuated text, as funasr's ``generate`` returns it (an ASCII first word
            keeps the space funasr puts before it).
        words: the input's words (``split_words``).
        marks: each word's mark id in ``punc_list``.
        pieces: each word as written in ``text``: its space, its capitalisation and its
            mark; ``"".join(pieces) == text``.
        punc_array: funasr's ``punc_array``: ``marks``, with a word-level model's Chinese
            words spread over their characters.
    """

    text: str
    words: list[str]
    marks: list[int]
    pieces: list[str]
    punc_array: list[int]


@dataclass
class _Run:
    """One text's progress through its mini-sentences."""

    words: list[list[str]]
    ids: list[list[int]]
    round: int = 0
    tail_words: list[str] = field(default_factory=list)
    tail_ids: list[int] = field(default_factory=list)
    marks: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)

    @property
    def last_round(self) -> bool:
        return self.round == len(self.words) - 1


class Punctuator:
    """A loaded CT-Transformer and its word table.

    Args:
        model: the network.
        tokens: ``tokens.json``'s words by id.
        unk: the word unknown words map to.
        split_size: words per mini-sentence.
        words: how a text is cut into words: ``split_words``, or a word-level model's
            ``JiebaWords``.
    """

    def __init__(
        self,
        model: CtTransformer,
        tokens: Sequence[str],
        unk: str = "<unk>",
        split_size: int = SPLIT_SIZE,
        words: Callable[[str], list[str]] = split_words,
    ) -> None:
        if split_size < 2:
            raise ValueError(f"split_size must be >= 2 (funasr asserts it), got {split_size}")
        if unk not in tokens:
            raise ValueError(f"the unknown word {unk!r} is not in the token list")
        self.model = model.eval()
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.unk_id = self.ids[unk]
        self.split_size = split_size
        self.split = words
        self.word_level = words is not split_words
        self.punc_list = list(model.config.punc_list)
        self.marks = set(self.punc_list) - {NO_MARK, "<unk>"}
        self.marks |= {ASCII_MARKS.get(m, m) for m in self.marks}

    def has_punctuation(self, text: str) -> bool:
        """Whether ``text`` already holds a mark this model writes (full-width or ASCII)."""
        return any(ch in self.marks for ch in text)

    @torch.inference_mode()
    def logits(self, rows: Sequence[Sequence[int]]) -> torch.Tensor:
        """Logits of several id sequences in one padded forward.

        Shapes:
            -> (len(rows), max length, len(punc_list)), float; rows padded past their length
        """
        device = self.model.decoder.weight.device
        lens = torch.tensor([len(r) for r in rows], device=device)
        ids = torch.zeros(len(rows), int(lens.max()), dtype=torch.long, device=device)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
        return self.model(ids, lens)

    def punctuate(self, texts: Sequence[str]) -> list[PunctuatedText]:
        """Punctuate several texts, every text's next mini-sentence in one forward per round.

        Returns:
            one ``PunctuatedText`` per text, equal to funasr's ``generate`` on that text alone
            (an empty or all-whitespace text gives an empty one).
        """
        runs: list[_Run | None] = []
        for text in texts:
            words = self.split(text)
            ids = [self.ids.get(w, self.unk_id) for w in words]
            runs.append(_Run(_chunks(words, self.split_size), _chunks(ids, self.split_size)) if words else None)
        active = [r for r in runs if r is not None]
        while active:
            rows = [r.tail_ids + r.ids[r.round] for r in active]
            best = self.logits(rows).argmax(dim=-1).tolist()
            for run, row, marks in zip(active, rows, best):
                self._advance(run, marks[: len(row)])
            active = [r for r in active if r.round < len(r.words)]
        results = []
        for run in runs:
            if run is None:
                results.append(PunctuatedText("", [], [], [], []))
                continue
            words = [w for chunk in run.words for w in chunk]
            results.append(PunctuatedText("".join(run.pieces), words, run.marks, run.pieces, self._array(words, run)))
        return results

    def _array(self, words: list[str], run: _Run) -> list[int]:
        """funasr's ``punc_array``: a word-level model's Chinese word of n characters has n - 1
        "no mark" entries before its own."""
        if not self.word_level:
            return list(run.marks)
        none = self.punc_list.index(NO_MARK)
        out: list[int] = []
        for word, mark in zip(words, run.marks):
            if _CJK[0] <= word[0] <= _CJK[1]:
                out += [none] * (len(word) - 1)
            out.append(mark)
        return out

    def _advance(self, run: _Run, marks: list[int]) -> None:
        """One round of one text: keep what ends in a sentence end, carry the rest."""
        words = run.tail_words + run.words[run.round]
        ids = run.tail_ids + run.ids[run.round]
        if not run.last_round:
            end, comma = -1, -1
            for i in range(len(marks) - 2, 1, -1):
                mark = self.punc_list[marks[i]]
                if mark in SENTENCE_ENDS:
                    end = i
                    break
                if comma < 0 and mark == "，":
                    comma = i
            if end < 0 and len(words) > LONG_TAIL and comma >= 0:
                end = comma
                marks[end] = self.model.config.sentence_end_id
            run.tail_words, run.tail_ids = words[end + 1 :], ids[end + 1 :]
            words, marks = words[: end + 1], marks[: end + 1]
        for i, word in enumerate(words):
            ascii_word = word[0].isascii()
            if ascii_word and (i == 0 or self.punc_list[marks[i - 1]] in SENTENCE_ENDS):
                word = word.capitalize()
            if ascii_word and (i == 0 or words[i - 1][0].isascii()):
                word = " " + word
            mark = self.punc_list[marks[i]]
            if mark != NO_MARK:
                word += ASCII_MARKS.get(mark, mark) if ascii_word else mark
            run.pieces.append(word)
        run.marks += marks
        if run.last_round:
            self._end_sentence(run)
        run.round += 1

    def _end_sentence(self, run: _Run) -> None:
        """funasr's period at the end of the text."""
        last = run.pieces[-1]
        end_id = self.model.config.sentence_end_id
        if last[-1] in ("，", "、"):
            run.pieces[-1] = last[:-1] + "。"
        elif last[-1] == ",":
            run.pieces[-1] = last[:-1] + "."
        elif last[-1] not in SENTENCE_ENDS and not last[-1].isascii():
            run.pieces[-1] = last + "。"
        elif last[-1] not in (".", "?") and last[-1].isascii():
            run.pieces[-1] = last + "."
        else:
            return
        run.marks[-1] = end_id


# -- the released directory ----------------------------------------------------------------


def _model_config(where: Path, cfg: Mapping[str, Any], vocab_size: int) -> CtTransformerConfig:
    """``config.yaml`` -> ``CtTransformerConfig``, refusing what is not implemented.

    Raises:
        LoadError: naming the key and value.
    """
    if cfg.get("model") != "CTTransformer":
        raise LoadError(f"{where}: model={cfg.get('model')!r}: not a FunASR CT-Transformer punctuation model")
    if cfg.get("encoder") != "SANMEncoder":
        raise LoadError(f"{where}: encoder={cfg.get('encoder')!r} is not supported: only SANMEncoder is implemented")
    if cfg.get("tokenizer", "CharTokenizer") != "CharTokenizer":
        raise LoadError(f"{where}: tokenizer={cfg.get('tokenizer')!r} is not supported: only CharTokenizer is")
    model_conf = dict(cfg.get("model_conf") or {})
    for key in model_conf:
        if key not in _MODEL_FIELDS and key not in _MODEL_IGNORED:
            raise LoadError(f"{where}: model_conf.{key} is not supported: an option this model does not know")
    enc_conf = dict(cfg.get("encoder_conf") or {})
    enc = check_conf(where, "encoder_conf", enc_conf, (*ENCODER_FIELDS, "input_size"), ENCODER_FIXED, _ENC_IGNORED)
    try:
        encoder = SanmEncoderConfig(**enc)
        att_unit = int(model_conf.get("att_unit", 256))
        if att_unit != encoder.output_size:
            raise ValueError(f"model_conf.att_unit {att_unit} != encoder_conf.output_size {encoder.output_size}")
        return CtTransformerConfig(
            vocab_size=vocab_size,
            punc_list=[str(m) for m in model_conf.get("punc_list") or []],
            sentence_end_id=int(model_conf.get("sentence_end_id", 3)),
            embed_unit=int(model_conf.get("embed_unit", 128)),
            encoder=encoder,
        )
    except (TypeError, ValueError) as e:
        raise LoadError(f"{where}: {e}") from e


def load_punctuator(
    path: str | os.PathLike, device: str | torch.device = "cpu", split_size: int = SPLIT_SIZE
) -> Punctuator:
    """Read a released CT-Transformer directory (``config.yaml``, ``model.pt``, ``tokens.json``).

    Args:
        path: the directory.
        device: where the model runs (float32: its argmax is what funasr's is).
        split_size: words per mini-sentence.

    Raises:
        LoadError: a missing file, a word-level model (``jieba_usr_dict``) without jieba, an
            option not implemented, or weights that do not match the config (naming the tensors).
    """
    directory = Path(path)
    if not directory.is_dir():
        raise LoadError(f"{directory}: not a directory (a FunASR punctuation model is one)")
    for name in RELEASE_FILES:
        if not (directory / name).is_file():
            raise LoadError(f"{directory}: no {name} (a FunASR punctuation model has {', '.join(RELEASE_FILES)})")
    cfg = read_mapping(directory / "config.yaml", "a FunASR model config")
    try:
        tokens = json.loads((directory / "tokens.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LoadError(f"{directory / 'tokens.json'}: not a JSON list of words: {e}") from e
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise LoadError(f"{directory / 'tokens.json'}: not a JSON list of words")
    config = _model_config(directory / "config.yaml", cfg, len(tokens))
    model = CtTransformer(config)
    try:
        state = torch.load(directory / "model.pt", map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as e:
        raise LoadError(f"{directory / 'model.pt'}: not a torch state dict: {e}") from e
    for wrapper in ("state_dict", "model_state_dict", "model"):
        if isinstance(state, Mapping) and isinstance(state.get(wrapper), Mapping):
            state = state[wrapper]
    if not isinstance(state, Mapping):
        raise LoadError(f"{directory / 'model.pt'}: not a torch state dict (a {type(state).__name__})")
    want = model.state_dict()
    missing, unexpected = sorted(set(want) - set(state)), sorted(set(state) - set(want))
    wrong = [k for k in want if k in state and tuple(state[k].shape) != tuple(want[k].shape)]
    if missing or unexpected or wrong:
        raise LoadError(
            f"{directory / 'model.pt'}: does not match config.yaml: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}, wrong shape {wrong[:5]}"
        )
    model.load_state_dict({k: v.float() for k, v in state.items()})
    unk = str(dict(cfg.get("tokenizer_conf") or {}).get("unk_symbol", "<unk>"))
    try:
        words = JiebaWords(directory / JIEBA_DICT) if (directory / JIEBA_DICT).is_file() else split_words
    except ImportError as e:
        raise LoadError(str(e)) from e
    try:
        return Punctuator(model.to(device), tokens, unk=unk, split_size=split_size, words=words)
    except ValueError as e:
        raise LoadError(f"{directory}: {e}") from e


__all__ = [
    "CtTransformer",
    "CtTransformerConfig",
    "JiebaWords",
    "PunctuatedText",
    "Punctuator",
    "load_punctuator",
    "split_words",
]
