"""A live Sortformer stream: audio in as it arrives, speaker-turn events (and each chunk's speaker
probabilities) out.

    stream = diarizer.stream()                 # a streaming archive's settings, or a mode of STREAMING_MODES
    for piece in audio_pieces:                 # any sizes, 16 kHz mono float32
        for event in stream.feed(piece):       # SpeakerEvent: turn_opened / turn_closed
            ...
    stream.close()                             # the last chunks; every open turn closed
    stream.diarization()                       # everything, as a Diarization

``push`` / ``finish`` are the same steps returning one ``StreamUpdate`` per chunk (its
probabilities and events); ``feed`` / ``close`` return only the events (the interface the live
surfaces read, shared with Nemotron 3 Diarization's stream).

A chunk runs once its right context has arrived (``chunk_right_context`` frames after it), so
the latency is ``(chunk_len + chunk_right_context) x frame_s`` plus the compute. The chunks,
the speaker cache and the FIFO are those of the streaming forward (``streaming.py``) on the whole
recording: for an archive whose front end does not normalise (``normalize: NA``) the stream's
probabilities equal NeMo's ``forward`` on the whole recording. NeMo's ``per_feature``
normalisation needs the whole recording; a live stream normalises each chunk with the mean and
standard deviation of every mel frame received so far instead (the same formula, which converges
to the whole recording's).

Turns come from the same post-processing as offline (``postprocess.LiveSegmenter``): the closed
turns of a stream are those ``diarize`` gives its probabilities, each opened first at its start.
A slot is named (``SPEAKER_00``, ...) when its first turn opens; ``diarization()`` names them by
first turn, as ``diarize`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from oasr.audio.streaming import FeatureStream
from oasr.diarization.sortformer.config import StreamingParams
from oasr.diarization.sortformer.postprocess import LiveSegmenter
from oasr.diarization.sortformer.streaming import StreamState, step
from oasr.diarization.types import TURN_CLOSED, TURN_OPENED, Diarization, SpeakerEvent, speaker_label
from oasr.models.parakeet.features import NORM_EPS, ParakeetFrontend


@dataclass
class StreamUpdate:
    """What one chunk of a stream gives.

    Attributes:
        start: seconds from the start of the stream of the chunk's first frame.
        frame_s: seconds per frame.
        probs: (frames, slots) speaker probabilities, slots in order of arrival.
        events: the turns opened and closed with this chunk (at ``finish``: every open one closed).
    """

    start: float
    frame_s: float
    probs: np.ndarray
    events: list[SpeakerEvent] = field(default_factory=list)

    @property
    def end(self) -> float:
        return self.start + self.probs.shape[0] * self.frame_s

    def to_dict(self) -> dict:
        return {
            "start": self.start,
            "end": self.end,
            "probs": self.probs.tolist(),
            "events": [e.to_dict() for e in self.events],
        }


class _RunningNorm:
    """NeMo's per-feature normalisation with the statistics of every frame so far."""

    def __init__(self, n_features: int) -> None:
        self.count = 0
        self.sum = torch.zeros(n_features, dtype=torch.float64)
        self.sq = torch.zeros(n_features, dtype=torch.float64)

    def update(self, frames: torch.Tensor) -> None:
        f = frames.double()
        self.count += f.shape[0]
        self.sum += f.sum(dim=0)
        self.sq += (f * f).sum(dim=0)

    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        n = max(self.count, 1)
        mean = self.sum / n
        var = ((self.sq - n * mean * mean) / max(self.count - 1, 1)).clamp(min=0)
        return ((frames.double() - mean) / (var.sqrt() + NORM_EPS)).to(frames.dtype)


