"""The ``llm`` decode strategy: speech-LLMs (an audio tower feeding a causal LM that
writes the transcript), shared by Qwen3-ASR, Qwen2-Audio and Canary-Qwen, with continuous batching.

A step does, across every admitted request:

1. join: while the running batch has free rows, the waiting requests' features go
   through ``model.encode_offline`` in one batch, their chat prompts
   (``model.prompt_ids``) are embedded with the audio states spliced in
   (``model.embed_prompt``), left-padded and prefilled in one call into the rows
   after the running batch, and merged into it;
2. step: every running row feeds its last token (``decoder.step``) and chooses the
   next; rows that stop (a stop id of the model: ``finish_reason="stop"``, or their token
   budget: ``"length"``) leave through ``select``, which fills their holes from the tail.
   The K/V pool holds the prompts plus what has been generated, and grows (by a quarter,
   at least ``POOL_LEN_STEP``) only when a row is about to outgrow it, never past what the
   running rows' budgets can need.

The running batch, its joins, compaction and K/V-pool growth are the shared scheduler's
(``oasr.engine.decode.autoregressive.Cohort``, one row per request); the chat prompt,
token choice, streaming and output parsing are this module's.

Choosing a token (per row, on float32 logits; ``oasr.engine.decode.logits.choose_token``)
follows transformers' ``generate`` chain: repetition penalty (over the prompt and the
generated ids, as transformers does) -> temperature -> top-k -> top-p -> softmax -> one
draw. The draw is an inverse-CDF lookup of a uniform number from the request's own
``torch.Generator`` (CPU, seeded with ``options.seed``; without one, a fresh seed per request),
so a fixed seed replays the same tokens whatever the request is batched with and on any device
(as long as the logits are the same). Greedy (temperature <= 0) is the argmax after
the repetition penalty.

Option semantics:

* ``temperature``: one value, or a sequence of which the first value is used (the
  LLM path has no quality-based fallback). Unset (``LlmOptions``: None), the checkpoint's
  ``DecodingSpec`` temperature applies (greedy when it declares none).
* ``top_k`` / ``top_p`` / ``repetition_penalty``: unset (None), the checkpoint's
  ``DecodingSpec`` values apply.
* ``max_new_tokens``: the request's token budget. Unset (None): the checkpoint's, when its
  generation config declares one (what transformers' ``generate`` uses); otherwise one that
  follows the audio, ``default_token_budget(duration)``: ``MAX_TOKENS_PER_SECOND`` per second
  of audio plus ``BUDGET_BASE_TOKENS``, so that no real recording is cut. A checkpoint that
  declares ``max_length_per_second`` (Moonshine: its card's limit, given to ``generate`` as
  ``max_length``) gets that instead: ``int(samples * rate / sampling_rate)`` positions, the
  prompt's included (at least one new token). (There ``generate``
  would fall back to ``max_length=20`` tokens, prompt included, which transcribes nothing:
  oasr deviates.) Set or not, it is capped by the LM context (prompt + audio tokens + budget
  <= ``max_position_embeddings``). A request that stops on its budget has
  ``finish_reason="length"``.
* ``language``: resolved against ``model.languages`` (ISO codes) by the strategy's base
  ``validate`` (one the model lacks is a ``ValueError``); None / "" / "auto" / "none"
  detect it. The output reports an ISO code, forced or detected (``parse_output``).
* ``context``: text for the prompt's system turn. ``initial_prompt``, ``prefix`` and
  ``hotwords`` are refused (use ``context``), as are ``word_timestamps`` and a
  ``task`` the model does not declare (``model.supports_translation``).
* Whisper's options (``beam_size``, ``best_of``, the fallback thresholds, ...) are refused
  (``OptionNotTaken``): one hypothesis is decoded per request.

Streaming (``oasr.engine.decode.deltas.TextStream``): after each token the request's
accumulated ids are turned into bytes (``tokenizer.decode_bytes``; without the tokenizer's special
ids for a model whose ``text_skips_special_tokens`` is True, as its reference's
``skip_special_tokens=True``) and only complete UTF-8 characters are decoded; the
transcript so far (``model.parse_output``) is sent as ``StepEvent(kind="delta")``
when it extends what was sent. With no forced language the model writes a language
preamble first, so nothing is sent until ``parse_output`` reports the detected
language (or the request finishes); a model whose ``writes_language`` is False (Granite
Speech) writes none, and its text is sent as it comes. The deltas of a request concatenate exactly to
its final ``RequestOutput.text``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from oasr.audio import load_audio
from oasr.audio.frontends import build_frontend
from oasr.engine.config import EngineConfig, StrategyOptions, TranscribeOptions
from oasr.engine.decode.autoregressive import AutoregressiveCounters, Cohort, TaskUpdate, select_rows
from oasr.engine.decode.base import Request, StepEvent
from oasr.engine.decode.deltas import TextStream
from oasr.engine.decode.logits import SamplingParams, choose_token, request_seed
from oasr.engine.decode.requests import RequestTable, TableEntry
from oasr.engine.outputs import FinishReason, RequestOutput, Segment, compression_ratio
from oasr.models.base import DecodeType
from oasr.models.decoders.graphs import step_graphs_for
from oasr.models.loaders import LoadedModel

log = logging.getLogger("oasr.engine")

MAX_TOKENS_PER_SECOND = 25.0
"""The default budget's rate, in tokens per second of audio. The fastest speech is about 5
words/s (English, Spanish) or 8-10 characters/s (Chinese, Japanese); transcripts of the shared
corpus, tokenized with Whisper's multilingual byte-level BPE (whose 50k pieces split non-Latin
text more finely than Qwen's 151k), run at up to 10 tokens/s over clips longer than a second
(5-6 tokens/s for the Chinese, Japanese and Korean ones). 25 leaves 2.5 times that for scripts
that split into more pieces and for the fastest talkers, while a model stuck repeating itself
still stops after a time that scales with its audio."""
BUDGET_BASE_TOKENS = 64  # besides the rate: the language preamble, and room for very short clips
DEFAULT_MAX_AUDIO_S = 1200.0  # refused past this (a checkpoint may declare max_audio_s)
POOL_LEN_STEP = 256  # the K/V pool grows in steps of this many tokens per row
PREFILL_MASK_BUDGET = 1 << 24  # (rows x T x T) mask elements of one padded prefill
CPU_PREFILL_MAX_PADDING = 0.1
"""On a CPU, a prefill group stops growing where its left padding would exceed this share of its
real prompt tokens, and a batch whose padded features would exceed it is encoded a request at a
time: a CPU's GEMMs run no faster over more rows once there are a hundred or so, so padded
positions only cost (8 clips of 1-11 s with Granite Speech's chat prompt: 1728 prompt positions
padded against ~1100 real, 4400 encoder frames against 1625); an accelerator keeps one call."""


@dataclass(frozen=True)
class LlmOptions(StrategyOptions):
    """The options the ``llm`` strategy reads. None means the checkpoint's generation config
    (its ``DecodingSpec`` params: greedy, no penalty, when it declares none), which is what a
    user of the reference (transformers' ``generate`` on the checkpoint) gets by default."""

    temperature: float | tuple[float, ...] | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    max_new_tokens: int | None = None
    seed: int | None = None
    context: str | None = None

    hints: ClassVar[dict[str, str]] = {
        name: "pass context= (text placed in the prompt's system turn) to bias the transcript instead"
        for name in ("initial_prompt", "prefix")
    }


def default_token_budget(duration_s: float) -> int:
    """New tokens a request of ``duration_s`` seconds of audio may write when no
    ``max_new_tokens`` is given: ``BUDGET_BASE_TOKENS`` plus ``MAX_TOKENS_PER_SECOND`` per second."""
    return BUDGET_BASE_TOKENS + math.ceil(max(duration_s, 0.0) * MAX_TOKENS_PER_SECOND)


# ---------------------------------------------------------------------------
# Per-request state


@dataclass
class _Req(TableEntry):
    params: SamplingParams
    generator: torch.Generator | None
    max_new: int  # the token budget (capped by the context at prefill)
    feats: torch.Tensor  # (T, F)
    n_frames: int
    stream: TextStream
    prompt_len: int = 0  # set at prefill: the row holds at most prompt_len + max_new positions
    seen: set[int] = field(default_factory=set)
    tokens: list[int] = field(default_factory=list)
    logprob_sum: float = 0.0
    finish_reason: FinishReason = "stop"


@dataclass
class LlmCounters(AutoregressiveCounters):
    tokens_generated: int = 0  # every chosen token, stop ids included


class LlmDecodeStrategy(RequestTable[_Req]):
    """Speech-LLM decoding (greedy or sampled) over continuous batches of a per-row K/V pool."""

    prompt_option = "context"
    options_class = LlmOptions

    decode_type = DecodeType.LLM
    streams_text = True
    counters_class = LlmCounters

    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        super().__init__(loaded, config)
        model = self.model
        tokenizer = loaded.tokenizer if loaded.tokenizer is not None else getattr(model, "tokenizer", None)
        if tokenizer is None:
            raise ValueError("the llm strategy needs the checkpoint's tokenizer")
        if loaded.feature_spec is None:
            raise ValueError("the llm strategy needs the checkpoint's feature spec (FeatureSpec)")
        self.tokenizer = tokenizer
        self.decoder = model.decoder
        self.frontend = build_frontend(loaded.feature_spec)
        self.sampling_rate = loaded.feature_spec.sampling_rate
        params = dict(loaded.decoding_spec.params) if loaded.decoding_spec is not None else {}
        self.spec = params
        front_limit = getattr(self.frontend, "max_duration_s", None)
        self.max_audio_s = float(params.get("max_audio_s") or front_limit or DEFAULT_MAX_AUDIO_S)
        if config.max_audio_s is not None:
            self.max_audio_s = min(self.max_audio_s, config.max_audio_s)
        self.stop_ids = frozenset(int(t) for t in model.stop_ids)
        # A family whose reference decodes with ``skip_special_tokens=True`` drops a special token the
        # model writes (a role marker, say) from its text; the ids stay in the segment's tokens.
        self.text_skip_ids = (
            frozenset(tokenizer.special_ids) if getattr(model, "text_skips_special_tokens", False) else frozenset()
        )
        self.context_len = int(getattr(self.decoder.cfg, "max_position_embeddings", 32768))
        self.max_rows = config.max_batch_size
        self.device = model.device
        self.dtype = model.compute_dtype
        self.batch: Cohort[_Req] = Cohort(self.decoder, self.device)  # one row per request; its pool grows in length
        self.step_graphs = step_graphs_for(self.decoder, config.step_graphs)

    # -- admission ---------------------------------------------------------------------

    def validate(self, options: TranscribeOptions) -> TranscribeOptions:
        options = super().validate(options)
        if options.language is None and self.languages and len(self.languages) == 1:
            options = options.replace(language=self.languages[0])  # one language: nothing to detect
        name = type(self.model).__name__
        if options.task != "transcribe" and not getattr(self.model, "supports_translation", False):
            raise ValueError(f"task={options.task!r} is not available: {name} only transcribes")
        if options.hotwords is not None:
            raise ValueError(
                f"hotwords is not used by the speech-LLM decoder ({name}); pass context= (text placed in "
                f"the prompt's system turn) to bias the transcript instead"
            )
        # The model refuses what its prompt cannot express (e.g. context without a system turn)
        # now, before any audio is decoded.
        self.model.prompt_ids(1, language=options.language, context=options.context, task=options.task)
        return options

    def prepare(self, request: Request) -> Request:
        if request.features is None:
            wave = load_audio(request.source, self.sampling_rate, max_duration_s=self.max_audio_s)
            samples = torch.from_numpy(wave).to(self.device)  # the mel is computed where the model runs
            feats, lens = self.frontend.compute_batch([samples])
            request.features = (feats[0], int(lens[0]))
            request.duration = len(wave) / self.sampling_rate
        return request

    def _sampling(self, opts: TranscribeOptions) -> tuple[SamplingParams, torch.Generator | None]:
        spec = self.spec
        temperature = float(spec.get("temperature", 0.0)) if opts.temperature is None else opts.temperatures[0]
        top_k = int(spec.get("top_k", 0) or 0) if opts.top_k is None else opts.top_k
        top_p = float(spec.get("top_p", 1.0)) if opts.top_p is None else opts.top_p
        penalty = (
            float(spec.get("repetition_penalty", 1.0)) if opts.repetition_penalty is None else opts.repetition_penalty
        )
        params = SamplingParams(temperature, top_k, top_p, penalty, request_seed(opts.seed))
        generator = None
        if not params.greedy:
            generator = torch.Generator()
            generator.manual_seed(params.seed)
        return params, generator

    def token_budget(self, opts: TranscribeOptions, duration_s: float) -> int:
        """A request's ``max_new_tokens`` before the context caps it: the option when given,
        else the checkpoint's declared one, else its ``max_length_per_second`` (positions, the
        prompt's included: ``_prefill`` takes the prompt off), else the model's own
        ``default_token_budget(duration_s)`` when it has one, else this module's."""
        if opts.max_new_tokens is not None:
            return opts.max_new_tokens
        declared = self.spec.get("max_new_tokens")
        if declared:
            return int(declared)
        if self._length_rate():
            samples = round(duration_s * self.sampling_rate)
            return int(samples * self._length_rate() / self.sampling_rate)
        own = getattr(self.model, "default_token_budget", None)  # a model's own rate (Moonshine Streaming's)
        return own(duration_s) if own is not None else default_token_budget(duration_s)

    def _length_rate(self) -> float:
        return float(self.spec.get("max_length_per_second") or 0.0)

    def _new_entry(self, request: Request) -> _Req:
        feats, n_frames = request.features
        opts = request.options
        params, generator = self._sampling(opts)
        max_new = self.token_budget(opts, request.duration)
        stream = TextStream(
            self._text_bytes,
            self.model.parse_output,
            # A model that writes no language preamble (``writes_language`` False) has nothing to wait for.
            hold_until_language=opts.language is None and getattr(self.model, "writes_language", True),
        )
        return _Req(request, opts, params, generator, max_new, feats, int(n_frames), stream)

    def _text_bytes(self, ids: Sequence[int]) -> bytes:
        if self.text_skip_ids:
            ids = [i for i in ids if i not in self.text_skip_ids]
        return self.tokenizer.decode_bytes(ids)

    def _enqueue(self, req: _Req) -> None:
        self.batch.waiting.append(req)

    def _forget(self, req: _Req) -> None:
        self.batch.discard(lambda r: r is req)  # its row leaves now, not at the next step
        self._release_if_idle()

    def _running_rows(self) -> int:
        return self.batch.n_rows

    def _waiting_tasks(self) -> int:
        return len(self.batch.waiting)

    def _extra_stats(self) -> dict[str, float]:
        return self.step_graphs.stats() if self.step_graphs else {}

    # -- the step ------------------------------------------------------------------------

    def step(self) -> list[StepEvent]:
        events: list[StepEvent] = []
        with torch.inference_mode():
            self._join(events)
            self._advance(events)
        self._release_if_idle()
        return events

    def _release_if_idle(self) -> None:
        """Give the pool's memory back once nothing runs or waits."""
        if not self.batch.tasks and not self.batch.waiting:
            self.batch.release()

    # -- 1. join: encode, prompt, prefill, merge -----------------------------------------------

    def _join(self, events: list[StepEvent]) -> None:
        batch = self.batch.take(self.max_rows - len(self.batch.tasks), lambda r: r.done)
        if not batch:
            return
        try:
            self._prefill(batch, events)
        except Exception as e:  # a failing batch fails its own requests, not the running ones
            log.exception("prefill of %d requests failed", len(batch))
            for req in batch:
                self._fail(req, e, events)

    def _encode(self, batch: list[_Req]) -> tuple[torch.Tensor, torch.Tensor]:
        """The requests' audio states ``(B, N, D)`` and counts ``(B,)``: one padded pass, or on a
        CPU, where that padding would exceed ``CPU_PREFILL_MAX_PADDING`` of the frames, a pass
        per request (an encoder's GEMMs gain nothing from more rows there), zero-padded after."""
        model = self.model
        n_feat = max(r.feats.shape[0] for r in batch)
        if self.device.type == "cpu" and len(batch) * n_feat > (1 + CPU_PREFILL_MAX_PADDING) * sum(
            r.feats.shape[0] for r in batch
        ):
            rows = [
                model.encode_offline(
                    r.feats[None].to(device=self.device, dtype=self.dtype),
                    torch.tensor([r.n_frames], dtype=torch.long, device=self.device),
                )
                for r in batch
            ]
            audio = rows[0][0].new_zeros(len(batch), max(a.shape[1] for a, _ in rows), rows[0][0].shape[2])
            for i, (a, _) in enumerate(rows):
                audio[i, : a.shape[1]] = a[0]
            return audio, torch.cat([n.reshape(1) for _, n in rows])
        feats = batch[0].feats.new_zeros(len(batch), n_feat, batch[0].feats.shape[1])
        for i, r in enumerate(batch):
            feats[i, : r.feats.shape[0]] = r.feats
        lens = torch.tensor([r.n_frames for r in batch], dtype=torch.long, device=self.device)
        return model.encode_offline(feats.to(device=self.device, dtype=self.dtype), lens)

    def _prefill(self, batch: list[_Req], events: list[StepEvent]) -> None:
        model = self.model
        audio, n_audio = self._encode(batch)
        n_audio_list = [int(n) for n in n_audio.tolist()]
        keep: list[int] = []
        prompts: list[list[int]] = []
        for i, (r, n) in enumerate(zip(batch, n_audio_list)):
            try:
                ids = list(model.prompt_ids(n, language=r.opts.language, context=r.opts.context, task=r.opts.task))
            except ValueError as e:
                self._fail(r, e, events)
                continue
            room = self.context_len - len(ids)
            if room < 1:
                self._fail(
                    r,
                    ValueError(
                        f"the prompt ({len(ids)} tokens for {r.request.duration:.1f} s of audio) fills the "
                        f"model's {self.context_len}-token context"
                    ),
                    events,
                )
                continue
            if r.opts.max_new_tokens is None and not self.spec.get("max_new_tokens") and self._length_rate():
                r.max_new = max(1, r.max_new - len(ids))  # a max_length: the prompt counts
            r.max_new = min(r.max_new, room)
            r.prompt_len = len(ids)
            if r.params.repetition_penalty != 1.0:
                r.seen = set(ids)
            keep.append(i)
            prompts.append(ids)
        if not keep:
            return
        # Prompts of similar length prefill together, shortest first; a group's padded
        # (T, T) attention mask stays under PREFILL_MASK_BUDGET elements (a lone or
        # unpadded group needs no mask at all), and on a CPU its padding under
        # CPU_PREFILL_MAX_PADDING of its tokens.
        order = sorted(range(len(keep)), key=lambda j: len(prompts[j]))
        padding_cap = CPU_PREFILL_MAX_PADDING if self.device.type == "cpu" else float("inf")
        group: list[int] = []
        tokens = 0
        for j in order:
            longest = len(prompts[j])
            padded = (len(group) + 1) * longest
            if group and (padded * longest > PREFILL_MASK_BUDGET or padded > (1 + padding_cap) * (tokens + longest)):
                self._prefill_group(group, keep, batch, prompts, audio, n_audio, events)
                group, tokens = [], 0
            group.append(j)
            tokens += longest
        self._prefill_group(group, keep, batch, prompts, audio, n_audio, events)

    def _prefill_group(
        self,
        group: list[int],
        keep: list[int],
        batch: list[_Req],
        prompts: list[list[int]],
        audio: torch.Tensor,
        n_audio: torch.Tensor,
        events: list[StepEvent],
    ) -> None:
        """Prefill the prompts ``prompts[j]`` (requests ``batch[keep[j]]``, audio rows
        ``keep[j]``) for ``j`` in ``group`` after the running rows, and merge them in."""
        reqs = [batch[keep[j]] for j in group]
        group_prompts = [prompts[j] for j in group]
        rows = torch.tensor([keep[j] for j in group], device=audio.device)
        t = max(len(p) for p in group_prompts)
        ids_t = torch.zeros(len(group), t, dtype=torch.long)
        valid = torch.zeros(len(group), t, dtype=torch.bool)
        for i, p in enumerate(group_prompts):
            ids_t[i, t - len(p) :] = torch.tensor(p, dtype=torch.long)
            valid[i, t - len(p) :] = True
        ids_t, valid = ids_t.to(self.device), valid.to(self.device)
        embeds = self.model.embed_prompt(ids_t, valid, audio.index_select(0, rows), n_audio.index_select(0, rows))
        # Room for the prompts now; the rows' budgets are reserved as they are used (``_advance``).
        self._reserve(t + 1)
        logits, new = self.decoder.prefill(self.batch.pool, embeds, valid, row0=self.batch.next_row0)
        extras = getattr(self.model, "decoder_extras", None)
        if extras is not None:  # what a model's decode steps read besides the token (Voxtral Realtime's audio)
            new.extras.update(extras(audio.index_select(0, rows), n_audio.index_select(0, rows)))
        self.counters.prefills += 1
        tokens, logprobs = self._choose(reqs, logits)
        selection = select_rows(reqs, [1] * len(reqs), self._row_update(tokens, logprobs, events), compact=False)
        self.counters.joins_running += self.batch.admit(new, *selection)

    # -- 2. decode steps ------------------------------------------------------------------------

    def _reserve(self, need_len: int) -> None:
        """A pool whose rows hold at least ``need_len`` positions (grown between steps)."""
        if self.batch.reserve_length(
            need_len, rows=self.max_rows, len_step=POOL_LEN_STEP, max_len=self.context_len, dtype=self.dtype
        ):
            self.counters.pool_grows += 1

    def _advance(self, events: list[StepEvent]) -> None:
        batch = self.batch
        if not batch.tasks:
            return
        need = batch.state.max_length + 1
        if need > batch.pool.max_len:
            # Grow by a quarter (so copying the rows costs a bounded multiple of the final
            # pool), never past what the running rows' budgets can still use.
            cap = max(r.prompt_len + r.max_new for r in batch.tasks)
            self._reserve(max(need, min(cap, batch.pool.max_len + batch.pool.max_len // 4)))
        logits = batch.step(self.step_graphs or self.decoder)
        tokens, logprobs = self._choose(batch.tasks, logits)
        batch.keep(*select_rows(batch.tasks, [1] * len(batch.tasks), self._row_update(tokens, logprobs, events)))

    def _row_update(self, tokens: list[int], logprobs: list[float], events: list[StepEvent]) -> TaskUpdate:
        """``select_rows``' update for one chosen token per row: a request that goes on feeds it next."""

        def update(req: _Req, lo: int, hi: int) -> tuple[list[int], list[int]] | None:
            return None if self._accept(req, tokens[lo], logprobs[lo], events) else ([0], [tokens[lo]])

        return update

    def _choose(self, reqs: list[_Req], logits: torch.Tensor) -> tuple[list[int], list[float]]:
        """Each row's next token and its log-probability under the model (before filtering)."""
        logits = logits.float()
        plain = [i for i, r in enumerate(reqs) if r.params.greedy and r.params.repetition_penalty == 1.0]
        tokens = [0] * len(reqs)
        if plain:
            best = logits[plain].argmax(-1).tolist()
            for i, tok in zip(plain, best):
                tokens[i] = int(tok)
        for i, r in enumerate(reqs):
            if r.params.greedy and r.params.repetition_penalty == 1.0:
                continue
            seen = None
            if r.params.repetition_penalty != 1.0 and r.seen:
                seen = torch.tensor(sorted(r.seen), dtype=torch.long, device=logits.device)
            tokens[i] = choose_token(logits[i], seen, r.params, r.generator)
        idx = torch.tensor(tokens, device=logits.device)
        lps = torch.log_softmax(logits, -1).gather(1, idx[:, None])[:, 0].tolist()
        return tokens, lps

    def _accept(self, req: _Req, token: int, logprob: float, events: list[StepEvent]) -> bool:
        """Record a chosen token; returns True when the request finished with it."""
        self.counters.tokens_generated += 1
        if token in self.stop_ids:
            self._finish(req, events)
            return True
        req.tokens.append(token)
        req.logprob_sum += logprob
        if req.params.repetition_penalty != 1.0:
            req.seen.add(token)
        delta = req.stream.push(token)
        if delta:
            events.append(StepEvent(req.rid, "delta", delta=delta))
        if len(req.tokens) >= req.max_new:
            req.finish_reason = "length"
            self._finish(req, events)
            return True
        return False

    def _finish(self, req: _Req, events: list[StepEvent]) -> None:
        if not self._remove(req):
            return
        detected, text, delta = req.stream.finish()
        if delta:
            events.append(StepEvent(req.rid, "delta", delta=delta))
        segments = []
        if text:
            segments.append(
                Segment(
                    id=1,
                    seek=0,
                    start=0.0,
                    end=round(req.request.duration, 3),
                    text=text,
                    tokens=list(req.tokens),
                    temperature=max(req.params.temperature, 0.0),
                    avg_logprob=req.logprob_sum / max(len(req.tokens), 1),
                    compression_ratio=compression_ratio(text),
                )
            )
        output = RequestOutput(
            request_id=req.rid,
            text=text,
            segments=segments,
            language=req.opts.language or detected,
            language_probability=1.0 if req.opts.language else None,
            duration=req.request.duration,
            task=req.opts.task,
            finish_reason=req.finish_reason,
        )
        self._complete(req, output, events)


__all__ = ["LlmDecodeStrategy", "default_token_budget"]
