"""Speaker probabilities -> speech segments, as NeMo's ``diarize()`` turns Sortformer's output into
its ``"start end speaker_k"`` lines (``ts_vad_post_processing``, ``generate_diarization_output_lines``).

Per speaker: each 80 ms frame's probability repeated over its eight 10 ms frames; hysteresis
binarisation (speech starts where the probability rises above ``onset``, ends where it falls
below ``offset``; segments widened by ``pad_onset`` / ``pad_offset`` and merged where they then
overlap); short speech removed and short gaps filled (``min_duration_on`` / ``min_duration_off``,
speech first); times rounded to 10 ms. As NeMo's binarisation does, a segment still open at the
end of the recording ends at the start of the last 10 ms frame.

The parameters are NeMo's ``PostProcessingParams`` (defaults: onset = offset = 0.5, no padding,
no minimum durations: what ``diarize()`` applies without a ``postprocessing_yaml``), or a NeMo
post-processing YAML's ``parameters`` section.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from os import PathLike
from typing import Any

import numpy as np

FRAME_S = 0.01  # NeMo's binarisation steps in 10 ms frames


@dataclass(frozen=True)
class PostProcessing:
    """NeMo's ``PostProcessingParams`` (seconds; thresholds on probabilities)."""

    onset: float = 0.5
    offset: float = 0.5
    pad_onset: float = 0.0
    pad_offset: float = 0.0
    min_duration_on: float = 0.0
    min_duration_off: float = 0.0

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any], where: str = "postprocessing") -> PostProcessing:
        """The parameters of ``params`` (NeMo's names), defaults for the rest.

        Raises:
            ValueError: an unknown key or a value that is not a finite number.
        """
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(params) - set(names))
        if unknown:
            raise ValueError(f"{where}: unknown post-processing parameter(s) {unknown}; known: {names}")
        values = {}
        for key, value in params.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise ValueError(f"{where}.{key}={value!r} is not a finite number")
            values[key] = float(value)
        return cls(**values)

    @classmethod
    def from_yaml(cls, path: str | PathLike) -> PostProcessing:
        """A NeMo post-processing YAML (``parameters: {onset: ..., ...}``), as ``diarize(postprocessing_yaml=)``
        reads it (NeMo keeps the keys it knows and ignores the others, as here)."""
        import yaml

        with open(path) as f:
            doc = yaml.safe_load(f)
        params = doc.get("parameters") if isinstance(doc, dict) else None
        if not isinstance(params, dict):
            raise ValueError(f"{path}: a NeMo post-processing YAML has a 'parameters' mapping")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls.from_mapping({k: v for k, v in params.items() if k in names}, str(path))


class _Binarizer:
    """NeMo's ``binarization`` over one speaker's probabilities, fed in pieces: each 80 ms frame
    stands for ``unit`` 10 ms frames, so transitions fall on the first 10 ms frame of an 80 ms one.
    ``push`` returns the segments that closed (padded, not yet merged)."""

    def __init__(self, unit: int, params: PostProcessing) -> None:
        self.unit, self.p = unit, params
        self.speech, self.start, self.frames = False, 0.0, 0

    def push(self, probs: np.ndarray) -> list[tuple[float, float]]:
        p, closed = self.p, []
        for value in probs:
            i = self.frames * self.unit
            self.frames += 1
            if self.speech and value < p.offset:
                end = i * FRAME_S + p.pad_offset
                if end > max(0.0, self.start - p.pad_onset):
                    closed.append((max(0.0, self.start - p.pad_onset), end))
                self.start, self.speech = i * FRAME_S, False
            elif not self.speech and value > p.onset:
                self.start, self.speech = i * FRAME_S, True
        return closed

    def next_start(self) -> float:
        """The earliest padded start a segment closed later can have."""
        t = self.start if self.speech else self.frames * self.unit * FRAME_S
        return max(0.0, t - self.p.pad_onset)

    def finish(self) -> list[tuple[float, float]]:
        """The segment still open at the end, ending at the start of the last 10 ms frame."""
        if not self.speech:
            return []
        self.speech = False
        last = max(self.frames * self.unit - 1, 0)
        return [(max(0.0, self.start - self.p.pad_onset), last * FRAME_S + self.p.pad_offset)]


