"""Speaker diarization: who spoke when (``types``: the results and the ``Diarizer`` contract)."""

from oasr.diarization.types import (
    Diarization,
    Diarizer,
    SpeakerConstraints,
    SpeakerEvent,
    SpeakerTurn,
    speaker_label,
)

__all__ = ["Diarization", "Diarizer", "SpeakerConstraints", "SpeakerEvent", "SpeakerTurn", "speaker_label"]
