"""One loaded diarizer shared by every request: batched calls, speaker constraints, known speakers.

``DiarizationService.run(jobs)`` diarizes many recordings at once: jobs that ask for the same
speaker constraints (``num_speakers`` / ``min_speakers`` / ``max_speakers``) go to the model in
one ``Diarizer.diarize`` call, ``batch_size`` recordings at a time (rows of a call never change
each other's result: the ``Diarizer`` contract), and a job that fails fails alone. The engine
(``engine/diarizing.py``) hands it every request admitted since its last step, so concurrent
requests share forwards as their transcriptions do; ``oasr diarize`` hands it its files.

Known speakers (OpenAI's ``known_speaker_names[]`` / ``known_speaker_references[]``): a job may
carry reference clips by name (``KNOWN_SPEAKER_MIN_S`` to ``KNOWN_SPEAKER_MAX_S`` seconds each, at
most ``MAX_KNOWN_SPEAKERS``). The diarizer must embed audio (``embed(audios) -> (N, D)``, as
pyannote's pipeline does with its speaker-embedding model); one that cannot is refused with a
``ValueError`` (HTTP 400) rather than guessed around. Each found speaker's voice is its longest
turns, up to ``CLUSTER_AUDIO_S`` seconds joined; its embedding and the references' are compared
by cosine similarity and matched one to one (the assignment with the largest total similarity,
``scipy.optimize.linear_sum_assignment``); a pair below ``MIN_SIMILARITY`` is not matched. A
matched speaker's turns take the reference's name; the others keep their labels.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from oasr.diarization.types import Diarization, Diarizer, SpeakerConstraints, SpeakerTurn

MAX_KNOWN_SPEAKERS = 4  # OpenAI's limit
KNOWN_SPEAKER_MIN_S = 2.0  # OpenAI's bounds on a reference clip
KNOWN_SPEAKER_MAX_S = 10.0
CLUSTER_AUDIO_S = 10.0  # of a found speaker's speech embedded to compare with the references
MIN_SIMILARITY = 0.25  # cosine similarity below which a speaker is not taken for a known one


@dataclass
class DiarizationJob:
    """One recording to diarize (``audio``: mono float32 at the diarizer's rate)."""

    audio: np.ndarray
    constraints: SpeakerConstraints = field(default_factory=SpeakerConstraints)
    known: dict[str, np.ndarray] | None = None  # reference clips by speaker name
    result: Diarization | None = None
    error: BaseException | None = None


def check_known_speakers(diarizer: Diarizer, known: dict[str, np.ndarray]) -> None:
    """Refuse known speakers the service cannot use (see the module's docstring).

    Raises:
        ValueError: no ``embed`` on the diarizer, too many, an empty name, a clip out of bounds.
    """
    if not callable(getattr(diarizer, "embed", None)):
        raise ValueError(
            f"known speakers need a diarization model that embeds voices (pyannote's pipeline); "
            f"{type(diarizer).__name__} has no speaker embeddings"
        )
    if len(known) > MAX_KNOWN_SPEAKERS:
        raise ValueError(f"{len(known)} known speakers; at most {MAX_KNOWN_SPEAKERS}")
    rate = diarizer.sampling_rate
    for name, clip in known.items():
        if not name.strip():
            raise ValueError("a known speaker's name is empty")
        seconds = len(clip) / rate
        if not KNOWN_SPEAKER_MIN_S <= seconds <= KNOWN_SPEAKER_MAX_S:
            raise ValueError(
                f"known speaker {name!r}: its reference is {seconds:.2f} s long; references must be "
                f"{KNOWN_SPEAKER_MIN_S:g} to {KNOWN_SPEAKER_MAX_S:g} s"
            )


class DiarizationService:
    """A diarizer behind a lock, run over batches of jobs (see the module's docstring).

    Args:
        diarizer: the loaded model.
        batch_size: recordings per ``diarize`` call.
    """

    def __init__(self, diarizer: Diarizer, batch_size: int = 8) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.diarizer = diarizer
        self.batch_size = batch_size
        self.lock = threading.Lock()  # the engine thread and a CLI / test caller never share a forward
        self.calls = 0
        self.recordings = 0

    @property
    def sampling_rate(self) -> int:
        return self.diarizer.sampling_rate

    def run(self, jobs: Sequence[DiarizationJob]) -> None:
        """Diarize ``jobs`` in place (``result``, or ``error`` for a job that failed)."""
        groups: dict[SpeakerConstraints, list[DiarizationJob]] = {}
        for job in jobs:
            groups.setdefault(job.constraints, []).append(job)
        for constraints, group in groups.items():
            for i in range(0, len(group), self.batch_size):
                self._call(group[i : i + self.batch_size], constraints)
        for job in jobs:
            if job.result is not None and job.known:
                try:
                    job.result = self.name_known(job.audio, job.result, job.known)
                except Exception as e:  # noqa: BLE001 - this job fails; the others keep their results
                    job.result, job.error = None, e

    def _call(self, batch: list[DiarizationJob], constraints: SpeakerConstraints) -> None:
        kwargs = {
            "num_speakers": constraints.num_speakers,
            "min_speakers": constraints.min_speakers,
            "max_speakers": constraints.max_speakers,
        }
        try:
            with self.lock:
                results = self.diarizer.diarize([job.audio for job in batch], **kwargs)
            if len(results) != len(batch):
                raise RuntimeError(f"the diarizer returned {len(results)} results for {len(batch)} recordings")
        except Exception as e:  # noqa: BLE001 - one at a time, so that only the culprit fails
            if len(batch) == 1:
                batch[0].error = e
                return
            for job in batch:
                self._call([job], constraints)
            return
        self.calls += 1
        self.recordings += len(batch)
        for job, result in zip(batch, results):
            job.result = result

    def diarize(self, audios: Sequence[np.ndarray], constraints: SpeakerConstraints | None = None) -> list[Diarization]:
        """Diarize ``audios`` (raising the first job's error)."""
        jobs = [DiarizationJob(a, constraints or SpeakerConstraints()) for a in audios]
        self.run(jobs)
        for job in jobs:
            if job.error is not None:
                raise job.error
        return [job.result for job in jobs]  # type: ignore[misc]

    def name_known(self, audio: np.ndarray, diarization: Diarization, known: dict[str, np.ndarray]) -> Diarization:
        """``diarization`` with the speakers that match a known speaker's reference renamed to it."""
        check_known_speakers(self.diarizer, known)
        found = [s for s in diarization.speakers if any(t.speaker == s for t in diarization.turns)]
        if not found:
            return diarization
        clips = [_speaker_audio(audio, diarization.turns, s, self.sampling_rate) for s in found]
        embed: Callable[[Sequence[np.ndarray]], np.ndarray] = self.diarizer.embed  # type: ignore[attr-defined]
        with self.lock:
            vectors = np.asarray(embed([*clips, *known.values()]), dtype=np.float64)
        names = match_speakers(vectors[: len(found)], vectors[len(found) :], found, list(known))
        turns = [SpeakerTurn(t.start, t.end, names.get(t.speaker, t.speaker)) for t in diarization.turns]
        return Diarization(turns, diarization.duration, [names.get(s, s) for s in diarization.speakers])


def match_speakers(
    found: np.ndarray, references: np.ndarray, labels: Sequence[str], names: Sequence[str]
) -> dict[str, str]:
    """``{label: name}`` for the one-to-one matching of found speakers' embeddings to the
    references' with the largest total cosine similarity, pairs below ``MIN_SIMILARITY`` dropped."""
    from scipy.optimize import linear_sum_assignment

    def unit(x: np.ndarray) -> np.ndarray:
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    similarity = unit(found) @ unit(references).T  # (n_found, n_known)
    rows, cols = linear_sum_assignment(-similarity)
    return {labels[r]: names[c] for r, c in zip(rows, cols) if similarity[r, c] >= MIN_SIMILARITY}


def _speaker_audio(audio: np.ndarray, turns: Sequence[SpeakerTurn], speaker: str, rate: int) -> np.ndarray:
    """The speaker's longest turns, joined, up to ``CLUSTER_AUDIO_S`` seconds."""
    own = sorted((t for t in turns if t.speaker == speaker), key=lambda t: t.duration, reverse=True)
    pieces, total = [], 0
    limit = round(CLUSTER_AUDIO_S * rate)
    for turn in own:
        piece = audio[round(turn.start * rate) : round(turn.end * rate)][: limit - total]
        if piece.size:
            pieces.append(piece)
            total += piece.size
        if total >= limit:
            break
    return np.concatenate(pieces) if pieces else audio[:limit]


__all__ = [
    "DiarizationJob",
    "DiarizationService",
    "SpeakerConstraints",
    "check_known_speakers",
    "match_speakers",
]
