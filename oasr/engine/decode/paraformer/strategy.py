"""The ``paraformer`` decode strategy: FunASR Paraformer / BiCifParaformer, non-autoregressive.

Life of a request:

1. ``prepare`` (off the engine loop): decode the audio at the front end's rate, cut it into
   windows of at most ``EngineConfig.ctc_window_s`` at the quietest 100 ms of each
   window's last third (``plan_windows``, as the CTC strategy), and featurise each window
   (LFR fbank; CMVN is inside the encoder).
2. ``step``: up to ``max_batch_size`` windows, of any requests (the oldest and those nearest
   its length), go through batched passes of ``encoder_batch_size`` windows (all of them on a
   GPU, one at a time on a CPU): ``encode_offline`` -> CIF (``model.cif``) -> the SANM
   decoder over all CIF tokens (``model.decode_cif``); each position takes its best token
   (greedy; an external-LM beam is out of scope). Blank, ``<s>`` and ``</s>`` are dropped as FunASR drops them.
3. Times: each token's start / end from the CIF as funasr 1.4.16 computes them
   (``timestamps.token_times``): from the V2 fires, or from BiCif's upsampled timestamp
   head. Words join the pieces as FunASR does (``text.group_pieces``: CJK characters
   without spaces, ``@@`` pieces glued); segments split at gaps longer than
   ``SEGMENT_GAP_S``; ``word_timestamps`` attaches the words with their times. A
   ``seg_dict`` only segments training text and plays no part here.

Options: the model only transcribes, with no prompt, sampling, language or hotwords:
those are refused with a ValueError naming the option. ``beam_size`` has no effect.
"""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from oasr.audio.frontends import build_frontend, pad_features
from oasr.audio.io import load_audio
from oasr.engine.config import EngineConfig, TranscribeOptions
from oasr.engine.decode.base import DecodeStrategy, Request, StepEvent
from oasr.engine.decode.ctc.strategy import plan_windows
from oasr.engine.decode.paraformer.text import group_pieces, is_cjk, join_words
from oasr.engine.decode.paraformer.timestamps import sequential_cif_peaks, token_times
from oasr.engine.outputs import RequestOutput, Segment, Word
from oasr.models.base import DecodeType
from oasr.models.loaders import LoadedModel

SEGMENT_GAP_S = 1.5  # a longer silence between two tokens starts a new segment
BICIF_UPSAMPLE_RATE = 3  # funasr times BiCif's upsampled head at a fixed 3x (20 ms) rate
_SAMPLING_FREE = (TranscribeOptions().temperatures, (0.0,))


@dataclass
class CifToken:
    """One decoded token: id, piece, probability and its CIF time (seconds, window-absolute)."""

    id: int
    piece: str
    prob: float
    start: float
    end: float


@dataclass
class ParaformerWindow:
    """One window of a request. Shapes: feats (T, lfr_m * n_mels) LFR features before CMVN."""

    start_s: float
    end_s: float
    feats: torch.Tensor


@dataclass
class _Req:
    request: Request
    opts: TranscribeOptions
    windows: list[ParaformerWindow]
    results: list[list[dict] | None]
    emitted: int = 0
    segments: list[Segment] = field(default_factory=list)
    done: bool = False

    @property
    def rid(self) -> str:
        return self.request.request_id


class ParaformerFeatures:
    """What ``prepare`` made of a request: its windows' features."""

    def __init__(self, windows: list[ParaformerWindow], duration: float) -> None:
        self.windows = windows
        self.duration = duration

    def close(self) -> None:
        self.windows = []


def greedy_tokens(log_probs: torch.Tensor, n: int, skip: frozenset[int]) -> tuple[list[int], list[float], list[int]]:
    """Best token at each of the first ``n`` CIF positions, without ``skip`` ids.

    Shapes:
        log_probs: (N, V) -> ids, probabilities, their positions
    """
    top, ids = log_probs[:n].max(dim=-1)
    keep = [(i, int(t), float(p)) for i, (t, p) in enumerate(zip(ids.tolist(), top.exp().tolist())) if t not in skip]
    return [t for _, t, _ in keep], [p for _, _, p in keep], [i for i, _, _ in keep]


