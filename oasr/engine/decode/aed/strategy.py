"""The ``aed`` decode strategy: Whisper-style long-form transcription with
continuous batching.

Each request walks its audio in 30-s windows (seeking by the timestamps it
decodes, as faster-whisper does). The strategy batches across requests at every
stage of a ``step``:

1. encode: up to ``max_batch_size`` windows (language-detection or decode
   windows of any request) in one encoder call;
2. detect: one batched ``<|startoftranscript|>`` prefill for the windows whose
   language is unknown;
3. join: decode tasks (one window at one temperature) are prefilled into free
   rows of a running batch ("cohort") and merged into it between steps;
4. step: every cohort advances one token; finished tasks leave (their rows are
   compacted by ``select``), which may requeue the window at the next fallback
   temperature or move the request on to its next window.

Cohorts are keyed by rows per task (1 for greedy, ``beam_size`` for beam search,
``best_of`` for sampling), so every cohort keeps the shared cross-attention fast
path of the K/V pool. A sampled task draws from a generator seeded from the request's
seed (``options.seed``, or a fresh one per request when it has none: faster-whisper's
CTranslate2 seeds from the OS too), the window and the fallback step, so a given seed
replays the same transcript whatever the batch. A request whose accepted decode of any
window ended at the window's length limit rather than on end-of-text finishes with
``finish_reason="length"``. Joining, stepping, compaction and pool growth are the shared
scheduler's (``oasr.engine.decode.autoregressive.Cohort``); what stays here is
Whisper's: windows, prompts, language detection, timestamps and the fallback.

Text goes out as it is decoded (``delta`` events, ``streams_text``), never text that a later
decision could take back: a window's tokens are sent as they are chosen only when no fallback can
replace them (one temperature, or no compression-ratio / log-prob threshold), the window cannot be
skipped as silence (its no-speech probability, known from the prefill, is not above the threshold)
and no hallucination check may cut it. Then what is final is the common prefix of every sequence
the search can still return (greedy: each token; beam search: what all beams and finished
hypotheses agree on), decoded UTF-8 safe (``oasr.engine.decode.deltas.TextStream``) segment by
segment, a segment after the window's first only once its closing timestamp came (text after a
window's last timestamp pair is dropped and decoded again in the next window). Any other window's
text is sent when the window is accepted. The deltas concatenate exactly to the output's text.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import torch

from oasr.audio.frontends import build_frontend
from oasr.audio.stream import FeatureSource
from oasr.engine.config import EngineConfig, TranscribeOptions
from oasr.engine.decode.aed.logits import FilterRules, TimestampIds, apply_filters
from oasr.engine.decode.aed.options import WhisperOptions
from oasr.engine.decode.aed.prompt import MAX_LENGTH, PromptPlan, build_prompt, plan_prompt
from oasr.engine.decode.aed.search import BeamSearch, GreedySearch, SamplingSearch, TaskSearch
from oasr.engine.decode.aed.timing import add_word_timestamps, find_alignment
from oasr.engine.decode.autoregressive import AutoregressiveCounters, Cohort, select_rows
from oasr.engine.decode.base import Request, StepEvent
from oasr.engine.decode.deltas import TextStream, TranscriptDeltas
from oasr.engine.decode.logits import request_seed
from oasr.engine.decode.requests import RequestTable, TableEntry
from oasr.engine.outputs import FinishReason, RequestOutput, Segment, Word, compression_ratio
from oasr.models.base import DecodeType
from oasr.models.decoders.graphs import step_graphs_for
from oasr.models.decoders.threads import one_intra_op_thread
from oasr.models.loaders import LoadedModel
from oasr.specs import FeatureSpec

FRAMES_PER_SECOND = 100
TIME_PER_FRAME = 0.01
TIME_PRECISION = 0.02
INPUT_STRIDE = 2
# Decode steps over at most this many encoder windows run on one intra-op thread on a CPU.
SERIAL_STEP_GROUPS = 1
PUNCTUATION = "\"'“¿([{-\"'.。,，!！?？:：”)]}、"


# ---------------------------------------------------------------------------
# Per-request and per-task state


@dataclass
class _Window:
    seek: int
    segment_size: int
    enc: torch.Tensor | None = None  # (Tk, D)
    language: str | None = None


@dataclass
class _LiveText:
    """The part of the running window's tokens that nothing can change any more, as text
    (``AedDecodeStrategy._stream``)."""

    segment: TextStream  # the text ids of the open segment
    walked: int = 0  # tokens of the window walked so far
    closed: str = ""  # text of the window's closed segments
    paired: bool = False  # a timestamp pair was seen: an open segment is kept only once closed
    after_timestamp: bool = False

    def text(self) -> str:
        return self.closed + ("" if self.paired else self.segment.sent)


@dataclass
class _Req(TableEntry):
    features: FeatureSource  # log-mel of the whole audio, read a window at a time
    duration: float
    content_frames: int
    seek_clips: list[tuple[int, int]]
    clip_idx: int = 0
    seek: int = 0
    language: str | None = None
    language_probability: float | None = None
    language_probs: dict[str, float] | None = None
    all_tokens: list[int] = field(default_factory=list)
    prompt_reset_since: int = 0
    segments: list[Segment] = field(default_factory=list)
    last_speech_timestamp: float = 0.0
    window: _Window | None = None
    seed: int = 0  # of the request's sampled decodes (request_seed(options.seed))
    finish_reason: FinishReason = "stop"
    temp_index: int = 0
    attempts: list[dict] = field(default_factory=list)
    detect_windows: list[int] = field(default_factory=list)
    detect_info: dict[str, list[float]] = field(default_factory=dict)
    detect_seek: int = 0
    deltas: TranscriptDeltas = field(default_factory=TranscriptDeltas)
    committed: str = ""  # the accepted segments' text, joined (the transcript before its strip)
    live: _LiveText | None = None  # the running window's final text, when it streams as decoded


@dataclass
class _Task:
    req: _Req
    plan: PromptPlan
    rules: FilterRules
    search: TaskSearch
    temperature: float
    prompt_len: int
    no_speech_prob: float = 0.0


# ---------------------------------------------------------------------------


@dataclass
class AedCounters(AutoregressiveCounters):
    """The scheduler's counters plus encoder windows, finished decode tasks and temperature fallbacks."""

    windows_encoded: int = 0
    tasks_finished: int = 0
    fallbacks: int = 0


