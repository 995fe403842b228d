"""What every diarizer returns, and the contract a diarization model implements.

A diarizer (``Diarizer``) takes a batch of 16 kHz mono float32 waveforms and returns, for each,
a ``Diarization``: speaker turns (``SpeakerTurn``: start, end in seconds, speaker label), sorted
by start. Labels are ``SPEAKER_00``, ``SPEAKER_01``, ... numbered in order of each speaker's first
turn (pyannote's and WhisperX's convention; an end-to-end model's output slots, ordered by
arrival as Sortformer and Nemotron's diarizer order them, get the same names). Turns of different
speakers may overlap; turns of one speaker never do (``Diarization.merged`` joins them).

The surfaces (``oasr diarize``, transcription with speakers, ``diarized_json``) read only this
module, so any model that implements ``Diarizer`` serves all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np


def speaker_label(index: int) -> str:
    """The label of the ``index``-th speaker to appear (``SPEAKER_00``, ...)."""
    if index < 0:
        raise ValueError(f"speaker index must be >= 0, got {index}")
    return f"SPEAKER_{index:02d}"


@dataclass(frozen=True)
class SpeakerTurn:
    """One speaker talking from ``start`` to ``end`` (seconds from the start of the audio)."""

    start: float
    end: float
    speaker: str

    def __post_init__(self) -> None:
        if not (self.end >= self.start >= 0.0):
            raise ValueError(f"a speaker turn needs 0 <= start <= end, got {self.start}..{self.end}")

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Diarization:
    """Who spoke when in one recording.

    Attributes:
        turns: speaker turns, sorted by (start, end, speaker).
        duration: the recording's duration in seconds.
        speakers: every label that has a turn, in order of first appearance.
    """

    turns: list[SpeakerTurn]
    duration: float
    speakers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.turns = sorted(self.turns, key=lambda t: (t.start, t.end, t.speaker))
        if not self.speakers:
            seen: dict[str, None] = {}
            for turn in self.turns:
                seen.setdefault(turn.speaker, None)
            self.speakers = list(seen)

    def merged(self, collar: float = 0.0) -> Diarization:
        """The same speakers with each speaker's turns that touch, overlap or are at most
        ``collar`` seconds apart joined into one."""
        by_speaker: dict[str, list[SpeakerTurn]] = {}
        for turn in self.turns:
            by_speaker.setdefault(turn.speaker, []).append(turn)
        out: list[SpeakerTurn] = []
        for speaker, turns in by_speaker.items():
            start, end = turns[0].start, turns[0].end
            for turn in turns[1:]:
                if turn.start <= end + collar:
                    end = max(end, turn.end)
                else:
                    out.append(SpeakerTurn(start, end, speaker))
                    start, end = turn.start, turn.end
            out.append(SpeakerTurn(start, end, speaker))
        return Diarization(out, self.duration, list(self.speakers))

    def to_rttm(self, uri: str = "audio") -> str:
        """NIST RTTM: one ``SPEAKER`` line per turn (channel 1, times to the millisecond).
        ``uri`` must not contain whitespace (RTTM's fields are space-separated)."""
        if not uri or any(c.isspace() for c in uri):
            raise ValueError(f"an RTTM file id must be non-empty without whitespace, got {uri!r}")
        return "".join(
            f"SPEAKER {uri} 1 {t.start:.3f} {t.duration:.3f} <NA> <NA> {t.speaker} <NA> <NA>\n" for t in self.turns
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


TURN_OPENED = "turn_opened"
TURN_CLOSED = "turn_closed"


@dataclass(frozen=True)
class SpeakerEvent:
    """What a live diarization stream reports: a speaker starting or stopping.

    Attributes:
        type: ``"turn_opened"`` or ``"turn_closed"``.
        speaker: the speaker's label (``SPEAKER_00``, ... in order of first turn).
        time: when, in seconds from the start of the stream (the turn's start or end).
        start: the turn's start (equal to ``time`` for ``turn_opened``).
    """

    type: str
    speaker: str
    time: float
    start: float

    @property
    def turn(self) -> SpeakerTurn | None:
        """The finished turn of a ``turn_closed`` event (None for ``turn_opened``)."""
        return SpeakerTurn(self.start, self.time, self.speaker) if self.type == TURN_CLOSED else None

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "speaker": self.speaker, "time": self.time, "start": self.start}


@dataclass(frozen=True)
class SpeakerConstraints:
    """How many speakers a recording has (None: the model decides), checked once for every
    diarizer: each an integer >= 1, ``min_speakers <= num_speakers <= max_speakers``. Against a
    model that tracks at most N speakers, ``num_speakers`` / ``min_speakers`` above N are refused
    (it cannot give them) and ``max_speakers`` above N is met as it stands."""

    num_speakers: int | None = None
    min_speakers: int | None = None
    max_speakers: int | None = None

    def __post_init__(self) -> None:
        for name in ("num_speakers", "min_speakers", "max_speakers"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        lo, hi, n = self.min_speakers, self.max_speakers, self.num_speakers
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"min_speakers={lo} is more than max_speakers={hi}")
        if n is not None and ((lo is not None and n < lo) or (hi is not None and n > hi)):
            raise ValueError(f"num_speakers={n} is outside min_speakers..max_speakers ({lo}..{hi})")

    def check(self, diarizer: Diarizer) -> None:
        """Refuse a count the model cannot give (its ``max_speakers``)."""
        self.kept(diarizer.max_speakers)

    def kept(self, most: int | None) -> int | None:
        """How many speakers an end-to-end model with ``most`` output slots keeps (its most active
        ones): ``num_speakers``, else ``max_speakers`` when below ``most``, else None (all).

        Raises:
            ValueError: ``num_speakers`` or ``min_speakers`` above ``most``.
        """
        for name in ("num_speakers", "min_speakers"):
            value = getattr(self, name)
            if most is not None and value is not None and value > most:
                raise ValueError(f"{name}={value}: the diarization model finds at most {most} speakers")
        if self.num_speakers is not None:
            return int(self.num_speakers)
        if self.max_speakers is not None and (most is None or self.max_speakers < most):
            return int(self.max_speakers)
        return None


def most_active_slots(activity: dict[int, float], keep: int | None) -> set[int] | None:
    """The ``keep`` output slots of an end-to-end model with the most activity (frames or seconds;
    ties: the earlier slot), of those ``activity`` names; None (``keep`` None): every slot."""
    if keep is None:
        return None
    return set(sorted(activity, key=lambda s: (-activity[s], s))[:keep])


@runtime_checkable
class Diarizer(Protocol):
    """A loaded diarization model.

    ``diarize`` runs a batch of recordings (each a 1-D float32 array at ``sampling_rate``) and
    returns one ``Diarization`` per recording, in order; rows of one call share their forwards
    where the model allows, and a row's result never depends on the others in the batch.
    ``num_speakers`` fixes the count (a clustering pipeline's ``num_speakers``; an end-to-end
    model keeps its ``num_speakers`` most active slots); ``min_speakers`` / ``max_speakers``
    bound it. A model that cannot honour a constraint raises ``ValueError`` naming it.

    Optional: ``embed(audios) -> np.ndarray`` of shape (N, D), one speaker embedding per clip
    (pyannote's pipeline, through its embedding model); known speakers need it
    (``oasr.diarization.service``), and a model without it refuses them.
    """

    sampling_rate: int
    max_speakers: int | None

    def diarize(
        self,
        audios: Sequence[np.ndarray],
        *,
        num_speakers: int | None = None,
        min_speakers: int | None = None,
        max_speakers: int | None = None,
    ) -> list[Diarization]: ...
