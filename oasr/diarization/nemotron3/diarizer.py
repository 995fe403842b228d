"""Nemotron 3 Diarization as a ``Diarizer``: waveforms in, speaker turns out.

    waveform -> NeMo-style log-mel (oasr's Parakeet front end without normalisation: what
    transformers' ``NemotronAsrStreamingFeatureExtractor`` computes) -> ``forward_offline``
    -> sigmoid -> speaker-activity probabilities (T, S) at 10 ms, S slots by arrival
    -> turns: a slot is active in a frame when its probability is above ``threshold`` (0.5);
       each run of active frames is a turn from its first frame's time to the time of the frame
       after its last (transformers' ``Nemotron3DiarizationProcessor.extract_speaker_dict``, the
       post-processing the model card applies: no onset / offset hysteresis, no minimum durations)

transformers' feature extractor gives a clip of ``N`` samples ``N // hop + 1`` frames and counts
the first ``N // hop`` valid; the model sees the extra (zero, masked) frame too, and so does this
one, so that a clip gives exactly transformers' probabilities. A padded batch gives each row what
it gets alone: frames past a row's own end are masked and never reach its last frames' upsampling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from oasr.audio.io import AudioDecodeError
from oasr.diarization.nemotron3.config import Checkpoint, is_checkpoint, read_checkpoint
from oasr.diarization.nemotron3.model import Nemotron3DiarizationModel
from oasr.diarization.types import Diarization, SpeakerConstraints, SpeakerTurn, most_active_slots, speaker_label
from oasr.models.base import LoadError, LoadReport, parse_dtype
from oasr.models.formats.hf import load_hf_weights
from oasr.models.parakeet.features import ParakeetFrontend

DEFAULT_THRESHOLD = 0.5  # Nemotron3DiarizationProcessor.extract_speaker_dict's default


def activity_runs(probs: np.ndarray, threshold: float) -> list[tuple[int, int, int]]:
    """Each slot's runs of frames whose probability is above ``threshold``.

    Shapes:
        probs (T, S) -> [(first frame, frame after the last, slot)], sorted by (first frame, slot)
    """
    active = np.asarray(probs) > threshold
    edges = np.diff(np.pad(active.astype(np.int8), ((1, 1), (0, 0))), axis=0)  # +1 starts, -1 ends
    runs = []
    for slot in range(active.shape[1]):
        starts = np.flatnonzero(edges[:, slot] == 1)
        ends = np.flatnonzero(edges[:, slot] == -1)
        runs += [(int(s), int(e), slot) for s, e in zip(starts, ends, strict=True)]
    return sorted(runs, key=lambda r: (r[0], r[2]))


def choose_slots(runs: list[tuple[int, int, int]], slots: int, keep: int | None) -> set[int] | None:
    """The ``keep`` slots with the most active frames (``SpeakerConstraints.kept``'s count; the
    earlier slot on a tie), None: all. An end-to-end model cannot split a voice, so
    ``min_speakers`` only bounds what is asked."""
    frames = dict.fromkeys(range(slots), 0)
    for start, end, slot in runs:
        frames[slot] += end - start
    return most_active_slots(frames, keep)


def turns_from_runs(
    runs: list[tuple[int, int, int]], frame_s: float, keep: set[int] | None = None
) -> list[SpeakerTurn]:
    """Speaker turns of activity runs; slots are named ``SPEAKER_00``, ... in order of first turn."""
    names: dict[int, str] = {}
    turns = []
    for start, end, slot in runs:
        if keep is not None and slot not in keep:
            continue
        name = names.setdefault(slot, speaker_label(len(names)))
        turns.append(SpeakerTurn(round(start * frame_s, 2), round(end * frame_s, 2), name))
    return turns


class Nemotron3Diarizer:
    """A loaded Nemotron 3 Diarization checkpoint (implements ``oasr.diarization.Diarizer``).

    Attributes:
        sampling_rate: input rate (16 kHz).
        max_speakers: output slots (8 for the released checkpoint).
        threshold: probability above which a slot is active.
        checkpoint: the directory's settings (model, front end, streaming modes).
        model: the network.
    """

    def __init__(
        self, model: Nemotron3DiarizationModel, checkpoint: Checkpoint, *, threshold: float = DEFAULT_THRESHOLD
    ) -> None:
        fe = checkpoint.features
        self.model = model
        self.checkpoint = checkpoint
        self.sampling_rate = fe.sampling_rate
        self.max_speakers: int | None = checkpoint.model.num_speakers
        self.threshold = float(threshold)
        self.frame_s = fe.hop_length / fe.sampling_rate
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        precision = torch.float64 if self.dtype == torch.float64 else torch.float32
        self.frontend = ParakeetFrontend(**asdict(fe), normalize=False, dtype=precision)

    def features(self, audios: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-mel frames as transformers' extractor pads them: ``N // hop + 1`` frames a clip,
        zero past each row's valid ones.

        Shapes:
            -> feats (B, T, F) on the model's device and dtype, valid frames (B,) int64
        """
        rows = [_checked_audio(a, i) for i, a in enumerate(audios)]
        if not rows:
            raise ValueError("diarize needs at least one recording")
        lengths = torch.tensor([r.shape[0] for r in rows])
        batch = torch.zeros(len(rows), int(lengths.max()), dtype=self.frontend.dtype)
        for i, r in enumerate(rows):
            batch[i, : r.shape[0]] = torch.from_numpy(r)
        feats, frames = self.frontend.features(batch.to(self.device), lengths.to(self.device))
        feats = torch.nn.functional.pad(feats, (0, 0, 0, 1))  # the extra, never valid frame
        return feats.to(self.dtype), frames

    @torch.inference_mode()
    def speaker_probabilities(self, audios: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Each recording's speaker-activity probabilities, one row every ``frame_s`` seconds.

        Returns:
            per recording, (valid frames, max_speakers) float arrays (slots by arrival).
        """
        feats, frames = self.features(audios)
        out = [np.zeros((0, self.checkpoint.model.num_speakers)) for _ in range(feats.shape[0])]
        rows = torch.nonzero(frames > 0).flatten().tolist()  # a clip shorter than a hop has no frame
        if rows:
            sel = torch.tensor(rows, device=feats.device)
            kept = frames[sel]
            logits = self.model.forward_offline(feats[sel, : int(kept.max()) + 1], kept)
            probs = logits.sigmoid().double().cpu().numpy()
            for j, i in enumerate(rows):
                out[i] = probs[j, : int(kept[j])]
        return out

    def diarize(
        self,
        audios: Sequence[np.ndarray],
        *,
        num_speakers: int | None = None,
        min_speakers: int | None = None,
        max_speakers: int | None = None,
    ) -> list[Diarization]:
        """Speaker turns of each recording (see ``Diarizer.diarize``)."""
        slots = self.checkpoint.model.num_speakers
        count = SpeakerConstraints(num_speakers, min_speakers, max_speakers).kept(slots)  # refused before any work
        results = []
        for audio, probs in zip(audios, self.speaker_probabilities(audios), strict=True):
            runs = activity_runs(probs, self.threshold)
            keep = choose_slots(runs, slots, count)
            duration = len(audio) / self.sampling_rate
            results.append(Diarization(turns_from_runs(runs, self.frame_s, keep), duration))
        return results

    def stream(self, mode: str | None = None):
        """A live stream (``DiarizationStream``: feed audio, get speaker-turn events) in one of the
        checkpoint's streaming modes (default: its ``streaming_mode``)."""
        from oasr.diarization.nemotron3.stream import DiarizationStream

        return DiarizationStream(self, mode)


def _checked_audio(audio: np.ndarray, index: int) -> np.ndarray:
    a = np.asarray(audio)
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.floating):
        raise AudioDecodeError(f"recording {index}: expected a 1-D float waveform, got {a.dtype} {a.shape}")
    if a.size and not np.isfinite(a).all():
        raise AudioDecodeError(f"recording {index}: the waveform holds NaN or infinite samples")
    return np.ascontiguousarray(a, dtype=np.float64)


