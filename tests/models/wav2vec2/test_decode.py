"""Decoding a wav2vec2-family checkpoint: the character vocabulary (``CharTokenizer``), words and
their times from the ``|`` delimiter, beam search with hotwords, and int8."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from oasr.engine.decode.words import PieceKind, TokenPieces, group_words
from oasr.tokenizers import CharTokenizer, load_tokenizer
from oasr.tokenizers.base import TokenizerSpec
from tests.models.wav2vec2 import _reference as ref


@pytest.fixture(scope="module")
def w2v_dir(tmp_path_factory):
    pytest.importorskip("transformers")
    return ref.build_random(tmp_path_factory.mktemp("w2v_decode"), "wav2vec2_stable", seed=3)


@pytest.fixture(scope="module")
def tokenizer(w2v_dir) -> CharTokenizer:
    return load_tokenizer(TokenizerSpec(kind="chars", path=str(w2v_dir / "vocab.json"), special_ids=(0,)))


def test_vocabulary_encodes_and_decodes_as_transformers(w2v_dir, tokenizer):
    from transformers import Wav2Vec2CTCTokenizer

    theirs = Wav2Vec2CTCTokenizer.from_pretrained(w2v_dir)
    text = "it's a cold day, qx"  # "," "q" "x" are not in the vocabulary: <unk>
    ids = tokenizer.encode_text(text)
    assert ids == theirs(text).input_ids
    assert tokenizer.decode(ids) == theirs.decode(ids, group_tokens=False)
    assert tokenizer.word_delimiter_id == 4 and tokenizer.special_ids == {0, 1, 2, 3}
    # a special token's text is plain text: "<" and ">" are unknown, the letters letters
    assert tokenizer.encode_text("<pad>") == [3, *tokenizer.encode_text("pad"), 3]


def test_the_delimiter_ends_words_and_belongs_to_none(tokenizer):
    pieces = TokenPieces(tokenizer, {0})
    ids = tokenizer.encode_text("ask not what")
    assert pieces.info(4).kind is PieceKind.DELIMITER
    spans = group_words(ids, pieces)
    assert [tokenizer.decode(ids[s.start : s.end]) for s in spans] == ["ask", "not", "what"]
    assert all(4 not in ids[s.start : s.end] for s in spans) and all(s.spaced for s in spans)


def test_lm_fusion_scores_the_words_as_written(tokenizer, tmp_path):
    """Words end at the delimiter and are scored lower-cased, as the text is written."""
    pytest.importorskip("kenlm")
    from oasr.engine.decode.ctc import LmFusion, NgramLanguageModel

    arpa = tmp_path / "lm.arpa"
    arpa.write_text(
        "\\data\\\nngram 1=5\nngram 2=3\n\n\\1-grams:\n-1.0\t<s>\t-0.5\n-1.0\t</s>\n-2.0\t<unk>\n"
        "-1.0\tcold\t-0.5\n-1.5\tday\t-0.5\n\n\\2-grams:\n-0.2\t<s> cold\n-0.3\tcold day\n-0.2\tday </s>\n\n\\end\\\n"
    )
    fusion = LmFusion(NgramLanguageModel(arpa), TokenPieces(tokenizer, {0}), alpha=1.0, beta=0.5)
    state, total = fusion.initial(), 0.0
    for t in tokenizer.encode_text("cold day"):
        delta, state = fusion.advance(state, t)
        total += delta
    assert state[1] == "day"
    total += fusion.finalize(state)
    assert total == pytest.approx((-0.2 - 0.3 - 0.2) * math.log(10) + 2 * 0.5, abs=1e-5)


def test_word_times_against_transformers_word_offsets(w2v_dir, clips):
    from transformers import Wav2Vec2ForCTC, Wav2Vec2Processor

    import oasr

    processor = Wav2Vec2Processor.from_pretrained(w2v_dir)
    hf = Wav2Vec2ForCTC.from_pretrained(w2v_dir).eval()
    wav = clips[2]
    x = processor(wav, sampling_rate=16000, return_tensors="pt").input_values
    with torch.no_grad():
        ids = hf(x).logits.argmax(-1)[0]
    decoded = processor.tokenizer.decode(ids, output_word_offsets=True)
    frame_s = hf.config.inputs_to_logits_ratio / 16000
    out = oasr.ASREngine(str(w2v_dir), device="cpu").transcribe(wav.copy(), word_timestamps=True)
    words = [w for s in out.segments for w in s.words]
    theirs = decoded.word_offsets
    assert [w.word.strip() for w in words] == [w["word"].lower() for w in theirs] and len(words) > 3
    for ours, t in zip(words, theirs):
        # oasr times a character from its spike (its run's peak) to the midpoints to its
        # neighbours'; transformers' word spans its characters' runs: the two overlap
        assert 0.0 <= ours.start <= ours.end <= len(wav) / 16000
        assert ours.start <= (t["end_offset"]) * frame_s and t["start_offset"] * frame_s <= ours.end
    assert all(a.end <= b.start + 1e-6 for a, b in zip(words, words[1:]))


def test_beam_search_with_hotwords(w2v_dir, clips):
    import oasr

    engine = oasr.ASREngine(str(w2v_dir), device="cpu")
    greedy = engine.transcribe(clips[2].copy())
    beam = engine.transcribe(clips[2].copy(), beam_size=4)
    first = greedy.text.split()[0]
    boosted = engine.transcribe(clips[2].copy(), beam_size=4, hotwords=f"{first} {first}", hotword_weight=3.0)
    assert greedy.text and beam.text and boosted.text
    assert boosted.text.count(first) >= beam.text.count(first)
    with pytest.raises(ValueError, match="hotwords need beam_size > 1"):
        engine.transcribe(clips[2].copy(), hotwords="word")


def test_int8_is_close_to_float32(w2v_dir, clips):
    from oasr.audio.frontends import build_frontend
    from oasr.layers.quant import Int8Linear
    from oasr.models.registry import build_model_from_checkpoint

    model32, bundle, _ = build_model_from_checkpoint(w2v_dir)
    model8, _, report = build_model_from_checkpoint(w2v_dir, quantize="int8")
    assert report.ok and sum(isinstance(m, Int8Linear) for m in model8.modules()) >= 12
    frontend = build_frontend(bundle.features)
    feats, lens = frontend.compute_batch(clips)
    with torch.no_grad():
        lp32, n32 = model32.forward_offline(feats, lens)
        lp8, n8 = model8.forward_offline(feats, lens)
    assert torch.equal(n32, n8)
    for i, n in enumerate(n32.tolist()):
        assert ref.cosine(lp8[i, :n].exp(), lp32[i, :n].exp()) > 0.99
        agree = (lp8[i, :n].argmax(-1) == lp32[i, :n].argmax(-1)).double().mean()
        assert agree > 0.9


def test_int8_engine_decodes(w2v_dir, clips):
    import oasr

    out = oasr.ASREngine(str(w2v_dir), device="cpu", quantize="int8").transcribe(copy.copy(clips[0]))
    assert out.text.strip()
