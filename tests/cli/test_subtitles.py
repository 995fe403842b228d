"""Word-timed subtitle cues (``SubtitleLayout``) and TSV against openai-whisper's own writers
(``whisper.utils.WriteSRT / WriteVTT / WriteTSV``) on the same transcripts, and cues clamped
to the audio's end."""

from __future__ import annotations

import io
import random
import re

import pytest

from oasr.engine.outputs import RequestOutput, Segment, Word
from oasr.formatting import SubtitleLayout, format_output, subtitle_cues, to_srt, to_tsv, to_vtt

whisper_utils = pytest.importorskip("whisper.utils", reason="openai-whisper (the reference writers) is not installed")

VOCAB = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "Americans,", "country.", "ask", "I"]


def _random_output(seed: int, duration_pad: float = 5.0) -> RequestOutput:
    """Segments of 1-14 words with gaps, some over whisper's 3-s pause, words with leading spaces."""
    rng = random.Random(seed)
    t = rng.uniform(0.0, 1.0)
    segments = []
    for sid in range(1, rng.randint(1, 6) + 1):
        words = []
        for _ in range(rng.randint(1, 14)):
            t += rng.choice([0.0, 0.05, 0.2, 0.5, 3.5])
            length = rng.uniform(0.1, 0.8)
            words.append(Word(round(t, 3), round(t + length, 3), " " + rng.choice(VOCAB), 0.9))
            t += length
        text = "".join(w.word for w in words)
        segments.append(Segment(sid, 0, words[0].start, words[-1].end, text, words=words))
        t += rng.uniform(0.0, 4.0)
    text = "".join(s.text for s in segments).strip()
    return RequestOutput("r", text, segments, language="en", duration=t + duration_pad)


def _whisper_result(out: RequestOutput) -> dict:
    return {
        "text": out.text,
        "language": out.language,
        "segments": [
            {
                "id": s.id,
                "start": s.start,
                "end": s.end,
                "text": s.text,
                "words": [
                    {"word": w.word, "start": w.start, "end": w.end, "probability": w.probability} for w in s.words
                ],
            }
            for s in out.segments
        ],
    }


def _whisper_write(writer_cls, out: RequestOutput, layout: SubtitleLayout) -> str:
    buf = io.StringIO()
    options = {
        "max_line_width": layout.max_line_width,
        "max_line_count": layout.max_line_count,
        "max_words_per_line": layout.max_words_per_line,
        "highlight_words": layout.highlight_words,
    }
    writer_cls(".").write_result(_whisper_result(out), file=buf, options=options)
    return buf.getvalue()


def _vtt_cues(text: str) -> list[tuple[float, float, str]]:
    """(start s, end s, text) of each WebVTT cue, hours optional (whisper leaves them out)."""

    def seconds(ts: str) -> float:
        parts = [float(p) for p in ts.split(":")]
        return round(sum(p * 60**i for i, p in enumerate(reversed(parts))), 3)

    cues = []
    for block in text.split("\n\n")[1:]:
        if not block.strip():
            continue
        times, body = block.split("\n", 1)
        a, b = times.split(" --> ")
        cues.append((seconds(a), seconds(b), body.rstrip("\n")))
    return cues


LAYOUTS = [
    SubtitleLayout(),
    SubtitleLayout(max_line_width=20),
    SubtitleLayout(max_line_width=16, max_line_count=2),
    SubtitleLayout(max_line_width=42, max_line_count=1),
    SubtitleLayout(max_words_per_line=3),
    SubtitleLayout(max_words_per_line=4, max_line_width=18),
    SubtitleLayout(max_words_per_line=2, max_line_width=30, max_line_count=2),
    SubtitleLayout(highlight_words=True),
    SubtitleLayout(max_line_width=24, max_line_count=2, highlight_words=True),
    SubtitleLayout(max_words_per_line=5, highlight_words=True),
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=repr)
def test_srt_equals_openai_whispers_writer(layout):
    for seed in range(25):
        out = _random_output(seed)
        assert to_srt(out, layout).rstrip("\n") == _whisper_write(whisper_utils.WriteSRT, out, layout).rstrip("\n"), (
            seed
        )


@pytest.mark.parametrize("layout", LAYOUTS, ids=repr)
def test_vtt_cues_equal_openai_whispers_writer(layout):
    for seed in range(25):
        out = _random_output(seed)
        ours = _vtt_cues(to_vtt(out, layout))
        assert ours == _vtt_cues(_whisper_write(whisper_utils.WriteVTT, out, layout)), seed


def test_tsv_equals_openai_whispers_writer():
    for seed in range(10):
        out = _random_output(seed)
        assert to_tsv(out) == _whisper_write(whisper_utils.WriteTSV, out, SubtitleLayout())
    assert format_output(out, "tsv") == to_tsv(out)


def test_word_times_set_cue_bounds():
    """With words, a cue spans its first word's start to its last word's end, not the segment's."""
    words = [Word(1.2, 1.5, " Hello", 0.9), Word(1.6, 2.1, " world.", 0.9)]
    out = RequestOutput("r", "Hello world.", [Segment(1, 0, 0.0, 4.0, " Hello world.", words=words)], duration=5.0)
    assert subtitle_cues(out) == [(1.2, 2.1, "Hello world.")]
    assert to_srt(out) == "1\n00:00:01,200 --> 00:00:02,100\nHello world.\n"
    plain = RequestOutput("r", "Hello world.", [Segment(1, 0, 0.0, 4.0, " Hello world.")], duration=5.0)
    assert subtitle_cues(plain) == [(0.0, 4.0, "Hello world.")]


def test_no_cue_ends_past_the_audio():
    """The last window's timestamps may overshoot: every format clamps to the duration."""
    words = [Word(9.5, 10.4, " late", 0.9), Word(10.4, 11.2, " word.", 0.9)]
    seg = Segment(1, 0, 9.5, 12.0, " late word.", words=words)
    out = RequestOutput("r", "late word.", [seg], duration=10.8)
    assert subtitle_cues(out) == [(9.5, 10.8, "late word.")]
    assert subtitle_cues(out, SubtitleLayout(highlight_words=True))[-1][:2] == (10.4, 10.8)
    seg.words = None
    assert subtitle_cues(out) == [(9.5, 10.8, "late word.")]
    assert to_tsv(out).splitlines()[1] == "9500\t10800\tlate word."
    for start, end, _ in subtitle_cues(_random_output(3, duration_pad=-1.0)):
        assert start <= end


def test_vtt_highlight_escapes_the_text_not_the_tags():
    words = [Word(0.0, 0.5, " a<b", 0.9), Word(0.5, 1.0, " &c", 0.9)]
    out = RequestOutput("r", "a<b &c", [Segment(1, 0, 0.0, 1.0, " a<b &c", words=words)], duration=2.0)
    vtt = to_vtt(out, SubtitleLayout(highlight_words=True))
    assert "<u>a&lt;b</u> &amp;c" in vtt and "a&lt;b <u>&amp;c</u>" in vtt


def test_layout_refuses_nonpositive_limits():
    with pytest.raises(ValueError, match="max_line_width must be >= 1"):
        SubtitleLayout(max_line_width=0)


def test_wrapped_cue_has_at_most_the_lines_asked():
    out = _random_output(7)
    layout = SubtitleLayout(max_line_width=16, max_line_count=2)
    for _, _, text in subtitle_cues(out, layout):
        lines = text.split("\n")
        assert len(lines) <= 2
        # a line holds one word past the width only when that word alone is longer
        assert all(len(line) <= 16 or " " not in line for line in lines)
    assert re.search(r"\n", to_srt(out, layout))
