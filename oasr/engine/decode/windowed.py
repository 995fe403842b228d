"""What the frame-synchronous and one-pass strategies (CTC, transducer, Paraformer) share: the
request table and the windowed life of a request.

1. ``prepare`` (off the engine loop): decode the audio at the front end's rate (refused past
   ``EngineConfig.max_audio_s``), cut it into windows of at most ``EngineConfig.ctc_window_s``
   (``plan_windows``: plain cuts at the quietest 100 ms of the last third of each window, no
   overlap, so attention memory is bounded by the window and a cut almost always falls in a
   pause) and featurise each with the checkpoint's front end.
2. ``step``: a subclass's ``_run_batch`` decodes a batch of windows of any requests
   (``_take_batch``: the oldest waiting window plus those nearest it in length, from a bounded
   look-ahead, so padding stays small and nobody starves) and stores each window's segments.
3. ``_flush``: segments go out in time order as soon as every earlier window of the request is
   done, then ``finished`` with the ``RequestOutput``.

The request table (ids, duplicates, prepare-if-missing, abort, fail, retire, counters) is
``oasr.engine.decode.requests.RequestTable``.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from oasr.audio.frontends import build_frontend
from oasr.audio.io import load_audio
from oasr.engine.config import EngineConfig, TranscribeOptions, whole_input
from oasr.engine.decode.base import Request, StepEvent
from oasr.engine.decode.requests import DecodeCounters, RequestTable, TableEntry
from oasr.engine.outputs import RequestOutput, Segment
from oasr.models.loaders import LoadedModel

CUT_SEARCH_FRACTION = 1 / 3  # windows are cut in their last third ...
CUT_SPAN_S = 0.1  # ... at the quietest stretch of this length
LOOKAHEAD_BATCHES = 8  # waiting windows considered when filling a batch, in batches


def plan_windows(audio: np.ndarray, sampling_rate: int, window_s: float) -> list[tuple[int, int]]:
    """Cut points of ``audio`` into windows of at most ``window_s`` seconds.

    Each window longer than the limit is cut at the centre of the quietest
    ``CUT_SPAN_S`` (lowest mean square over 10 ms hops) in its last third.

    Returns:
        (start, end) sample indices covering the audio, in order.
    """
    n = len(audio)
    max_n = max(1, int(window_s * sampling_rate))
    hop = max(1, sampling_rate // 100)
    span = max(1, round(CUT_SPAN_S * sampling_rate / hop))
    windows = []
    start = 0
    while n - start > max_n:
        lo = start + int(max_n * (1 - CUT_SEARCH_FRACTION))
        k = (start + max_n - lo) // hop
        if k >= span:
            power = np.square(audio[lo : lo + k * hop], dtype=np.float64).reshape(k, hop).mean(axis=1)
            smooth = np.convolve(power, np.ones(span), mode="valid")
            cut = lo + (int(np.argmin(smooth)) * hop) + (span * hop) // 2
        else:
            cut = start + max_n
        windows.append((start, cut))
        start = cut
    windows.append((start, n))
    return windows


@dataclass
class Window:
    """One window of a request: where it is and its features.

    Shapes:
        feats: (T, F) front-end features.
    """

    start_s: float
    end_s: float
    feats: torch.Tensor


class WindowedFeatures:
    """What ``prepare`` made of a request: its windows' features."""

    def __init__(self, windows: list[Window], duration: float) -> None:
        self.windows = windows
        self.duration = duration

    def close(self) -> None:
        self.windows = []


@dataclass
class WindowedRequest(TableEntry):
    """A request in the table: its windows, each window's segments once decoded (dicts; ids
    are given when emitted), and what has been sent on."""

    windows: list[Window]
    results: list[list[dict] | None]
    emitted: int = 0
    segments: list[Segment] = field(default_factory=list)


@dataclass
class WindowedCounters(DecodeCounters):
    """``DecodeCounters`` plus the windows encoded and the encoder batches run."""

    windows_encoded: int = 0
    batches: int = 0


