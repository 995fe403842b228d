"""``CtcAligner``: word times equal to ctc-forced-aligner's on the same posteriors, word scores
equal to torchaudio's tutorial's, and the text made into labels as those tools make it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.alignment import AlignmentError, CtcAligner, forced_align
from oasr.alignment import text as text_mod
from tests.alignment.conftest import TEXT
from tests.models.wav2vec2._reference import CHARS


class _CfaTokenizer:
    """The tokenizer ctc-forced-aligner's ``get_alignments`` reads: the fixture's vocabulary."""

    pad_token_id = 0

    def get_vocab(self):
        return {c.lower(): i for i, c in enumerate(CHARS)}


def test_word_times_equal_ctc_forced_aligners(loaded, clip):
    cfa = pytest.importorskip("ctc_forced_aligner")
    aligner = CtcAligner(loaded, star="segment", romanize=False)
    log_probs, times = aligner.posteriors([clip])[0]
    # ctc-forced-aligner's pipeline on the same posteriors: its text, a star column of log-prob 0,
    # its Viterbi, spans and word times at 20 ms a frame
    tokens, words = cfa.preprocess_text(TEXT, romanize=False, language="eng")
    emissions = torch.cat([log_probs, torch.zeros(log_probs.shape[0], 1)], 1).numpy()
    segments, scores, blank = cfa.get_alignments(emissions, tokens, _CfaTokenizer())
    ref = cfa.postprocess_results(words, cfa.get_spans(tokens, segments, blank), 20, scores)

    ours = aligner.align(clip, TEXT)
    assert [w.word for w in ours] == [r["text"] for r in ref] == TEXT.split()
    np.testing.assert_allclose([w.start for w in ours], [r["start"] for r in ref], rtol=0, atol=1e-9)
    np.testing.assert_allclose([w.end for w in ours], [r["end"] for r in ref], rtol=0, atol=1e-9)
    np.testing.assert_allclose([w.score for w in ours], [r["score"] for r in ref], rtol=1e-5, atol=1e-4)
    assert np.allclose(times, 0.02 * np.arange(len(times)))


def test_word_probability_is_torchaudios_tutorial_score(loaded, clip):
    from torchaudio.functional import merge_tokens

    aligner = CtcAligner(loaded)  # the vocabulary's delimiter between words, no stars
    prepared = aligner.prepare(TEXT)
    assert prepared.star_id is None and aligner.delimiter_id is not None
    log_probs, _ = aligner.posteriors([clip])[0]
    path, scores = forced_align(log_probs[None], torch.tensor([prepared.labels]))
    spans = merge_tokens(path[0], scores[0].exp())
    expected, at = [], 0
    for unit in prepared.units:  # the tutorial's word score: its tokens' scores weighted by their frames
        mine = spans[at : at + len(unit.labels)]
        at += len(unit.labels)
        if unit.word is not None:
            expected.append(sum(s.score * len(s) for s in mine) / sum(len(s) for s in mine))
    np.testing.assert_allclose([w.probability for w in aligner.align(clip, TEXT)], expected, rtol=1e-6)


def test_a_batch_of_pieces_aligns_each_as_alone(loaded, clip):
    from oasr.alignment import Piece

    aligner = CtcAligner(loaded, max_batch_size=2)
    pieces = [Piece(clip[:32000], "and so my"), Piece(clip, TEXT, offset=3.0), Piece(clip[16000:40000], "fellow")]
    together = aligner.align_pieces(pieces)
    for piece, words in zip(pieces, together):
        alone = aligner.align(piece.audio, piece.text)
        assert [(w.start + piece.offset, w.end + piece.offset, w.word) for w in alone] == [
            (w.start, w.end, w.word) for w in words
        ]


def test_long_audio_goes_through_the_model_in_windows(loaded, clip):
    aligner = CtcAligner(loaded, window_s=2.0)
    log_probs, times = aligner.posteriors([clip])[0]
    assert len(times) == log_probs.shape[0] and np.all(np.diff(times) > 0) and times[-1] < len(clip) / 16000
    assert np.isclose(times[np.searchsorted(times, 2.0)], 2.0)  # the second window's first frame
    words = aligner.align(clip, TEXT)
    assert all(a.end <= b.start for a, b in zip(words, words[1:]))


def test_a_text_too_long_for_the_audio_is_a_clear_error(loaded, clip, monkeypatch):
    from oasr.alignment import aligner as aligner_mod

    aligner = CtcAligner(loaded)
    monkeypatch.setattr(aligner_mod, "MAX_ROW_CELLS", 1000)  # past it, a piece is refused, not allocated
    with pytest.raises(AlignmentError, match="GiB of back-pointers .* a segment at a time"):
        aligner.align(clip, "and so")
    monkeypatch.undo()
    with pytest.raises(AlignmentError, match="need at least .* frames, and the row has"):
        aligner.align(clip[:8000], TEXT)
    from oasr.alignment import Piece

    out = aligner.align_pieces([Piece(clip[:8000], TEXT), Piece(clip, "and so")], return_exceptions=True)
    assert isinstance(out[0], AlignmentError) and [w.word for w in out[1]] == ["and", "so"]


def test_an_aligner_needs_a_character_ctc_vocabulary(loaded):
    class _Pieces:
        vocab_size = 100

        def id_to_token(self, i):
            return f"\u2581piece{i}"

        special_ids = frozenset()

    fake = type(loaded)(**{**loaded.__dict__, "tokenizer": _Pieces()})
    with pytest.raises(ValueError, match="character vocabulary"):
        CtcAligner(fake)


def test_text_keeps_the_words_as_written(loaded, monkeypatch):
    monkeypatch.setattr(text_mod, "_uroman", lambda: None)  # accents dropped (uroman: its own test)
    aligner = CtcAligner(loaded)
    vocab = aligner.vocab
    prepared = aligner.prepare("Don't — café, 42!")
    assert prepared.words == ["Don't", "—", "café,", "42!"]
    by_word = {u.word: u.labels for u in prepared.units if u.word is not None}
    assert by_word[0] == tuple(vocab[c] for c in "DON'T")
    assert 1 not in by_word  # punctuation alone: no unit
    assert by_word[2] == tuple(vocab[c] for c in "CAFE")  # romanised
    assert by_word[3] == (prepared.star_id,) == (aligner.n_classes,)  # nothing to align: a star
    delimiters = [u for u in prepared.units if u.word is None]
    assert all(u.labels == (aligner.delimiter_id,) for u in delimiters) and len(delimiters) == 2


def test_without_uroman_accents_are_dropped_and_other_scripts_starred(loaded, monkeypatch):
    monkeypatch.setattr(text_mod, "_uroman", lambda: None)
    aligner = CtcAligner(loaded)
    prepared = aligner.prepare("naïve 北京")
    labels = {u.word: u.labels for u in prepared.units if u.word is not None}
    assert labels[0] == tuple(aligner.vocab[c] for c in "NAIVE")
    assert labels[1] == (aligner.n_classes,)


def test_uroman_romanises_other_scripts(loaded):
    pytest.importorskip("uroman")
    aligner = CtcAligner(loaded)
    labels = [u.labels for u in aligner.prepare("Москва").units]
    assert labels == [tuple(aligner.vocab[c] for c in "MOSKVA")]


def test_punctuation_alone_takes_the_end_of_the_word_before(loaded, clip):
    words = CtcAligner(loaded).align(clip, "and so — my 42")
    assert words[2].start == words[2].end == words[1].end and words[2].probability == 0.0
    assert words[4].word == "42" and words[4].start >= words[3].end and words[4].probability == 0.0  # a star


def test_words_of_scripts_without_spaces_are_characters():
    from oasr.alignment.text import split_words

    assert split_words("我们 go home。好") == ["我", "们", "go", "home", "。", "好"]
    assert split_words("  naïve  café ") == ["naïve", "café"]