def detect(path: str | Path) -> bool:
    """Does ``path`` hold a transformers ``nemotron3_diarization`` directory (``config.json``
    with that ``model_type``)?"""
    return Path(path).is_dir() and is_checkpoint(path)


def load(
    path: str | Path, *, device: str | torch.device = "cpu", dtype: torch.dtype | str | None = None
) -> Nemotron3Diarizer:
    """Load a ``save_pretrained`` directory (``config.json``, ``model.safetensors`` or any
    weights layout transformers writes, the processor / feature-extractor config).

    Args:
        dtype: compute dtype, a torch dtype or its name (None / "auto": float32; float64 for
            reference checks).

    Raises:
        LoadError: not this layout, or weights that do not match the config exactly.
    """
    dtype = parse_dtype(dtype) if not isinstance(dtype, torch.dtype) else dtype
    checkpoint = read_checkpoint(path)
    model = Nemotron3DiarizationModel(checkpoint.model)
    state = load_hf_weights(Path(path))
    own = model.state_dict()
    wrong = [
        f"{k}: {tuple(v.shape)} vs {tuple(own[k].shape)}"
        for k, v in state.items()
        if k in own and v.shape != own[k].shape
    ]
    report = LoadReport.build(own, [k for k in state if k in own], unexpected=[k for k in state if k not in own])
    if wrong or not report.ok or report.dropped:
        raise LoadError(
            f"{path}: the weights do not fit nemotron3_diarization ({report.summary()}; "
            f"missing {sorted(report.missing)[:5]}, unexpected {sorted(report.dropped)[:5]}, wrong shape {wrong[:5]})"
        )
    model.load_state_dict(state)
    model.to(device=device, dtype=dtype or torch.float32).eval()
    return Nemotron3Diarizer(model, checkpoint)
