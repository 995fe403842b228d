"""Nemotron 3 Diarization on a live stream: audio in as it arrives, speaker-turn events out.

The life of a stream (``DiarizationStream``):

1. ``feed(samples)`` appends audio. Log-mel frames come from ``oasr.audio.streaming.FeatureStream``
   (each frame once its samples have arrived, equal to the whole-recording pass).
2. A step runs as transformers' processor cuts a session in the stream's mode ``(C, R)``: step
   ``i`` scores encoder frames ``[i C, (i + 1) C)`` with ``R`` frames of look-ahead, and runs once
   the audio holds the samples the processor asks for that chunk (``num_samples_first_audio_chunk``,
   then ``audio_chunk_start(cursor) + num_samples_per_audio_chunk``). The model's
   ``stream_step`` scores the chunk after the speaker cache and FIFO (``CacheState``, the
   streaming FIFO sizes) and returns the new state.
3. Each step's probabilities (one row per 10 ms) update the slots' activity: a slot going above
   the threshold opens a turn (``turn_opened``), going below closes it (``turn_closed``, with the
   turn's start and end), as the offline turns are made.
4. ``finish()`` scores the rest (the last chunk, no look-ahead) and closes the open turns at the
   end of the audio.

The concatenated steps equal transformers' streamed logits chunk by chunk; the events rebuild
exactly the turns ``extract_speaker_dict`` makes of them. Each stream runs its own steps (batch 1):
streams at different points hold caches of different sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oasr.audio.streaming import FeatureStream
from oasr.diarization.nemotron3.model import CacheState
from oasr.diarization.types import TURN_CLOSED, TURN_OPENED, SpeakerEvent, speaker_label


@dataclass(frozen=True)
class Step:
    """One scored chunk: its first 10 ms frame and its probabilities (frames, slots)."""

    first_frame: int
    probabilities: np.ndarray


class DiarizationStream:
    """One live stream of a ``Nemotron3Diarizer``.

    Args:
        diarizer: the loaded model.
        mode: one of the checkpoint's streaming modes (default: its ``streaming_mode``).

    Raises:
        ValueError: an unknown mode.
    """

    def __init__(self, diarizer, mode: str | None = None) -> None:
        ckpt = diarizer.checkpoint
        mode = ckpt.streaming_mode if mode is None else mode
        if mode not in ckpt.streaming_modes:
            raise ValueError(f"unknown streaming mode {mode!r}; this checkpoint has {sorted(ckpt.streaming_modes)}")
        self.mode = mode
        self.diarizer = diarizer
        fe = ckpt.features
        k = ckpt.model.subsampling_factor
        chunk, self.lookahead = ckpt.streaming_modes[mode]
        self.step_frames = chunk * k  # mel frames each step scores
        self.chunk_frames = (chunk + self.lookahead) * k  # mel frames each full step reads
        self._hop, self._win, self._n_fft = fe.hop_length, fe.win_length, fe.n_fft
        self.frame_s = diarizer.frame_s
        self.threshold = diarizer.threshold
        self._features = FeatureStream(diarizer.frontend)
        self._pending = torch.zeros(0, fe.feature_size, dtype=diarizer.frontend.dtype)  # frames from the cursor on
        self._cursor = 0  # first mel frame not yet scored
        self._received = 0
        self._state: CacheState | None = None
        self._active = np.zeros(ckpt.model.num_speakers, dtype=bool)
        self._opened = np.zeros(ckpt.model.num_speakers, dtype=np.int64)  # frame each open turn started
        self._names: dict[int, str] = {}
        self.finished = False

    @property
    def latency_s(self) -> float:
        """Audio a step reads, its chunk and look-ahead (transformers' ``streaming_latency_ms``)."""
        return self.chunk_frames * self.frame_s

    @property
    def state(self) -> CacheState | None:
        """The speaker cache and FIFO after the last step (None before the first)."""
        return self._state

    def _samples_for_next_step(self) -> int:
        """Samples the processor asks for before the step at the cursor runs as a full chunk."""
        if self._cursor == 0:
            return (self.chunk_frames - 1) * self._hop + self._win // 2
        return self._cursor * self._hop - self._n_fft // 2 + self.chunk_frames * self._hop + self._win

    def push(self, samples: np.ndarray) -> list[Step]:
        """Append audio (float32 mono at 16 kHz) and run the steps it completes.

        Raises:
            RuntimeError: after ``finish``.
        """
        if self.finished:
            raise RuntimeError("this diarization stream is finished")
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if samples.size and not np.isfinite(samples).all():
            raise ValueError("the audio holds NaN or infinite samples")
        self._received += samples.size
        self._pending = torch.cat((self._pending, self._features.push(samples)))
        return self._full_steps()

    def finish(self) -> list[Step]:
        """Score the rest of the audio (the last chunk, without look-ahead)."""
        if self.finished:
            return []
        self._pending = torch.cat((self._pending, self._features.finish()))
        steps = self._full_steps()
        self.finished = True
        if self._pending.shape[0]:
            steps.append(self._step(self._pending, lookahead=0))
            self._pending = self._pending[:0]
        return steps

    def _full_steps(self) -> list[Step]:
        steps = []
        while self._received >= self._samples_for_next_step() and self._pending.shape[0] >= self.chunk_frames:
            steps.append(self._step(self._pending[: self.chunk_frames], lookahead=self.lookahead))
            self._pending = self._pending[self.step_frames :]
        return steps

    @torch.inference_mode()
    def _step(self, feats: torch.Tensor, lookahead: int) -> Step:
        model = self.diarizer.model
        x = feats.to(device=self.diarizer.device, dtype=self.diarizer.dtype)[None]
        logits, self._state = model.stream_step(x, self._state, lookahead)
        step = Step(self._cursor, logits[0].sigmoid().double().cpu().numpy())
        self._cursor += step.probabilities.shape[0]
        return step

    def events(self, steps: list[Step]) -> list[SpeakerEvent]:
        """The turn events of consecutive steps (call once per step, in order)."""
        out: list[SpeakerEvent] = []
        for step in steps:
            active = step.probabilities > self.threshold
            for i, row in enumerate(active):
                frame = step.first_frame + i
                changed = np.flatnonzero(row != self._active)
                for slot in changed:  # closes, then opens, each by slot
                    if self._active[slot]:
                        out.append(self._close(int(slot), frame))
                for slot in changed:
                    if not self._active[slot]:
                        out.append(self._open(int(slot), frame))
                self._active = row.copy()
        return out

    def _open(self, slot: int, frame: int) -> SpeakerEvent:
        self._opened[slot] = frame
        name = self._names.setdefault(slot, speaker_label(len(self._names)))
        t = round(frame * self.frame_s, 2)
        return SpeakerEvent(TURN_OPENED, name, t, t)

    def _close(self, slot: int, frame: int) -> SpeakerEvent:
        start = round(int(self._opened[slot]) * self.frame_s, 2)
        return SpeakerEvent(TURN_CLOSED, self._names[slot], round(frame * self.frame_s, 2), start)

    def feed(self, samples: np.ndarray) -> list[SpeakerEvent]:
        """Append audio and return the turns it opens and closes."""
        return self.events(self.push(samples))

    def close(self) -> list[SpeakerEvent]:
        """End the stream: the events of its last chunk, then every open turn closed at the end."""
        out = self.events(self.finish())
        end = self._cursor
        for slot in np.flatnonzero(self._active):
            out.append(self._close(int(slot), end))
        self._active[:] = False
        return out
