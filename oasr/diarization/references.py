"""The references oasr's diarizers are measured against, each run as its own documentation runs it.

A reference is a ``Runner``: float32 16-kHz arrays in, one ``Diarization`` per array out, labels
renamed by first turn (oasr's convention), so that two systems' turns compare whatever each
calls its speakers. ``REFERENCES`` maps each diarization package of ``oasr.diarization.loader``
to its reference on the same directory or archive: transformers' ``nemotron3_diarization`` for
nemotron3, pyannote.audio's pipeline for pyannote, NeMo's ``SortformerEncLabelModel`` for
sortformer. ``benchmarks/diarization_bench.py`` and ``oasr bench --peer reference`` both run them;
``agreement`` is how far oasr's turns are the reference's.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from oasr.diarization.types import Diarization, SpeakerTurn, speaker_label

Runner = Callable[[Sequence[np.ndarray]], list[Diarization]]
SAMPLE_RATE = 16000


def _named(turns: list[tuple[float, float, str]], duration: float) -> Diarization:
    """A reference's turns with its labels renamed by first turn (oasr's convention)."""
    names: dict[str, str] = {}
    for _, _, label in sorted(turns):
        names.setdefault(label, speaker_label(len(names)))
    return Diarization([SpeakerTurn(a, b, names[label]) for a, b, label in turns], duration)


def transformers_nemotron3(directory: str) -> Runner:
    """transformers' model and processor, as its model card runs them (float32): the processor pads
    the batch, the model's logits, ``extract_speaker_dict``."""
    import torch
    from transformers import AutoProcessor, Nemotron3DiarizationForAudioFrameClassification

    model = Nemotron3DiarizationForAudioFrameClassification.from_pretrained(directory).eval()
    processor = AutoProcessor.from_pretrained(directory)

    def run(audios: Sequence[np.ndarray]) -> list[Diarization]:
        inputs = processor(list(audios), sampling_rate=SAMPLE_RATE)
        with torch.no_grad():
            logits = model(input_features=inputs["input_features"], attention_mask=inputs["attention_mask"]).logits
        segments = processor.extract_speaker_dict(logits, inputs["attention_mask"])
        return [
            _named([(s["Start"], s["End"], s["Speaker"]) for s in segs], len(audio) / SAMPLE_RATE)
            for audio, segs in zip(audios, segments)
        ]

    return run


def pyannote_audio(directory: str) -> Runner:
    """pyannote.audio's ``Pipeline.from_pretrained(directory)``, one recording a call (it batches
    windows within a recording, not recordings); its regular (overlapping) diarization."""
    import torch
    from pyannote.audio import Pipeline
    from pyannote.audio.telemetry import set_telemetry_metrics

    set_telemetry_metrics(False)
    pipeline = Pipeline.from_pretrained(directory)

    def run(audios: Sequence[np.ndarray]) -> list[Diarization]:
        out = []
        for audio in audios:
            result = pipeline({"waveform": torch.from_numpy(audio)[None], "sample_rate": SAMPLE_RATE})
            turns = [(s.start, s.end, label) for s, _, label in result.speaker_diarization.itertracks(yield_label=True)]
            out.append(_named(turns, len(audio) / SAMPLE_RATE))
        return out

    return run


def nemo_sortformer(path: str) -> Runner:
    """NeMo's ``SortformerEncLabelModel.restore_from(path).diarize`` (its default post-processing),
    the whole batch in one call."""
    from nemo.collections.asr.models import SortformerEncLabelModel

    model = SortformerEncLabelModel.restore_from(path, map_location="cpu").eval()

    def run(audios: Sequence[np.ndarray]) -> list[Diarization]:
        lines = model.diarize(
            list(audios), sample_rate=SAMPLE_RATE, batch_size=len(audios), num_workers=0, verbose=False
        )
        out = []
        for audio, rows in zip(audios, lines):
            turns = [(float(a), float(b), k) for a, b, k in (line.split() for line in rows)]
            out.append(_named(turns, len(audio) / SAMPLE_RATE))
        return out

    return run


@dataclass(frozen=True)
class Reference:
    """A diarization package's reference implementation.

    Attributes:
        name: what reports call it.
        module: what must be importable to run it.
        install: how to install it.
        load: ``path -> Runner`` on the directory or archive oasr's package reads.
    """

    name: str
    module: str
    install: str
    load: Callable[[str], Runner]

    def available(self) -> bool:
        try:
            return importlib.util.find_spec(self.module) is not None
        except ModuleNotFoundError:  # a parent package is missing
            return False


REFERENCES: dict[str, Reference] = {
    "nemotron3": Reference(
        "transformers", "transformers.models.nemotron3_diarization", "transformers", transformers_nemotron3
    ),
    "pyannote": Reference(
        "pyannote.audio", "pyannote.audio", "pyannote.audio==4.0.3 (with --no-deps, as .ci/run does)", pyannote_audio
    ),
    "sortformer": Reference(
        "NeMo", "nemo.collections.asr", "nemo-toolkit[asr] (as .ci/run installs it)", nemo_sortformer
    ),
}
"""``oasr.diarization.loader`` package name -> its reference."""


def in_batches(diarize: Runner, audios: Sequence[np.ndarray], batch_size: int) -> list[Diarization]:
    """``diarize`` called on ``batch_size`` recordings at a time, in order."""
    out: list[Diarization] = []
    for i in range(0, len(audios), batch_size):
        out += diarize(audios[i : i + batch_size])
    return out


def timelines(diarization: Diarization) -> list[tuple[tuple[float, float], ...]]:
    """Each speaker's turn times, whatever the labels (two speakers starting together are named in
    either order by different systems)."""
    return sorted(tuple((t.start, t.end) for t in diarization.turns if t.speaker == s) for s in diarization.speakers)


def agreement(mine: Sequence[Diarization], reference: Sequence[Diarization]) -> dict:
    """How far ``mine`` are the reference's turns, file by file.

    Returns:
        ``{"der", "same_turns", "files"}``: the DER (collar 0, overlap scored) of ``mine`` with the
        reference's turns taken as the truth, over the files where the reference found speech (None
        where it found none anywhere); the files whose turns are the same, labels aside.
    """
    from oasr.diarization.scoring import score_diarization

    if len(mine) != len(reference):
        raise ValueError(f"{len(mine)} diarizations against {len(reference)} of the reference")
    pairs = [(r, m) for r, m in zip(reference, mine) if r.turns]
    return {
        "der": score_diarization(pairs, collar=0.0).der if pairs else None,
        "same_turns": sum(timelines(a) == timelines(b) for a, b in zip(mine, reference)),
        "files": len(mine),
    }


__all__ = ["REFERENCES", "Reference", "Runner", "agreement", "in_batches", "timelines"]