class WindowedStrategy(RequestTable[WindowedRequest]):
    """Windowed batching of ``_run_batch``-style strategies over the shared request table (see the module)."""

    features_on_device: ClassVar[bool] = True
    """Compute the front end where the model runs (on a GPU the waveform goes up once)."""
    counters_class: ClassVar[type[WindowedCounters]] = WindowedCounters

    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        super().__init__(loaded, config)
        if loaded.tokenizer is None:
            raise ValueError(f"the {self.decode_type} strategy needs the checkpoint's tokenizer")
        if loaded.feature_spec is None:
            raise ValueError(f"the {self.decode_type} strategy needs the checkpoint's FeatureSpec")
        self.tokenizer = loaded.tokenizer
        self.frontend = build_frontend(loaded.feature_spec)
        self.sampling_rate = int(self.frontend.sampling_rate)
        self.device = self.model.device
        self.dtype = self.model.compute_dtype
        self.pending: deque[tuple[Any, int]] = deque()
        self._touched: dict[str, Any] = {}
        self._last_batch = 0

    # -- admission ------------------------------------------------------------------------

    def validate(self, options: TranscribeOptions) -> TranscribeOptions:
        """Beyond the options a windowed strategy does not take (refused by its ``options_class``):
        it transcribes whole inputs, and only transcribes."""
        options = super().validate(options)
        what = f"{type(self.model).__name__} decoded by {str(self.decode_type)!r}"
        if options.task != "transcribe":
            raise ValueError(f"task={options.task!r}: {what} can only transcribe")
        if not whole_input(options.clip_timestamps):
            raise ValueError(f"clip_timestamps={options.clip_timestamps!r}: {what} transcribes whole inputs")
        return options

    # -- the request table --------------------------------------------------------------

    def prepare(self, request: Request) -> Request:
        if request.features is None:
            audio = load_audio(request.source, self.sampling_rate, max_duration_s=self.config.max_audio_s)
            sr = self.sampling_rate
            wave = torch.from_numpy(audio)
            if self.features_on_device:
                wave = wave.to(self.device)
            windows = [
                Window(a / sr, b / sr, self.frontend(wave[a:b]))
                for a, b in plan_windows(audio, sr, self.config.ctc_window_s)
            ]
            request.duration = len(audio) / sr
            request.features = WindowedFeatures(windows, request.duration)
        return request

    def _new_entry(self, request: Request) -> WindowedRequest:
        """The table entry of an admitted request (a subclass adds its own per-request state)."""
        windows = list(request.features.windows)
        return WindowedRequest(request, request.options, windows, [None] * len(windows))

    def _enqueue(self, req: WindowedRequest) -> None:
        for i, w in enumerate(req.windows):
            if w.feats.shape[0] == 0:
                req.results[i] = []
            else:
                self.pending.append((req, i))
        self._touched[req.rid] = req

    def _release(self, req: WindowedRequest) -> None:
        req.windows = []
        self._touched.pop(req.rid, None)
        if any(r is req for r, _ in self.pending):
            self.pending = deque(item for item in self.pending if item[0] is not req)
        features = req.request.features
        if features is not None:
            features.close()

    def _running_rows(self) -> int:
        return self._last_batch if self.requests else 0

    def _waiting_tasks(self) -> int:
        return len(self.pending)

    # -- the step ------------------------------------------------------------------------

    def step(self) -> list[StepEvent]:
        events: list[StepEvent] = []
        batch = self._take_batch(self.config.max_batch_size)
        if batch:
            self.counters.windows_encoded += len(batch)
            self.counters.batches += 1
            with torch.inference_mode():
                self._run_batch(batch, events)
        self._flush(events)
        return events

    def _run_batch(self, batch: list[tuple[Any, int]], events: list[StepEvent]) -> None:
        """Decode ``batch`` (request, window index) pairs: set each live request's
        ``results[index]`` and mark it touched; a failure fails its requests alone."""
        raise NotImplementedError

    def _take_batch(self, n: int) -> list[tuple[Any, int]]:
        """The oldest waiting window and the ``n - 1`` waiting windows nearest it in length."""
        if len(self.pending) <= n:
            batch = list(self.pending)
            self.pending.clear()
        else:
            anchor = self.pending[0]
            length = anchor[0].windows[anchor[1]].feats.shape[0]
            ahead = list(itertools.islice(self.pending, 1, 1 + LOOKAHEAD_BATCHES * n))
            dist = [abs(r.windows[i].feats.shape[0] - length) for r, i in ahead]
            chosen = sorted(sorted(range(len(ahead)), key=lambda j: (dist[j], j))[: n - 1])
            batch = [anchor] + [ahead[j] for j in chosen]
            taken = {(id(r), i) for r, i in batch}
            self.pending = deque(item for item in self.pending if (id(item[0]), item[1]) not in taken)
        self._last_batch = len(batch)
        return batch

    # -- results ------------------------------------------------------------------------

    def _segment_text(self, req: WindowedRequest, seg: dict) -> dict:
        """A segment as it joins the request's earlier ones (a subclass may add a separator)."""
        return seg

    def _request_text(self, req: WindowedRequest) -> str:
        """The whole transcript of a finished request: its segments' texts joined."""
        return "".join(s.text for s in req.segments).strip()

    def _language(self, req: WindowedRequest) -> str | None:
        """The language a finished request reports."""
        return req.opts.language

    def _flush(self, events: list[StepEvent]) -> None:
        """Emit the segments of windows done in order, and finish complete requests."""
        touched, self._touched = self._touched, {}
        for req in touched.values():
            if req.done:
                continue
            while req.emitted < len(req.results) and req.results[req.emitted] is not None:
                for seg in req.results[req.emitted]:  # type: ignore[union-attr]
                    segment = Segment(id=len(req.segments) + 1, **self._segment_text(req, seg))
                    req.segments.append(segment)
                    events.append(StepEvent(req.rid, "segment", segment=segment))
                req.emitted += 1
            if req.emitted == len(req.results) and self._remove(req):
                language = self._language(req)
                output = RequestOutput(
                    request_id=req.rid,
                    text=self._request_text(req),
                    segments=req.segments,
                    language=language,
                    language_probability=1.0 if language is not None else None,
                    duration=req.request.duration,
                    task=req.opts.task,
                )
                self._complete(req, output, events)


__all__ = ["Window", "WindowedCounters", "WindowedFeatures", "WindowedRequest", "WindowedStrategy", "plan_windows"]
