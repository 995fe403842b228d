"""Typed results of a transcription."""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from oasr.diarization.types import Diarization

FinishReason = Literal["stop", "length"]


@dataclass
class Word:
    """A word with its time span (seconds from the start of the audio).

    Attributes:
        start, end: seconds.
        word: the word's text, with its leading space if it has one.
        probability: the mean probability of its tokens.
        speaker: who said it, with a diarizer (``oasr.diarization.assign``), else None.
    """

    start: float
    end: float
    word: str
    probability: float
    speaker: str | None = None


@dataclass
class Segment:
    """A stretch of transcript with its time span and decode statistics.

    Attributes:
        id: index in the request.
        seek: the window start (in mel frames) the segment was decoded from.
        start, end: seconds from the start of the audio.
        text: the segment's text.
        tokens: its token ids (text and timestamp tokens).
        temperature: the sampling temperature of the accepted decode.
        avg_logprob: the decode's mean token log-probability.
        compression_ratio: gzip compression ratio of the window's text.
        no_speech_prob: probability of the no-speech token at the window start.
        words: word timings when requested.
        token_times: ``(start, end)`` seconds of each of ``tokens``, where the decoder times its
            tokens (CTC and transducer: around each token's spike frame; Paraformer: from the
            CIF fires, as funasr's ``timestamp``); None where it does not (Whisper, speech-LLMs).
        speaker: who said most of it, with a diarizer (``oasr.diarization.assign``), else None.
    """

    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int] = field(default_factory=list)
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0
    words: list[Word] | None = None
    token_times: list[tuple[float, float]] | None = None
    speaker: str | None = None


@dataclass
class RequestOutput:
    """The transcription of one input.

    Attributes:
        request_id: the caller's id (or the engine's).
        text: the whole transcript.
        language: the language decoded in (given or detected) and its probability.
        language_probs: detection probabilities of the top languages, when detected.
        duration: the input's duration in seconds.
        segments: timed segments.
        task: "transcribe" or "translate".
        emotion: the speaker's emotion where the model tags it (SenseVoice: ``"NEUTRAL"``,
            ``"HAPPY"``, ...), else None.
        audio_events: the audio events the model tagged, in order, each once (SenseVoice:
            ``"Speech"``, ``"BGM"``, ``"Laughter"``, ...); None where the model tags none.
        finish_reason: "stop" when the decode ended by itself (an end-of-text or stop token,
            or the end of the audio: every CTC, transducer and Paraformer result); "length" when
            a token budget cut it (a speech-LLM's ``max_new_tokens``, or a Whisper window whose
            decode reached its length limit), so part of the transcript may be missing.
        diarization: who spoke when, with a diarizer (its turns; ``Segment.speaker`` and
            ``Word.speaker`` are read from it), else None.
    """

    request_id: str
    text: str
    segments: list[Segment]
    language: str | None = None
    language_probability: float | None = None
    language_probs: dict[str, float] | None = None
    duration: float = 0.0
    task: str = "transcribe"
    finish_reason: FinishReason = "stop"
    emotion: str | None = None
    audio_events: list[str] | None = None
    diarization: Diarization | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compression_ratio(text: str) -> float:
    """gzip (zlib) compression ratio of the UTF-8 text, as Whisper computes it (0 for no text):
    high values mean repetition."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0