class AedDecodeStrategy(RequestTable[_Req]):
    """Whisper decoding with faster-whisper's semantics over continuous batches."""

    counters_class = AedCounters

    decode_type = DecodeType.AED
    streams_text = True
    stops_early = True  # Whisper may end a window with end-of-text before its speech ends

    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        super().__init__(loaded, config)
        if loaded.tokenizer is None:
            raise ValueError("the aed strategy needs the checkpoint's tokenizer")
        model = self.model
        self.decoder = model.decoder
        self.tok = model.aed_vocabulary(loaded.tokenizer)
        sp = self.tok.special
        self.ts_ids = TimestampIds(eot=sp.eot, no_timestamps=sp.no_timestamps, timestamp_begin=sp.timestamp_begin)
        params = dict(loaded.decoding_spec.params) if loaded.decoding_spec is not None else {}
        heads = params.get("alignment_heads") or model.default_alignment_heads
        self.alignment_heads = [(int(a), int(b)) for a, b in heads]
        begin = params.get("begin_suppress_tokens") or (self.tok.encode_text(" ")[:1] + [sp.eot])
        self.begin_suppress = tuple(int(t) for t in begin)
        lang_ids = params.get("lang_ids") or [i for _, i in sp.language_ids]
        self.lang_ids = [int(i) for i in lang_ids if self.tok.id_to_language.get(int(i))]
        spec = loaded.feature_spec or FeatureSpec("whisper_mel", 16000, {"n_mels": model.n_mels})
        self.frontend = build_frontend(spec)
        if not hasattr(self.frontend, "long_form"):
            raise ValueError(f"the aed strategy reads Whisper log-mel windows, not {spec.kind!r} features")
        self.n_frames = model.window_frames  # mel frames per window (3000)
        self.device = model.device
        self.dtype = model.compute_dtype
        self.max_groups = config.max_batch_size
        self.cohorts: dict[int, Cohort[_Task]] = {}
        self.encode_queue: deque[tuple[_Req, str, int]] = deque()
        self.step_graphs = step_graphs_for(self.decoder, config.step_graphs)
        on_gpu = self.device.type == "cuda"
        self.encoder_batch = config.encoder_batch_size or (config.max_batch_size if on_gpu else 1)

    # -- admission ---------------------------------------------------------------------

    @property
    def word_timing_modes(self) -> tuple[str, ...]:
        return ("attention",) if hasattr(self.decoder, "cross_attention") else ()

    options_class = WhisperOptions
    prompt_option = "initial_prompt"

    def validate(self, options: TranscribeOptions) -> TranscribeOptions:
        options = super().validate(options)  # the language resolved against model.languages
        lang = options.language
        if not self.tok.special.is_multilingual:
            if options.task == "translate":
                raise ValueError("task='translate' needs a multilingual model; this one is English-only")
            lang = "en"  # its only language (model.languages), never in the prompt
        elif lang is not None and lang not in self.tok.language_to_id:
            raise ValueError(f"language={lang!r}: the model's vocabulary has no <|{lang}|> token")
        if options.multilingual and not self.tok.special.is_multilingual:
            options = options.replace(multilingual=False)
        return options.replace(language=lang) if lang != options.language else options

    def prepare(self, request: Request) -> Request:
        if request.features is None:
            request.features = self.frontend.long_form(
                request.source, device=self.device, max_duration_s=self.config.max_audio_s
            )
            request.duration = request.features.duration
        return request

    def _new_entry(self, request: Request) -> _Req:
        opts = request.options
        features = request.features
        content_frames = features.n_frames - 1
        clips = opts.clip_timestamps
        if isinstance(clips, str):
            clips = [float(x) for x in clips.split(",")] if clips else []
        points = [round(t * FRAMES_PER_SECOND) for t in clips] or [0]
        if len(points) % 2:
            points.append(content_frames)
        req = _Req(
            request=request,
            opts=opts,
            features=features,
            duration=request.duration,
            content_frames=content_frames,
            seek_clips=list(zip(points[::2], points[1::2])),
            seed=request_seed(opts.seed),
        )
        req.seek = req.seek_clips[0][0]
        start = clips[0] if clips else 0.0  # where language detection starts, if it runs
        req.detect_seek = int(start * FRAMES_PER_SECOND) if start * FRAMES_PER_SECOND < content_frames else 0
        if opts.initial_prompt is not None:
            if isinstance(opts.initial_prompt, str):
                req.all_tokens.extend(self.tok.encode_text(" " + opts.initial_prompt.strip()))
            else:
                req.all_tokens.extend(int(t) for t in opts.initial_prompt)
        return req

    def _enqueue(self, req: _Req) -> None:
        opts, features = req.opts, req.features
        if opts.language is not None:
            req.language, req.language_probability = opts.language, 1.0
        elif not self.tok.special.is_multilingual:
            req.language, req.language_probability = "en", 1.0
        else:
            total = features.n_frames - req.detect_seek
            n = min(opts.language_detection_segments, max(1, math.ceil(total / self.n_frames)))
            req.detect_windows = [req.detect_seek + i * self.n_frames for i in range(n)]
            self.encode_queue.append((req, "detect", req.detect_windows.pop(0)))
            return
        self._next_window(req, [])

    def _forget(self, req: _Req) -> None:
        for cohort in self.cohorts.values():  # free its rows now, not at the next step
            cohort.discard(lambda t: t.req is req)
        self.encode_queue = deque(item for item in self.encode_queue if item[0] is not req)

    def _release(self, req: _Req) -> None:
        req.window = None
        req.features.close()

    def _running_rows(self) -> int:
        return sum(c.state.n_rows for c in self.cohorts.values() if c.state is not None)

    def _waiting_tasks(self) -> int:
        return sum(len(c.waiting) for c in self.cohorts.values())

    def _extra_stats(self) -> dict[str, float]:
        return {"encode_queue": len(self.encode_queue), **(self.step_graphs.stats() if self.step_graphs else {})}

    # -- the step ------------------------------------------------------------------------

    def step(self) -> list[StepEvent]:
        events: list[StepEvent] = []
        with torch.inference_mode():
            self._encode(events)
            for cohort in list(self.cohorts.values()):
                self._join(cohort, events)
            for cohort in list(self.cohorts.values()):
                self._advance(cohort, events)
        return events

    # -- 1. encoder ------------------------------------------------------------------------

    def _window_features(self, req: _Req, start: int, size: int) -> torch.Tensor:
        feats = req.features.window(start, size)
        if feats.shape[-1] < self.n_frames:  # zero-pad in feature space
            feats = torch.nn.functional.pad(feats, (0, self.n_frames - feats.shape[-1]))
        return feats

    def _encode(self, events: list[StepEvent]) -> None:
        backlog = sum(len(c.waiting) for c in self.cohorts.values())
        if not self.encode_queue or backlog >= self.max_groups:
            return
        batch: list[tuple[_Req, str, int]] = []
        while self.encode_queue and len(batch) < self.max_groups:
            item = self.encode_queue.popleft()
            if not item[0].done:
                batch.append(item)
        if not batch:
            return
        feats = []
        for req, kind, start in batch:
            size = self.n_frames if kind == "detect" else req.window.segment_size  # type: ignore[union-attr]
            feats.append(self._window_features(req, start, size))
        x = torch.stack(feats).to(device=self.device, dtype=self.dtype)
        step = self.encoder_batch
        enc = torch.cat([self.model.encode_offline(x[i : i + step])[0] for i in range(0, len(x), step)])
        self.counters.windows_encoded += len(batch)
        detect = [(i, item) for i, item in enumerate(batch) if item[1] == "detect" or item[0].opts.multilingual]
        probs = self._detect(enc[[i for i, _ in detect]]) if detect else []
        for (i, (req, kind, start)), p in zip(detect, probs):
            if kind == "detect":
                self._after_detection(req, start, p, enc[i], events)
            else:
                req.window.language = max(p, key=p.get)  # type: ignore[union-attr]
        for i, (req, kind, _) in enumerate(batch):
            if kind == "decode":
                req.window.enc = enc[i]  # type: ignore[union-attr]
                self._submit(req, events)

    def _detect(self, enc: torch.Tensor) -> list[dict[str, float]]:
        """Language probabilities of encoded windows: softmax over the language logits
        after a lone <|startoftranscript|>."""
        g = enc.shape[0]
        pool = self.decoder.new_pool(g, g, max_len=1)
        tokens = torch.full((g, 1), self.tok.special.sot, dtype=torch.long, device=self.device)
        logits, _ = self.decoder.prefill(pool, tokens, torch.ones(g, dtype=torch.long, device=self.device), memory=enc)
        ids = torch.tensor(self.lang_ids, device=logits.device)
        p = torch.softmax(logits.float().index_select(1, ids), dim=-1).cpu().tolist()
        codes = [self.tok.id_to_language[i] for i in self.lang_ids]
        out = []
        for row in p:
            order = sorted(range(len(codes)), key=lambda j: -row[j])
            out.append({codes[j]: row[j] for j in order})
        return out

    def _after_detection(
        self, req: _Req, start: int, probs: dict[str, float], enc: torch.Tensor, events: list[StepEvent]
    ) -> None:
        language, p = next(iter(probs.items()))
        req.language_probs = probs
        thr = req.opts.language_detection_threshold
        decided = thr is not None and p > thr
        if not decided:
            req.detect_info.setdefault(language, []).append(p)
            if req.detect_windows:
                self.encode_queue.appendleft((req, "detect", req.detect_windows.pop(0)))
                return
            language = max(req.detect_info, key=lambda lang: len(req.detect_info[lang]))
            p = max(req.detect_info[language])
        req.language, req.language_probability = language, p
        self._next_window(req, events, reusable=(start, enc))

    # -- windows ---------------------------------------------------------------------------

    def _next_window(
        self, req: _Req, events: list[StepEvent], reusable: tuple[int, torch.Tensor] | None = None
    ) -> None:
        """Find the next window to decode (or finish the request) and queue it."""
        while req.clip_idx < len(req.seek_clips):
            clip_start, clip_end = req.seek_clips[req.clip_idx]
            clip_end = min(clip_end, req.content_frames)
            if req.seek < clip_start:
                req.seek = clip_start
            if req.seek >= clip_end:
                req.clip_idx += 1
                if req.clip_idx < len(req.seek_clips):
                    req.seek = req.seek_clips[req.clip_idx][0]
                continue
            size = min(self.n_frames, req.content_frames - req.seek, clip_end - req.seek)
            req.window = _Window(seek=req.seek, segment_size=size)
            req.temp_index = 0
            req.attempts = []
            # A detection window over exactly these frames already has the encoder output.
            avail = req.features.n_frames - req.seek
            if (
                reusable is not None
                and reusable[0] == req.seek
                and size == min(self.n_frames, avail)
                and not req.opts.multilingual
            ):
                req.window.enc = reusable[1]
                self._submit(req, events)
            else:
                self.encode_queue.append((req, "decode", req.seek))
            return
        self._finish(req, events)

    def _finish(self, req: _Req, events: list[StepEvent]) -> None:
        if not self._remove(req):
            return
        out = RequestOutput(
            request_id=req.rid,
            text="".join(s.text for s in req.segments).strip(),
            segments=req.segments,
            language=req.language,
            language_probability=req.language_probability,
            language_probs=req.language_probs,
            duration=req.duration,
            task=req.opts.task,
            finish_reason=req.finish_reason,
        )
        self._send_text(req, out.text, events)
        self._complete(req, out, events)

    # -- 3. tasks: build and join ---------------------------------------------------------------

    def _submit(self, req: _Req, events: list[StepEvent]) -> None:
        """Queue a decode task for the request's current window at its current temperature."""
        try:
            task = self._make_task(req)
        except ValueError as e:
            self._fail(req, e, events)
            return
        k = task.search.k
        cohort = self.cohorts.get(k)
        if cohort is None:
            # Start small (a lone request needs one group) and grow on demand up to max_batch_size.
            groups = min(self.max_groups, max(1, len(self.requests)))
            cohort = self.cohorts[k] = Cohort(
                self.decoder, self.device, k=k, pool=self.decoder.new_pool(groups * k, groups)
            )
        cohort.waiting.append(task)

    def _make_task(self, req: _Req) -> _Task:
        opts, win = req.opts, req.window
        assert win is not None
        temperature = opts.temperatures[req.temp_index]
        language = win.language or req.language
        previous = req.all_tokens[req.prompt_reset_since :]
        prompt = build_prompt(
            self.tok,
            previous,
            language=language if self.tok.special.is_multilingual else None,
            task=opts.task if self.tok.special.is_multilingual else None,
            without_timestamps=opts.without_timestamps,
            prefix=opts.prefix if win.seek == 0 else None,
            hotwords=opts.hotwords,
        )
        max_length = MAX_LENGTH if opts.max_new_tokens is None else len(prompt) + opts.max_new_tokens
        if max_length > MAX_LENGTH:
            raise ValueError(
                f"the prompt ({len(prompt)} tokens) plus max_new_tokens={opts.max_new_tokens} exceeds "
                f"Whisper's {MAX_LENGTH}-token context"
            )
        plan = plan_prompt(prompt, self.tok, max_length)
        rules = FilterRules(
            suppress=self._suppressed(opts),
            begin_suppress=self.begin_suppress if opts.suppress_blank else (),
            sample_begin=len(plan.prefix),
            timestamp_rules=plan.timestamp_rules,
            max_initial_id=self.tok.timestamp_begin + int(round(opts.max_initial_timestamp / TIME_PRECISION)),
            repetition_penalty=opts.repetition_penalty,
            no_repeat_ngram_size=opts.no_repeat_ngram_size,
        )
        args = (plan.prefix, plan.decode_max, self.tok.eot, opts.length_penalty)
        search: TaskSearch
        if temperature > 0:
            gen = torch.Generator().manual_seed((req.seed * 1_000_003 + win.seek * 101 + req.temp_index) % (2**63))
            search = SamplingSearch(*args, best_of=opts.best_of, temperature=temperature, generator=gen)
        elif opts.beam_size > 1:
            search = BeamSearch(*args, beam_size=opts.beam_size, patience=opts.patience)
        else:
            search = GreedySearch(*args)
        return _Task(req=req, plan=plan, rules=rules, search=search, temperature=temperature, prompt_len=len(prompt))

    def _suppressed(self, opts: TranscribeOptions) -> tuple[int, ...]:
        if not opts.suppress_tokens:
            return ()
        ids = [t for t in opts.suppress_tokens if t >= 0]
        if -1 in opts.suppress_tokens:
            ids.extend(self.tok.non_speech_tokens)
        sp = self.tok.special
        ids.extend(
            t for t in (sp.transcribe, sp.translate, sp.sot, sp.sot_prev, sp.sot_lm, sp.no_speech) if t is not None
        )
        return tuple(sorted(set(ids)))

    def _join(self, cohort: Cohort[_Task], events: list[StepEvent]) -> None:
        """Prefill waiting tasks into the free rows after the running batch and merge them in."""
        running_groups = cohort.n_groups
        tasks = cohort.take(self.max_groups - running_groups, lambda t: t.req.done)
        if not tasks:
            return
        if cohort.reserve_groups(running_groups + len(tasks), self.max_groups):
            self.counters.pool_grows += 1
        dev = self.device
        b = len(tasks)
        lens = [len(t.plan.prefill) for t in tasks]
        tokens = torch.zeros(b, max(lens), dtype=torch.long)
        for i, t in enumerate(tasks):
            tokens[i, : lens[i]] = torch.tensor(t.plan.prefill)
        at = torch.tensor([[t.plan.sot_index, lens[i] - 1] for i, t in enumerate(tasks)])
        memory = torch.stack([t.req.window.enc for t in tasks])  # type: ignore[union-attr]
        logits, new = self.decoder.prefill(
            cohort.pool,
            tokens.to(dev),
            torch.tensor(lens, device=dev),
            row0=cohort.next_row0,
            group0=cohort.next_group0,
            memory=memory,
            logits_at=at.to(dev),
        )
        self.counters.prefills += 1
        ns = self.tok.special.no_speech
        if ns is not None:
            nsp = torch.softmax(logits[:, 0].float(), dim=-1)[:, ns].tolist()
            for t, p in zip(tasks, nsp):
                t.no_speech_prob = p
        for t in tasks:
            t.req.live = _LiveText(TextStream(self.tok.decode_bytes)) if self._final_as_decoded(t) else None
        selection = self._select_next(tasks, logits[:, 1], first=True, events=events)
        self.counters.joins_running += cohort.admit(new, *selection)

    # -- 4. decode steps ----------------------------------------------------------------------------

    def _advance(self, cohort: Cohort[_Task], events: list[StepEvent]) -> None:
        if cohort.n_rows == 0:
            return
        # One window's step (a sequential long-form decode, greedy or beam) is too small for a
        # second CPU thread, whose every wait costs more than it brings (models/decoders/threads.py).
        with one_intra_op_thread(self.device, enabled=cohort.n_groups <= SERIAL_STEP_GROUPS):
            logits = cohort.step(self.step_graphs or self.decoder)
            cohort.keep(*self._select_next(cohort.tasks, logits, first=False, events=events))

    def _select_next(
        self, tasks: list[_Task], logits: torch.Tensor, *, first: bool, events: list[StepEvent]
    ) -> tuple[list[int], list[int], list[_Task]]:
        """Filter, score and select one step for ``tasks`` whose rows make up ``logits``.

        Returns the rows to keep (for ``select``), their next input tokens, and the
        tasks still running, in their new order.
        """
        rows_per_task = [1 if first else t.search.k for t in tasks]
        ctx = []
        for t, n in zip(tasks, rows_per_task):
            toks = t.search.row_tokens()
            ctx.extend((t.rules, toks[j]) for j in range(n))
        apply_filters(logits, ctx, self.ts_ids)
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        best_lp, best_id = logprobs.max(dim=-1)
        argmax = list(zip(best_id.tolist(), best_lp.tolist()))
        finished: list[_Task] = []

        def update(t: _Task, lo: int, hi: int) -> tuple[list[int], list[int]] | None:
            if t.req.done:
                return None
            if t.search.done:
                finished.append(t)
                return None
            parents, nxt = t.search.update(logprobs[lo:hi], argmax[lo:hi])
            if t.search.done:
                finished.append(t)
                return None
            return parents, nxt

        selection = select_rows(tasks, rows_per_task, update, compact=not first)
        for t in tasks:
            if t.req.live is not None and not t.search.done and not t.req.done:
                self._stream(t, events)
        for t in finished:
            self._task_done(t, events)
        return selection

    # -- 5. text as it is decoded ---------------------------------------------------------------

    def _final_as_decoded(self, task: _Task) -> bool:
        """Whether the task's tokens become the window's text as they are chosen: no temperature
        fallback can replace them (one temperature, or no threshold to fail), the window cannot
        be skipped as silence (its no-speech probability, known from the prefill, is not above
        the threshold) nor cut as a hallucination. Otherwise its text is sent once accepted."""
        opts = task.req.opts
        fallback = len(opts.temperatures) > 1 and (
            opts.compression_ratio_threshold is not None or opts.log_prob_threshold is not None
        )
        silence = opts.no_speech_threshold is not None and task.no_speech_prob > opts.no_speech_threshold
        hallucination = opts.word_timestamps and opts.hallucination_silence_threshold is not None
        return not (fallback or silence or hallucination)

    def _stream(self, task: _Task, events: list[StepEvent]) -> None:
        """Send the text of the task's tokens that is final: the common prefix of every sequence
        its search can still return (greedy: all of it), cut into segments as
        ``_split_by_timestamps`` will cut it. A window's first segment is always kept; a later
        one only once its closing timestamp came (text after the last timestamp pair of a window
        is dropped and decoded again from there in the next window), so it is held until then."""
        req, live = task.req, task.req.live
        assert live is not None
        candidates = task.search.candidates()
        ref, eot, tb = candidates[0], self.tok.eot, self.tok.timestamp_begin
        end = min(len(c) for c in candidates)
        n = live.walked
        while n < end and ref[n] != eot and all(c[n] == ref[n] for c in candidates[1:]):
            n += 1
        for tok in ref[live.walked : n]:
            if tok >= tb:
                if live.after_timestamp:
                    live.paired = True
                elif live.segment.ids:  # text closed by a timestamp: a segment (blank ones are dropped)
                    text = live.segment.finish()[1]
                    live.closed += text if text.strip() else ""
                    live.segment = TextStream(self.tok.decode_bytes)
                live.after_timestamp = True
            else:
                live.after_timestamp = False
                if tok < eot:
                    live.segment.push(tok)
        live.walked = n
        self._send_text(req, req.committed + live.text(), events)

    def _send_text(self, req: _Req, raw: str, events: list[StepEvent]) -> None:
        """A delta for what ``raw`` (the transcript before its final strip) adds to what was sent."""
        delta = req.deltas.extend(raw.strip())
        if delta:
            events.append(StepEvent(req.rid, "delta", delta=delta))

    # -- 6. results ----------------------------------------------------------------------------

    def _task_done(self, task: _Task, events: list[StepEvent]) -> None:
        req = task.req
        if req.done:
            return
        self.counters.tasks_finished += 1
        tokens, score = task.search.result()
        opts = req.opts
        seq_len = len(tokens)
        avg_logprob = score * (seq_len**opts.length_penalty) / (seq_len + 1)
        text = self.tok.decode(tokens).strip()
        attempt = dict(
            tokens=tokens,
            avg_logprob=avg_logprob,
            temperature=task.temperature,
            compression_ratio=compression_ratio(text),
            no_speech_prob=task.no_speech_prob,
            cut=task.search.cut,
        )
        req.attempts.append(attempt)
        needs_fallback = False
        if (
            opts.compression_ratio_threshold is not None
            and attempt["compression_ratio"] > opts.compression_ratio_threshold
        ):
            needs_fallback = True
        if opts.log_prob_threshold is not None and avg_logprob < opts.log_prob_threshold:
            needs_fallback = True
        if (
            opts.no_speech_threshold is not None
            and task.no_speech_prob > opts.no_speech_threshold
            and opts.log_prob_threshold is not None
            and avg_logprob < opts.log_prob_threshold
        ):
            needs_fallback = False
        if needs_fallback and req.temp_index + 1 < len(opts.temperatures):
            req.temp_index += 1
            self.counters.fallbacks += 1
            self._submit(req, events)
            return
        if needs_fallback:
            cr = opts.compression_ratio_threshold
            below = [a for a in req.attempts if cr is None or a["compression_ratio"] <= cr]
            best = max(below or req.attempts, key=lambda a: a["avg_logprob"])
            attempt = dict(best, temperature=opts.temperatures[-1])
        try:
            self._accept_window(req, attempt, events)
        except Exception as e:  # a bug in post-processing must not take other requests down
            self._fail(req, e, events)

    def _accept_window(self, req: _Req, attempt: dict, events: list[StepEvent]) -> None:
        opts, win = req.opts, req.window
        assert win is not None
        # The text already sent as decoded (a prefix of this window's): segments up to it send nothing.
        sent = len(req.committed) + (len(req.live.text()) if req.live is not None else 0)
        req.live = None
        seek = win.seek
        if opts.no_speech_threshold is not None:
            skip = attempt["no_speech_prob"] > opts.no_speech_threshold
            if opts.log_prob_threshold is not None and attempt["avg_logprob"] > opts.log_prob_threshold:
                skip = False
            if skip:
                req.seek = seek + win.segment_size
                self._next_window(req, events)
                return
        tokens = attempt["tokens"]
        time_offset = seek * TIME_PER_FRAME
        window_end_time = float((seek + self.n_frames) * TIME_PER_FRAME)
        segment_duration = win.segment_size * TIME_PER_FRAME
        subs, new_seek, single_ending = self._split_by_timestamps(
            tokens, time_offset, win.segment_size, segment_duration, seek
        )
        if opts.word_timestamps:
            self._time_words(req, subs, win, time_offset)
            if not single_ending:
                end = _get_end(subs)
                if end is not None and end > time_offset:
                    new_seek = round(end * FRAMES_PER_SECOND)
            if opts.hallucination_silence_threshold is not None:
                action = self._skip_hallucination(req, subs, seek, time_offset, window_end_time, segment_duration)
                if action is not None:
                    kind, new_seek = action
                    if kind == "skip":
                        req.seek = new_seek
                        self._next_window(req, events)
                        return
            end = _get_end(subs)
            if end is not None:
                req.last_speech_timestamp = end
        if attempt["cut"]:
            req.finish_reason = "length"
        for sub in subs:
            text = self.tok.decode(sub["tokens"])
            if sub["start"] == sub["end"] or not text.strip():
                continue
            req.all_tokens.extend(sub["tokens"])
            segment = Segment(
                id=len(req.segments) + 1,
                seek=seek,
                start=sub["start"],
                end=sub["end"],
                text=text,
                tokens=list(sub["tokens"]),
                temperature=attempt["temperature"],
                avg_logprob=attempt["avg_logprob"],
                compression_ratio=attempt["compression_ratio"],
                no_speech_prob=attempt["no_speech_prob"],
                words=[Word(**w) for w in sub["words"]] if opts.word_timestamps else None,
            )
            req.segments.append(segment)
            events.append(StepEvent(req.rid, "segment", segment=segment))
            req.committed += text
            if len(req.committed) >= sent:
                self._send_text(req, req.committed, events)
        if not opts.condition_on_previous_text or attempt["temperature"] > opts.prompt_reset_on_temperature:
            req.prompt_reset_since = len(req.all_tokens)
        req.seek = new_seek
        req.window = None
        self._next_window(req, events)

    def _split_by_timestamps(
        self, tokens: list[int], time_offset: float, segment_size: int, segment_duration: float, seek: int
    ) -> tuple[list[dict], int, bool]:
        tb = self.tok.timestamp_begin
        single_ending = len(tokens) >= 2 and tokens[-2] < tb <= tokens[-1]
        consecutive = [i for i in range(1, len(tokens)) if tokens[i] >= tb and tokens[i - 1] >= tb]
        subs: list[dict] = []
        if consecutive:
            slices = consecutive + ([len(tokens)] if single_ending else [])
            last = 0
            for cur in slices:
                part = tokens[last:cur]
                subs.append(
                    dict(
                        seek=seek,
                        tokens=part,
                        start=time_offset + (part[0] - tb) * TIME_PRECISION,
                        end=time_offset + (part[-1] - tb) * TIME_PRECISION,
                    )
                )
                last = cur
            if single_ending:
                seek += segment_size
            else:
                seek += (tokens[last - 1] - tb) * INPUT_STRIDE
        else:
            duration = segment_duration
            stamps = [t for t in tokens if t >= tb]
            if stamps and stamps[-1] != tb:
                duration = (stamps[-1] - tb) * TIME_PRECISION
            subs.append(dict(seek=seek, start=time_offset, end=time_offset + duration, tokens=tokens))
            seek += segment_size
        return subs, seek, single_ending

    def _time_words(self, req: _Req, subs: list[dict], win: _Window, time_offset: float) -> None:
        eot = self.tok.eot
        text_tokens = [t for sub in subs for t in sub["tokens"] if t < eot]
        language = win.language or req.language
        sot_seq = self.tok.sot_sequence(
            language if self.tok.special.is_multilingual else None,
            req.opts.task if self.tok.special.is_multilingual else None,
        )
        alignment = find_alignment(
            self.decoder,
            self.tok,
            win.enc[None],
            sot_seq,
            text_tokens,
            win.segment_size,
            self.alignment_heads,
            language,
        )
        req.last_speech_timestamp = (
            add_word_timestamps(
                subs,
                alignment,
                time_offset,
                req.opts.prepend_punctuations,
                req.opts.append_punctuations,
                req.last_speech_timestamp,
                eot,
            )
            if alignment
            else req.last_speech_timestamp
        )
        for sub in subs:
            sub.setdefault("words", [])

    def _skip_hallucination(
        self,
        req: _Req,
        subs: list[dict],
        previous_seek: int,
        time_offset: float,
        window_end_time: float,
        segment_duration: float,
    ) -> tuple[str, int] | None:
        """faster-whisper's hallucination_silence_threshold logic.

        Returns:
            ("skip", seek) to discard the whole window, ("truncate", seek) after
            cutting ``subs`` at a hallucination surrounded by silence, or None.
        """
        thr = req.opts.hallucination_silence_threshold
        content_duration = req.content_frames * TIME_PER_FRAME
        first = next((s for s in subs if s["words"]), None)
        if first is not None and _is_anomaly(first):
            gap = first["start"] - time_offset
            if gap > thr:
                return "skip", previous_seek + round(gap * FRAMES_PER_SECOND)
        hal_last_end = req.last_speech_timestamp
        for si, seg in enumerate(subs):
            if not seg["words"]:
                continue
            if _is_anomaly(seg):
                nxt = next((s for s in subs[si + 1 :] if s["words"]), None)
                hal_next_start = nxt["words"][0]["start"] if nxt else time_offset + segment_duration
                silence_before = (
                    seg["start"] - hal_last_end > thr or seg["start"] < thr or seg["start"] - time_offset < 2.0
                )
                silence_after = (
                    hal_next_start - seg["end"] > thr or _is_anomaly(nxt) or window_end_time - seg["end"] < 2.0
                )
                if silence_before and silence_after:
                    seek = round(max(time_offset + 1, seg["start"]) * FRAMES_PER_SECOND)
                    if content_duration - seg["end"] < thr:
                        seek = req.content_frames
                    del subs[si:]
                    return "truncate", seek
            hal_last_end = seg["end"]
        return None


def _get_end(subs: list[dict]) -> float | None:
    last_word = next((w["end"] for s in reversed(subs) for w in reversed(s.get("words") or [])), None)
    if last_word is not None:
        return last_word
    return subs[-1]["end"] if subs else None


def _word_anomaly(word: dict) -> float:
    probability = word.get("probability", 0.0)
    duration = word["end"] - word["start"]
    score = 0.0
    if probability < 0.15:
        score += 1.0
    if duration < 0.133:
        score += (0.133 - duration) * 15
    if duration > 2.0:
        score += duration - 2.0
    return score


def _is_anomaly(segment: dict | None) -> bool:
    if segment is None or not segment["words"]:
        return False
    words = [w for w in segment["words"] if w["word"] not in PUNCTUATION][:8]
    score = sum(_word_anomaly(w) for w in words)
    return score >= 3 or score + 0.01 >= len(words)