def cif_token_spans(
    model, hidden: torch.Tensor, lens: torch.Tensor, cif, row: int, n_tokens: int
) -> list[tuple[int, int]]:
    """Token times (ms within the window) of one row as funasr computes them: V2 from the
    CIF fires and tail alphas over ``len + 1`` frames; BiCif from the upsampled head."""
    n = int(lens[row])
    if model.config.predictor.bicif:
        one = slice(row, row + 1)
        us_alphas = model.predictor.upsampled_alphas(hidden[one, :n], lens[one], cif.token_lens[one])[0]
        us_peaks = sequential_cif_peaks(us_alphas)
        return token_times(us_alphas, us_peaks, n_tokens, upsample_rate=BICIF_UPSAMPLE_RATE)
    t = min(n + (1 if model.config.predictor.tail_threshold > 0.0 else 0), cif.fires.shape[1])
    return token_times(cif.fires[row, :t], cif.alphas[row, :t], n_tokens, upsample_rate=1)


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


class ParaformerDecodeStrategy(DecodeStrategy):
    """Batched encoder + CIF + parallel decoder over the windows of all admitted requests."""

    decode_type = DecodeType.PARAFORMER

    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        super().__init__(loaded, config)
        if loaded.tokenizer is None:
            raise ValueError("the paraformer strategy needs the checkpoint's token list")
        if loaded.feature_spec is None:
            raise ValueError("the paraformer strategy needs the checkpoint's FeatureSpec")
        self.tokenizer = loaded.tokenizer
        self.frontend = build_frontend(loaded.feature_spec)
        self.sampling_rate = int(self.frontend.sampling_rate)
        cfg = self.model.config
        self.skip = frozenset({cfg.blank_id, cfg.sos, cfg.eos})
        self.device = self.model.device
        self.dtype = self.model.compute_dtype
        self.requests: dict[str, _Req] = {}
        self.pending: deque[tuple[_Req, int]] = deque()
        self._touched: dict[str, _Req] = {}
        self._last_batch = 0
        self.counters = {"windows_encoded": 0, "batches": 0, "requests_finished": 0}
        # Windows per model pass. On a CPU one window's GEMMs already fill the cores, padding a
        # batch to its longest window is pure waste, and int8 layers keep their integer kernel
        # only for small row counts (1 thread, paraformer-large shape, 16 clips of 5-20 s:
        # float32 26.3 s one at a time against 29.4 s in length-grouped batches of 8).
        self.encoder_batch = config.encoder_batch_size or (config.max_batch_size if self.device.type == "cuda" else 1)

    # -- admission ---------------------------------------------------------------------

    @property
    def word_timing_modes(self) -> tuple[str, ...]:
        return ("cif",)

    def validate(self, options: TranscribeOptions) -> TranscribeOptions:
        options = super().validate(options)
        what = f"{type(self.model).__name__} decoded by 'paraformer'"
        if options.task != "transcribe":
            raise ValueError(f"task={options.task!r}: {what} can only transcribe")
        if options.initial_prompt is not None:
            raise ValueError(f"initial_prompt: {what} takes no prompt")
        if options.prefix is not None:
            raise ValueError(f"prefix: {what} cannot be forced to start with a text")
        if options.temperatures not in _SAMPLING_FREE:
            raise ValueError(f"temperature={options.temperature!r}: {what} does not sample; use 0")
        if options.multilingual:
            raise ValueError(f"multilingual=True: {what} does not detect languages")
        if options.language is not None:
            raise ValueError(f"language={options.language!r}: {what} takes no language (leave it unset)")
        for name, default, why in (
            ("hotwords", None, "has no hotword biasing"),
            ("top_k", 0, "does not sample"),
            ("top_p", 1.0, "does not sample"),
            ("context", None, "takes no prompt"),
            ("ctc_weight", None, "has no CTC rescoring"),
            ("reverse_weight", None, "has no CTC rescoring"),
        ):
            value = getattr(options, name, default)
            if value is not None and value != default and value != "":
                raise ValueError(f"{name}={value!r}: {what} {why}")
        clips = options.clip_timestamps
        if isinstance(clips, str):
            clips = [float(x) for x in clips.split(",")] if clips.strip() else []
        if list(clips) not in ([], [0.0]):
            raise ValueError(f"clip_timestamps={options.clip_timestamps!r}: {what} transcribes whole inputs")
        return options

    def prepare(self, request: Request) -> Request:
        if request.features is None:
            audio = load_audio(request.source, self.sampling_rate, max_duration_s=self.config.max_audio_s)
            sr = self.sampling_rate
            wave = torch.from_numpy(audio)
            windows = [
                ParaformerWindow(a / sr, b / sr, self.frontend(wave[a:b]))
                for a, b in plan_windows(audio, sr, self.config.ctc_window_s)
            ]
            request.duration = len(audio) / sr
            request.features = ParaformerFeatures(windows, request.duration)
        return request

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        if request.features is None:
            self.prepare(request)
        windows = list(request.features.windows)
        req = _Req(request, request.options, windows, [None] * len(windows))
        self.requests[req.rid] = req
        for i, w in enumerate(windows):
            if w.feats.shape[0] == 0:
                req.results[i] = []
            else:
                self.pending.append((req, i))
        self._touched[req.rid] = req

    def abort(self, request_id: str) -> bool:
        req = self.requests.pop(request_id, None)
        if req is None:
            return False
        self._retire(req)
        return True

    def _retire(self, req: _Req) -> None:
        req.done = True
        req.windows = []
        self._touched.pop(req.rid, None)
        if any(r is req for r, _ in self.pending):
            self.pending = deque(item for item in self.pending if item[0] is not req)
        if req.request.features is not None:
            req.request.features.close()

    def num_unfinished(self) -> int:
        return len(self.requests)

    def stats(self) -> dict[str, float]:
        return {
            "running_rows": self._last_batch if self.requests else 0,
            "waiting_tasks": len(self.pending),
            **self.counters,
        }

    # -- the step ------------------------------------------------------------------------

    def step(self) -> list[StepEvent]:
        events: list[StepEvent] = []
        batch = self._next_batch(self.config.max_batch_size)
        self._last_batch = len(batch)
        if batch:
            try:
                feats = [r.windows[i].feats for r, i in batch]
                rows = []
                with torch.inference_mode():
                    for k in range(0, len(feats), self.encoder_batch):
                        part = feats[k : k + self.encoder_batch]
                        rows += decode_batch(self.model, part, self.device, self.dtype)
            except Exception as e:  # a failed batch fails its requests, not the engine
                for req, _ in batch:
                    self._fail(req, e, events)
                rows = []
            self.counters["windows_encoded"] += len(batch)
            self.counters["batches"] += 1
            for (req, index), row in zip(batch, rows):
                if req.done:
                    continue
                win = req.windows[index]
                tokens = [
                    CifToken(t, self.tokenizer.id_to_token(t) or "", p, win.start_s + s / 1000, win.start_s + e / 1000)
                    for t, p, (s, e) in zip(*row)
                ]
                req.results[index] = self._window_segments(req, win, tokens)
                self._touched[req.rid] = req
        self._flush(events)
        return events

    def _next_batch(self, n: int) -> list[tuple[_Req, int]]:
        """The oldest pending window and the ``n - 1`` others nearest to it in length: every row
        is padded to the longest, so a batch of like lengths wastes the least (on a CPU a
        5-s window beside a 20-s one costs as much as a 20-s one)."""
        if len(self.pending) <= n:
            batch = list(self.pending)
            self.pending.clear()
            return batch
        items = list(self.pending)
        sizes = [r.windows[i].feats.shape[0] for r, i in items]
        nearest = sorted(range(1, len(items)), key=lambda k: (abs(sizes[k] - sizes[0]), k))[: n - 1]
        chosen = {0, *nearest}
        self.pending = deque(item for k, item in enumerate(items) if k not in chosen)
        return [items[k] for k in sorted(chosen)]

    def _fail(self, req: _Req, exc: BaseException, events: list[StepEvent]) -> None:
        if self.requests.pop(req.rid, None) is not None:
            self._retire(req)
            events.append(StepEvent(req.rid, "error", error=exc))

    # -- results ------------------------------------------------------------------------

    def _window_segments(self, req: _Req, win: ParaformerWindow, tokens: list[CifToken]) -> list[dict]:
        words = group_pieces([t.piece for t in tokens])
        texts = join_words(words)
        seek = round(win.start_s / 0.01)
        groups: list[list[int]] = []
        for k, w in enumerate(words):
            if groups and tokens[w.start].start - tokens[words[k - 1].end - 1].end <= SEGMENT_GAP_S:
                groups[-1].append(k)
            else:
                groups.append([k])
        segments = []
        for group in groups:
            timed = [
                Word(
                    start=round(tokens[words[k].start].start, 3),
                    end=round(tokens[words[k].end - 1].end, 3),
                    word=texts[k].lstrip(" ") if k == group[0] else texts[k],
                    probability=float(np.mean([t.prob for t in tokens[words[k].start : words[k].end]])),
                )
                for k in group
            ]
            first, last = words[group[0]].start, words[group[-1]].end
            text = "".join(w.word for w in timed)
            probs = [t.prob for t in tokens[first:last]]
            segments.append(
                dict(
                    seek=seek,
                    start=timed[0].start,
                    end=timed[-1].end,
                    text=text,
                    tokens=[t.id for t in tokens[first:last]],
                    avg_logprob=float(np.mean(np.log(np.maximum(probs, 1e-30)))),
                    compression_ratio=compression_ratio(text),
                    words=timed if req.opts.word_timestamps else None,
                )
            )
        return segments

    def _flush(self, events: list[StepEvent]) -> None:
        touched, self._touched = self._touched, {}
        for req in touched.values():
            if req.done:
                continue
            while req.emitted < len(req.results) and req.results[req.emitted] is not None:
                for seg in req.results[req.emitted]:  # type: ignore[union-attr]
                    if req.segments and not _is_cjk_boundary(req.segments[-1].text, seg["text"]):
                        seg = {**seg, "text": " " + seg["text"]}
                    segment = Segment(id=len(req.segments) + 1, **seg)
                    req.segments.append(segment)
                    events.append(StepEvent(req.rid, "segment", segment=segment))
                req.emitted += 1
            if req.emitted == len(req.results):
                self.requests.pop(req.rid, None)
                self._retire(req)
                self.counters["requests_finished"] += 1
                output = RequestOutput(
                    request_id=req.rid,
                    text="".join(s.text for s in req.segments).strip(),
                    segments=req.segments,
                    duration=req.request.duration,
                    task="transcribe",
                )
                events.append(StepEvent(req.rid, "finished", output=output))


