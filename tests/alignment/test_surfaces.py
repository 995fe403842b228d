"""The alignment surfaces: ``ASREngine.align``, ``EngineConfig.align_model`` (any family's word
times replaced by the aligner's, through ``transcribe``), ``oasr align`` and ``--align-model``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from oasr.alignment import CtcAligner, Piece
from oasr.cli.main import main
from tests.alignment.conftest import TEXT


@pytest.fixture(scope="module")
def engine(loaded, w2v_dir):
    from oasr.engine import ASREngine

    return ASREngine(loaded, align_model=str(w2v_dir))


def test_engine_align_is_the_aligners(engine, loaded, clip):
    ours = engine.align(clip, TEXT)
    assert [(w.start, w.end, w.word, w.score) for w in ours] == [
        (w.start, w.end, w.word, w.score) for w in CtcAligner(loaded).align(clip, TEXT)
    ]
    both = engine.align([clip, clip[:32000]], [TEXT, "and so"])
    assert [w.word for w in both[1]] == ["and", "so"]
    with pytest.raises(ValueError, match="lists of both"):
        engine.align([clip], TEXT)


def test_a_ctc_engine_aligns_with_its_own_model(loaded, clip):
    from oasr.engine import ASREngine

    words = ASREngine(loaded).align(clip, "and so my")
    assert [w.word for w in words] == ["and", "so", "my"] and words[0].start < words[-1].end


def test_align_model_replaces_the_word_times_of_each_segment(engine, loaded, clip):
    out = engine.transcribe(clip)
    segments = [s for s in out.segments if s.text.strip()]
    assert segments and all(s.words for s in segments)
    expected = CtcAligner(loaded).align_pieces(
        [
            Piece(clip[round(s.start * 16000) : round(s.end * 16000)], s.text, round(s.start * 16000) / 16000)
            for s in segments
        ]
    )
    for segment, words in zip(segments, expected):
        assert [(w.start, w.end, w.word) for w in segment.words] == [(x.start, x.end, " " + x.word) for x in words]
        assert [w.word.strip() for w in segment.words] == segment.text.split()
        assert segment.start - 1e-9 <= segment.words[0].start and segment.words[-1].end <= segment.end + 1e-9
    assert engine.splitter.stats()["segments_aligned"] >= len(segments)


def test_oasr_align_writes_json_with_scores_and_subtitles(w2v_dir, clip_path, capsys, tmp_path):
    path = clip_path
    assert main(["align", path, "-m", str(w2v_dir), "--text", "and so my fellow"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [w["word"] for w in doc["words"]] == ["and", "so", "my", "fellow"]
    assert all({"start", "end", "score", "probability"} <= set(w) for w in doc["words"])
    text = tmp_path / "t.txt"
    text.write_text("And so,\nmy fellow Americans\n", encoding="utf-8")
    out = tmp_path / "a.srt"
    assert main(["align", path, "-m", str(w2v_dir), "--text-file", str(text), "-f", "srt", "-o", str(out)]) == 0
    cues = out.read_text(encoding="utf-8").strip().split("\n\n")
    assert len(cues) == 2 and cues[0].endswith("And so,") and cues[1].endswith("my fellow Americans")
    assert main(["align", path, "-m", str(w2v_dir), "--text", "and so", "-f", "vtt"]) == 0
    assert capsys.readouterr().out.startswith("WEBVTT")


def test_oasr_align_refuses_a_text_too_long_and_a_missing_model(w2v_dir, clip_path, capsys):
    path = clip_path
    assert main(["align", path, "-m", str(w2v_dir), "--text", "abc " * 300]) == 1
    assert "too long for the audio" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["align", path, "--text", "hello"])
    assert e.value.code == 2


def test_transcribe_with_align_model_writes_aligned_words(w2v_dir, clip_path, capsys):
    path = clip_path
    args = ["transcribe", path, "-m", str(w2v_dir), "--align-model", str(w2v_dir), "-f", "verbose_json", "-q"]
    assert main([*args, "--threads", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["words"] and all(np.isfinite([w["start"], w["end"]]).all() for w in doc["words"])