def _merge_overlaps(segments: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Join segments that overlap or touch (NeMo's ``merge_overlap_segment``)."""
    out: list[list[float]] = []
    for s, e in sorted(segments):
        if out and out[-1][1] >= s:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _filter(segments: list[tuple[float, float]], p: PostProcessing) -> list[tuple[float, float]]:
    """NeMo's ``filtering`` with ``filter_speech_first``: short speech out, then short gaps in."""
    if p.min_duration_on > 0:
        segments = [(s, e) for s, e in segments if e - s >= p.min_duration_on]
    if p.min_duration_off > 0 and len(segments) > 1:
        gaps = [(a[1], b[0]) for a, b in zip(segments, segments[1:]) if b[0] - a[1] < p.min_duration_off]
        segments = _merge_overlaps(segments + gaps)
    return segments


def _rounded(segments: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out = []
    for s, e in segments:
        # NeMo holds each segment in float32 before rounding it to 10 ms.
        start, end = round(float(np.float32(s)), 2), round(float(np.float32(e)), 2)
        if end > start:  # NeMo's interval merge drops empty segments
            out.append((start, end))
    return out


def speech_segments(probs: np.ndarray, unit: int, params: PostProcessing) -> list[tuple[float, float]]:
    """One speaker's segments (seconds, to 10 ms) from its per-frame probabilities.

    Args:
        probs: (T,) probabilities of frames of ``unit`` x 10 ms (8 for Sortformer).
    """
    binarizer = _Binarizer(unit, params)
    raw = binarizer.push(np.asarray(probs, dtype=np.float64)) + binarizer.finish()
    return _rounded(_filter(_merge_overlaps(raw), params))


class LiveSegmenter:
    """``speech_segments`` of every speaker over probabilities that arrive in pieces, as events.

    A turn is announced open (``("opened", slot, start, start)``) as soon as it is certain to be one:
    its speech has lasted ``min_duration_on`` (at once with NeMo's default of 0); it is closed
    (``("closed", slot, start, end)``) once nothing later can change it: the next segment can no
    longer overlap it after padding nor come within ``min_duration_off`` of it. The closed turns
    of all calls together are those ``speech_segments`` gives the whole sequence, and every
    closed turn was opened first, at its start.
    """

    def __init__(self, num_speakers: int, unit: int, params: PostProcessing) -> None:
        self.params = params
        self.binarizers = [_Binarizer(unit, params) for _ in range(num_speakers)]
        self.pending: list[list[tuple[float, float]]] = [[] for _ in range(num_speakers)]
        self.opened: list[float | None] = [None] * num_speakers

    def push(self, probs: np.ndarray) -> list[tuple[str, int, float, float]]:
        """The events of the next frames (``probs``: (n, S))."""
        probs = np.asarray(probs, dtype=np.float64)
        out = []
        for spk, binarizer in enumerate(self.binarizers):
            self.pending[spk] += binarizer.push(probs[:, spk])
            out += self._events(spk, binarizer.next_start())
        return out

    def finish(self) -> list[tuple[str, int, float, float]]:
        """The events of the end: every turn closed."""
        out = []
        for spk, binarizer in enumerate(self.binarizers):
            self.pending[spk] += binarizer.finish()
            out += self._events(spk, float("inf"))
        return out

    def _events(self, spk: int, boundary: float) -> list[tuple[str, int, float, float]]:
        """The events of one slot; ``boundary``: the earliest padded start the binarizer can
        still give a segment (infinite at the end)."""
        p, out = self.params, []
        pending = self.pending[spk]
        done = []
        groups = _merge_overlaps(pending)
        for s, e in _filter(groups, p):
            # A segment still to come, or a group too short now that a segment still to come can
            # join (its end reaches the boundary), must stay clear of this turn for it to be final.
            nearest = min([boundary, *(gs for gs, ge in groups if gs > e and ge >= boundary)])
            if not (nearest > e and nearest - e >= p.min_duration_off):
                break
            done.append((s, e))
        if done:
            last = done[-1][1]
            self.pending[spk] = pending = [(s, e) for s, e in pending if s > last]
        for s, e in _rounded(done):
            if self.opened[spk] is None:
                out.append(("opened", spk, s, s))
            out.append(("closed", spk, s, e))
            self.opened[spk] = None
        if self.opened[spk] is None and boundary != float("inf"):
            binarizer = self.binarizers[spk]
            now = list(pending)
            if binarizer.speech:  # the segment under way, as short as it can still end (the stream ending now)
                now.append((boundary, (binarizer.frames * binarizer.unit - 1) * FRAME_S + p.pad_offset))
            for s, e in _merge_overlaps(now):
                if e - s >= p.min_duration_on and e > s:
                    # Sure to be a turn; its start is sure once no earlier short segment can join it.
                    if all(ge < boundary for gs, ge in _merge_overlaps(pending) if gs < s):
                        start = round(float(np.float32(s)), 2)
                        self.opened[spk] = start
                        out.append(("opened", spk, start, start))
                    break
        return out