def _is_cjk_boundary(before: str, after: str) -> bool:
    """No space joins two segments where either side of the join is a CJK character."""
    a, b = before.rstrip()[-1:], after.lstrip()[:1]
    return not a or not b or is_cjk(a) or is_cjk(b)


def decode_batch(
    model, feats: list[torch.Tensor], device: torch.device, dtype: torch.dtype
) -> list[tuple[list[int], list[float], list[tuple[int, int]]]]:
    """One batched pass over windows' LFR features: encoder, CIF, decoder, greedy tokens and
    their CIF times (ms within the window).

    Returns:
        per row: token ids, their probabilities, their (start, end) in ms.
    """
    x, lens = pad_features(feats)
    x, lens = x.to(device=device, dtype=dtype), lens.to(device)
    hidden, hidden_lens = model.encode_offline(x, lens)
    cif = model.cif(hidden, hidden_lens)
    skip = frozenset({model.config.blank_id, model.config.sos, model.config.eos})
    out = []
    if int(cif.token_lens.max()) < 1:
        return [([], [], []) for _ in feats]
    log_probs = model.decode_cif(hidden, hidden_lens, cif).float().cpu()
    for row in range(len(feats)):
        ids, probs, _ = greedy_tokens(log_probs[row], int(cif.token_lens[row]), skip)
        spans = cif_token_spans(model, hidden, hidden_lens, cif, row, len(ids)) if ids else []
        if len(spans) < len(ids):  # funasr leaves such tokens untimed; give them the window's end
            end = int(hidden_lens[row]) * model.config.lfr_n * 10
            spans = spans + [(end, end)] * (len(ids) - len(spans))
        out.append((ids, probs, spans))
    return out


__all__ = ["ParaformerDecodeStrategy", "ParaformerFeatures", "ParaformerWindow", "decode_batch", "greedy_tokens"]
