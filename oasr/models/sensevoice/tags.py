"""SenseVoice's rich-transcription tags: what the model writes besides text, and the text
without them.

SenseVoice's CTC output starts with four tags, one per prompt frame (``<|en|><|NEUTRAL|>
<|Speech|><|woitn|>``: language, emotion, audio event, text normalisation), then the text,
which may carry more tags (a second language's segment, a laugh). funasr returns that raw
string and leaves its reading to ``funasr.utils.postprocess_utils.rich_transcription_postprocess``,
which turns the tags into emoji around the text. oasr reads the same tags into fields
(``RichTranscript.language`` / ``emotion`` / ``audio_events``, the request's
``RequestOutput.language`` / ``.emotion`` / ``.audio_events``) and keeps the text plain: the
text is ``rich_transcription_postprocess``'s with its emoji left out, character for character
(its quirks included: segments of different languages joined with no space, ``"The."``
replaced by a space), so a caller who wants funasr's emoji can add them from the fields and
one who does not gets no pictographs in a transcript, subtitles or an edit distance.

Tags are named as SenseVoice spells them, without the brackets: ``"zh"``, ``"NEUTRAL"``,
``"EMO_UNKNOWN"``, ``"Speech"``, ``"BGM"``, ``"Event_UNK"``. A tag funasr's postprocessing does
not know (another of the vocabulary's language tags, say) stays in the text, as it does there.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

LANGUAGE_TAGS = ("zh", "en", "yue", "ja", "ko", "nospeech")
EMOTION_TAGS = ("HAPPY", "SAD", "ANGRY", "NEUTRAL", "FEARFUL", "DISGUSTED", "SURPRISED", "EMO_UNKNOWN")
EVENT_TAGS = (
    "BGM",
    "Speech",
    "Applause",
    "Laughter",
    "Cry",
    "Sneeze",
    "Breath",
    "Cough",
    "Sing",
    "Speech_Noise",
    "GBG",
    "Event_UNK",
)
TEXTNORM_TAGS = ("withitn", "woitn")
ALL_TAGS = (*LANGUAGE_TAGS, *EMOTION_TAGS, *EVENT_TAGS, *TEXTNORM_TAGS)
"""Every tag ``rich_transcription_postprocess`` removes from the text (its ``emoji_dict``)."""

# funasr writes "<|nospeech|><|Event_UNK|>" as one mark (a question mark emoji) where it stands, without
# starting a language segment there; oasr leaves it out of the text at the same place.
_NO_SPEECH_MARK = "<|nospeech|><|Event_UNK|>"
_HELD = "\x00"  # where that mark was, until the segments are joined
_SEGMENT = "<|lang|>"
_TAG = re.compile(r"<\|([^|]*)\|>")


def spell(tag: str) -> str:
    """``"en"`` -> ``"<|en|>"``."""
    return f"<|{tag}|>"


TAG_PIECES = frozenset(spell(t) for t in ALL_TAGS)


@dataclass(frozen=True)
class RichTranscript:
    """What one raw SenseVoice output says.

    Attributes:
        text: the text without the tags (``rich_transcription_postprocess`` without emoji).
        language: the first language tag (one of ``LANGUAGE_TAGS``), None if none.
        emotion: the emotion tag written most often (the first of them on a tie), None if none.
        audio_events: the event tags in the order first written, each once.
    """

    text: str
    language: str | None
    emotion: str | None
    audio_events: tuple[str, ...]


def plain_text(raw: str) -> str:
    """The text of a raw output: split at language tags, every known tag removed from each
    segment, segments stripped and joined, as ``rich_transcription_postprocess`` does."""
    s = raw.replace(_NO_SPEECH_MARK, _HELD)
    for lang in LANGUAGE_TAGS:
        s = s.replace(spell(lang), _SEGMENT)
    parts = []
    for part in s.split(_SEGMENT):
        for tag in ALL_TAGS:
            part = part.replace(spell(tag), "")
        parts.append(part.strip())
    return "".join(parts).replace(_HELD, "").replace("The.", " ").strip()


def _written(raw: str, tags: tuple[str, ...]) -> list[str]:
    """The tags of ``tags`` in ``raw``, in the order written."""
    return [m.group(1) for m in _TAG.finditer(raw) if m.group(1) in tags]


def read_rich_transcript(raw: str) -> RichTranscript:
    """The text and tags of a raw SenseVoice output (the tokenizer's decode of its CTC tokens)."""
    languages = _written(raw, LANGUAGE_TAGS)
    emotions = _written(raw, EMOTION_TAGS)
    events = _written(raw, EVENT_TAGS)
    emotion = None
    if emotions:
        counts = Counter(emotions)
        emotion = max(dict.fromkeys(emotions), key=lambda e: counts[e])  # first written wins a tie
    return RichTranscript(
        text=plain_text(raw),
        language=languages[0] if languages else None,
        emotion=emotion,
        audio_events=tuple(dict.fromkeys(events)),
    )


__all__ = [
    "ALL_TAGS",
    "EMOTION_TAGS",
    "EVENT_TAGS",
    "LANGUAGE_TAGS",
    "TAG_PIECES",
    "TEXTNORM_TAGS",
    "RichTranscript",
    "plain_text",
    "read_rich_transcript",
    "spell",
]