class SortformerStream:
    """One live stream of a streaming Sortformer (``SortformerDiarizer.open_stream``)."""

    def __init__(self, diarizer, params: StreamingParams) -> None:
        self.diarizer = diarizer
        self.params = params
        self.model = diarizer.model
        self.factor = self.model.subsampling_factor
        self.frame_s = diarizer.frame_s
        fe = diarizer.frontend
        self.raw = ParakeetFrontend(
            feature_size=fe.n_features,
            sampling_rate=fe.sampling_rate,
            hop_length=fe.hop_length,
            n_fft=fe.n_fft,
            win_length=fe.win_length,
            preemphasis=fe.preemphasis,
            normalize=False,
            dtype=fe.dtype,
        )
        self.norm = _RunningNorm(fe.n_features) if fe.normalize else None
        self.features = FeatureStream(self.raw)
        self.frames = torch.zeros(0, fe.n_features, dtype=fe.dtype)  # raw mel frames not yet dropped
        self.frames_start = 0  # feature-frame index of self.frames[0]
        self.next_start = 0  # feature frame where the next chunk starts
        self.state = StreamState.initial(
            1, self.model.config.encoder.hidden_size, self.model.config.num_speakers, diarizer.device, fe.dtype
        )
        self.segmenter = LiveSegmenter(self.model.config.num_speakers, self.factor, diarizer.postprocessing)
        self.names: dict[int, str] = {}
        self.turns: list[tuple[int, float, float]] = []
        self.probs: list[np.ndarray] = []
        self.samples = 0
        self.finished = False

    @property
    def latency_s(self) -> float:
        """Audio a chunk waits for: the chunk and its right context."""
        return (self.params.chunk_len + self.params.chunk_right_context) * self.frame_s

    def feed(self, samples: np.ndarray) -> list[SpeakerEvent]:
        """Append audio (1-D float32 at the diarizer's rate) -> the turns it opens and closes."""
        return [e for update in self.push(samples) for e in update.events]

    def close(self) -> list[SpeakerEvent]:
        """End the stream: the events of its last chunks, then every open turn closed."""
        return [e for update in self.finish() for e in update.events]

    def push(self, samples: np.ndarray) -> list[StreamUpdate]:
        """Append audio (1-D float32 at the diarizer's rate) -> the chunks that became ready."""
        if self.finished:
            raise RuntimeError("feed after finish")
        x = np.asarray(samples, dtype=np.float32)
        if x.ndim != 1:
            raise ValueError(f"expected 1-D mono samples, got shape {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError("the audio holds NaN or infinite samples")
        self.samples += x.size
        self._add(self.features.push(x))
        out = []
        chunk, right = self.params.chunk_len * self.factor, self.params.chunk_right_context * self.factor
        while self.frames_start + self.frames.shape[0] >= self.next_start + chunk + right:
            out.append(self._run(self.next_start + chunk, right))
        return out

    def finish(self) -> list[StreamUpdate]:
        """The last chunks (with the right context there is) and the turns still open."""
        if self.finished:
            return []
        self._add(self.features.finish())
        self.finished = True
        n = self.frames_start + self.frames.shape[0]
        chunk, right = self.params.chunk_len * self.factor, self.params.chunk_right_context * self.factor
        out = []
        while self.next_start < n:
            end = min(self.next_start + chunk, n)
            out.append(self._run(end, min(right, n - end)))
        closing = self._events(self.segmenter.finish())
        if out:
            out[-1].events += closing
        elif closing:
            out.append(StreamUpdate(self.next_start * self.frame_s / self.factor, self.frame_s, self._empty(), closing))
        return out

    def diarization(self) -> Diarization:
        """Every final turn so far, named by first turn (as ``diarize`` names them)."""
        by_slot: list[list[tuple[float, float]]] = [[] for _ in range(self.model.config.num_speakers)]
        for slot, s, e in self.turns:
            by_slot[slot].append((s, e))
        return self.diarizer.to_diarization(by_slot, self.samples / self.diarizer.sampling_rate)

    def speaker_probabilities(self) -> np.ndarray:
        """(frames, slots) probabilities of every chunk so far."""
        return np.concatenate(self.probs) if self.probs else self._empty()

    def _empty(self) -> np.ndarray:
        return np.zeros((0, self.model.config.num_speakers))

    def _add(self, frames: torch.Tensor) -> None:
        if frames.shape[0]:
            frames = frames.to(self.frames.dtype)
            if self.norm is not None:
                self.norm.update(frames)
            self.frames = torch.cat([self.frames, frames])

    def _run(self, end: int, right: int) -> StreamUpdate:
        start = self.next_start
        left = min(self.params.chunk_left_context * self.factor, start)
        lo = start - left - self.frames_start
        window = self.frames[lo : end + right - self.frames_start]
        if self.norm is not None:
            window = self.norm(window)
        probs, self.state = step(
            self.model, self.params, self.state, window[None].to(self.diarizer.device), left, right
        )
        probs = probs[0].double().cpu().numpy()
        self.probs.append(probs)
        self.next_start = end
        # Keep the frames the next chunk's left context reads.
        keep = max(end - self.params.chunk_left_context * self.factor, 0) - self.frames_start
        if keep > 0:
            self.frames = self.frames[keep:]
            self.frames_start += keep
        update = StreamUpdate(start // self.factor * self.frame_s, self.frame_s, probs)
        update.events = self._events(self.segmenter.push(probs))
        return update

    def _events(self, events: list[tuple[str, int, float, float]]) -> list[SpeakerEvent]:
        """Named events, in time order (closes before opens at the same time)."""
        out = []
        for kind, slot, s, e in sorted(events, key=lambda t: (t[3], t[0] == "opened", t[1])):
            name = self.names.setdefault(slot, speaker_label(len(self.names)))
            if kind == "closed":
                self.turns.append((slot, s, e))
                out.append(SpeakerEvent(TURN_CLOSED, name, e, s))
            else:
                out.append(SpeakerEvent(TURN_OPENED, name, s, s))
        return out
