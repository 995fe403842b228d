"""The ``ctc`` and ``ctc_aed_rescoring`` decode strategies.

Life of a request:

1. ``prepare`` (off the engine loop): decode the audio at the front end's rate
   (``load_audio``; inputs longer than ``EngineConfig.max_audio_s`` are refused),
   cut it into windows of at most ``EngineConfig.ctc_window_s`` and featurise each
   with the checkpoint's front end (``build_frontend(feature_spec)``). Windows are
   plain cuts at the quietest 100 ms (lowest mean energy) of the last third of each
   window: no overlap and no stitching, so attention memory is bounded by the window
   and a cut almost always falls in a pause between words. Each window is decoded
   independently and its token times shifted by its start.
2. ``step``: up to ``max_batch_size`` windows, of any requests, go through one
   ``model.forward_offline`` (inference mode, the model's dtype and device). The
   batch is the oldest waiting window plus the waiting windows closest to it in
   length (from a bounded look-ahead), so padding stays small and nobody starves.
   Each row is then searched on the CPU: greedy for ``beam_size == 1``, else prefix
   beam search with the engine's n-gram LM (``EngineConfig.lm_path``) and the
   request's hotwords fused; hotwords need ``beam_size > 1``, and an LM applies
   to beam search only. A NeMo checkpoint (its ``DecodingSpec.params["ctc_decoding"]``,
   read from the archive's ``decoding`` by ``oasr.models.parakeet.convert_nemo``) is
   searched as NeMo searches it instead (``oasr.engine.decode.ctc.batched_beam``):
   ``beam_size`` > 1 is NeMo's ``beam_batch`` search (its ``beam_beta`` and
   ``beam_threshold`` from the archive), and ``beam_size`` unset is the archive's (its
   ``beam.beam_size`` under ``strategy: beam_batch``, else 1); hotwords build NeMo's
   boosting tree (``oasr.engine.decode.boosting``, its shape from the archive's
   ``boosting_tree``), fused with weight ``hotword_weight`` (NeMo's
   ``boosting_tree_alpha``; unset: the archive's when it sets one above 0) into the
   beam search, or into NeMo's ``greedy_batch`` decoding when ``beam_size`` is 1. An
   n-gram LM (``lm_path``) is refused there.
3. Results: every window yields segments, split at pauses of more than
   ``SEGMENT_GAP_S`` between words; ``segment`` events go out in time order as soon
   as all earlier windows are done, then ``finished`` with the ``RequestOutput``.
   Text comes from the token pieces (``oasr.engine.decode.words``): word
   pieces joined, a space before each word that starts with the word marker, none
   before CJK characters; blank and the checkpoint's special ids never appear.
   Every token is timed from the CTC spikes (``token_times``: from midway to the previous
   spike to midway to the next, at most 0.5 s each side; ``Segment.token_times``);
   ``word_timestamps`` times each word from its tokens' times; a word's probability is
   the mean posterior of its tokens at their spikes. ``avg_logprob`` is the window's CTC
   log-probability per encoder frame; ``temperature`` is 0 and ``no_speech_prob`` 0.
   A model that declares ``token_timing = "nemo"`` (Parakeet) is timed as NeMo's
   ``transcribe(timestamps=True)`` instead: its token offsets, words, sentence segments and text
   (``oasr.engine.decode.nemo_times``).

Options: CTC transcribes, so ``task="translate"``, ``initial_prompt``, ``prefix``,
``context``, sampling (temperatures other than 0 or the default fallback sequence,
``top_k``, ``top_p``), ``multilingual`` and ``clip_timestamps`` are refused with a
ValueError naming the option. CTC has no language control: ``language`` only labels the
output, so it must be one the checkpoint declares it transcribes (``LoadedModel.languages``:
``DecodingSpec.params["languages"]``, or its single ``"language"``; ``en`` on an English
model); a checkpoint that declares none (a WeNet or icefall one) takes no language but "auto"
/ unset, since oasr cannot tell whether it transcribes the one asked for, and a label it
cannot vouch for would be silent garbage. The output reports the request's language, or
the checkpoint's only one. The other Whisper-specific options (thresholds, suppression, penalties,
patience, ``best_of``, ...) have no effect.

``CtcRescoringStrategy`` encodes once (``encode_offline``, then ``ctc_log_probs``), runs
prefix beam search for a ``beam_size``-best and picks the winner with
``attention_rescoring`` (``ctc_weight`` / ``reverse_weight`` from the options, else
the checkpoint's ``DecodingSpec.params``, else 0.5 / 0.0).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from oasr.audio.frontends import pad_features
from oasr.engine.config import EngineConfig, StrategyOptions, TranscribeOptions
from oasr.engine.decode.base import Request, StepEvent
from oasr.engine.decode.boosting import BoostingConfig, BoostingTree
from oasr.engine.decode.ctc.batched_beam import BeamSettings, ctc_batched_beam_search, ctc_greedy_fused_search
from oasr.engine.decode.ctc.lm import ContextGraph, LmFusion, NgramLanguageModel, parse_hotwords
from oasr.engine.decode.ctc.rescoring import attention_rescoring
from oasr.engine.decode.ctc.search import (
    CtcHypothesis,
    collapse_best_path,
    ctc_greedy_search,
    ctc_prefix_beam_search,
)
from oasr.engine.decode.nemo_times import NemoTiming, best_path_run_starts, ctc_offsets
from oasr.engine.decode.windowed import Window, WindowedCounters, WindowedRequest, WindowedStrategy, plan_windows
from oasr.engine.decode.words import TokenPieces, group_words, timed_word, token_times
from oasr.engine.outputs import Word, compression_ratio
from oasr.models.base import DecodeType
from oasr.models.loaders import LoadedModel

SEGMENT_GAP_S = 1.5  # a longer silence between two words' spikes starts a new segment
PACK_MIN_PADDING = 0.1  # with sequence packing, batches padded by less than this share of frames stay padded


@dataclass
class _Req(WindowedRequest):
    beam: int = 1
    boost: BoostingTree | None = None  # a NeMo checkpoint's hotwords (NeMo's boosting tree)
    hotwords: ContextGraph | None = None
    window_texts: dict[int, str] = field(default_factory=dict)  # NeMo's text of each window (its timing)

    @property
    def greedy(self) -> bool:
        """Best-path decoding: one beam and no hotwords to boost."""
        return self.beam == 1 and self.hotwords is None and self.boost is None


Offsets = list[tuple[int, int]]
_RowDecoder = Callable[[int, _Req], tuple[CtcHypothesis, list[float], int, Offsets | None]]
"""Decodes row ``i`` of a run batch: (hypothesis, token probabilities, encoder frames, and under
NeMo's timing each token's [start, end] frames, where the search tells them)."""


@dataclass(frozen=True)
class CtcOptions(StrategyOptions):
    """The options the ``ctc`` strategy reads: greedy by default, as WeNet's ``ctc_greedy_search``
    and transformers' CTC pipelines decode; a NeMo checkpoint's unset ``beam_size`` /
    ``hotword_weight`` are its archive's (``CtcDecodeStrategy._validate_nemo``)."""

    beam_size: int = 1
    hotword_weight: float = 1.5


@dataclass(frozen=True)
class CtcRescoringOptions(CtcOptions):
    """``ctc_aed_rescoring``: WeNet's attention rescoring re-ranks a prefix-beam n-best, 10 wide
    by default as in WeNet's ``recognize.py``; the weights default to the checkpoint's."""

    beam_size: int = 10
    ctc_weight: float | None = None
    reverse_weight: float | None = None


@dataclass
class CtcCounters(WindowedCounters):
    """``WindowedCounters`` plus the batches that read only the best path and the packed ones."""

    best_path_batches: int = 0
    packed_batches: int = 0


class CtcDecodeStrategy(WindowedStrategy):
    """Offline CTC decoding (greedy / prefix beam, LM and hotword fusion) over batched windows."""

    decode_type = DecodeType.CTC
    options_class = CtcOptions
    counters_class = CtcCounters
    best_path_only = True
    """Batches of greedy rows read only the best path (rescoring needs the n-best instead)."""
    packs_rows = True

    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        super().__init__(loaded, config)
        self.blank_id = int(self.model.blank_id)
        special = loaded.tokenizer_spec.special_ids if loaded.tokenizer_spec is not None else ()
        self.skip_ids = frozenset(int(i) for i in special) - {self.blank_id}
        self.subsampling = int(self.model.encoder.subsampling_rate)
        self.frame_s = self.subsampling * float(self.frontend.frame_shift_s)
        self.params = dict(loaded.decoding_spec.params) if loaded.decoding_spec is not None else {}
        self.pieces = TokenPieces(self.tokenizer, self.skip_ids | {self.blank_id} | self._untexted_ids())
        self.nemo = self.params.get("ctc_decoding") if self.decode_type is DecodeType.CTC else None
        """NeMo's decoding of a NeMo checkpoint (see the module docstring), or None."""
        if self.nemo is not None and config.lm_path:
            raise ValueError(
                "lm_path: this NeMo checkpoint is searched as NeMo's beam_batch, whose n-gram fusion (a "
                "token-level NGPU-LM) oasr does not implement"
            )
        self.lm = (
            LmFusion(NgramLanguageModel(config.lm_path), self.pieces, config.lm_alpha, config.lm_beta)
            if config.lm_path
            else None
        )
        self.packing = self._packing(config.sequence_packing)
        self.nemo_timing = self._nemo_timing("ctc")

    def _untexted_ids(self) -> frozenset[int]:
        """Ids the search keeps that are not text of words (none here; SenseVoice's tags in ``rich_ctc``)."""
        return frozenset()

    def _nemo_timing(self, decoder: str) -> NemoTiming | None:
        """NeMo's timing rule for ``decoder`` where the model declares it (``token_timing``),
        with the checkpoint's ``decoding`` settings for this decode type."""
        if self.model.token_timing != "nemo":
            return None
        settings = (self.params.get("timestamps") or {}).get(str(self.decode_type))
        return NemoTiming.from_params(self.tokenizer, decoder, settings)

    def _packing(self, enabled: bool | None) -> bool:
        """Resolve ``EngineConfig.sequence_packing`` (None: on when the model packs)."""
        supported = self.packs_rows and self.model.supports_packing
        if enabled is None:
            return supported
        if enabled and not supported:
            raise ValueError(
                f"sequence_packing=True: {type(self.model).__name__} decoded by {str(self.decode_type)!r} "
                f"cannot encode packed rows"
            )
        return bool(enabled)

    # -- admission ---------------------------------------------------------------------

    @property
    def word_timing_modes(self) -> tuple[str, ...]:
        return ("ctc",)

    def validate(self, options: TranscribeOptions) -> TranscribeOptions:
        given = options.given()
        options = super().validate(options)
        if self.nemo is not None:
            return self._validate_nemo(options, given)
        if options.hotwords:
            if options.beam_size < 2:
                raise ValueError("hotwords need beam_size > 1 (greedy CTC decoding cannot boost phrases)")
            ContextGraph.from_text(options.hotwords, self.tokenizer, options.hotword_weight)
        return options

    def _validate_nemo(self, options: TranscribeOptions, given: dict) -> TranscribeOptions:
        """The archive's defaults where the request left ``beam_size`` / ``hotword_weight`` unset;
        hotwords checked by building their boosting tree."""
        fill = {}
        if "beam_size" not in given:
            fill["beam_size"] = int(self.nemo["beam_size"])
            if fill["beam_size"] > self.options_class.max_beam_size:
                raise ValueError(
                    f"beam_size={fill['beam_size']} (the checkpoint's decoding.beam.beam_size): the "
                    f"{str(self.decode_type)!r} decoding takes beams of at most {self.options_class.max_beam_size}"
                )
        search = self.nemo["beam" if fill.get("beam_size", options.beam_size) > 1 else "greedy"]
        if "hotword_weight" not in given and search["boosting_alpha"] > 0:
            fill["hotword_weight"] = float(search["boosting_alpha"])
        options = options.replace(**fill) if fill else options
        if options.hotwords:
            self._boosting_tree(options)
        return options

    def _boosting_tree(self, opts: TranscribeOptions) -> BoostingTree:
        """NeMo's boosting tree of a request's hotwords (the shape of its search's ``boosting_tree``)."""
        return self._phrase_tree(opts, self.nemo["beam" if opts.beam_size > 1 else "greedy"]["boosting"])

    def _phrase_tree(self, opts: TranscribeOptions, shape: Mapping[str, Any]) -> BoostingTree:
        """NeMo's boosting tree of ``opts.hotwords`` in the ``boosting_tree`` shape ``shape`` (NeMo's
        defaults for keys it lacks); a phrase with no tokens is refused."""
        return BoostingTree.from_phrases(
            parse_hotwords(opts.hotwords), self.tokenizer.encode_text, self.blank_id, BoostingConfig(**shape)
        )

    def _new_entry(self, request: Request) -> _Req:
        opts = request.options
        windows = list(request.features.windows)
        boost = self._boosting_tree(opts) if opts.hotwords and self.nemo is not None else None
        if opts.hotwords and boost is None:
            hotwords = ContextGraph.from_text(opts.hotwords, self.tokenizer, opts.hotword_weight)
        else:
            hotwords = None
        return _Req(request, opts, windows, [None] * len(windows), beam=opts.beam_size, boost=boost, hotwords=hotwords)

    def _language(self, req: _Req) -> str | None:
        return req.opts.language or (self.languages[0] if len(self.languages) == 1 else None)

    # -- the step ------------------------------------------------------------------------

    def _forward(self, feats: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, object]:
        """Log-probs (B, T', V) float32, lengths (B,), and what the row search needs besides."""
        log_probs, out_lens = self.model.forward_offline(feats, lens)
        return log_probs, out_lens, None

    def _search(self, req: _Req, log_probs: torch.Tensor, row: int, extra: object) -> CtcHypothesis:
        """The hypothesis of one row (``log_probs``: (T', V) on the CPU, valid frames)."""
        if self.nemo is not None:  # searched already, with the batch's other rows (``_nemo_rows``)
            hyp = extra[row]  # type: ignore[index]
            if isinstance(hyp, Exception):
                raise hyp
            return hyp
        if req.greedy:
            return ctc_greedy_search(log_probs, self.blank_id, self.skip_ids)
        return ctc_prefix_beam_search(
            log_probs, req.beam, self.blank_id, self.skip_ids, lm=self.lm, hotwords=req.hotwords
        )[0]

    def _run_batch(self, batch: list[tuple[_Req, int]], events: list[StepEvent]) -> None:
        decode_row = self._row_decoder(batch)
        for row, (req, index) in enumerate(batch):
            if req.done:
                continue
            try:
                hyp, probs, n_frames, offsets = decode_row(row, req)
                req.results[index] = self._window_segments(req, index, hyp, probs, n_frames, offsets)
            except Exception as e:  # a failure in one row's search fails that request alone
                self._fail(req, e, events)
                continue
            self._touched[req.rid] = req

    def _row_decoder(self, batch: list[tuple[_Req, int]]) -> _RowDecoder:
        """Run the batch's windows through the model; what decodes each of its rows."""
        rows = [r.windows[i].feats for r, i in batch]
        reqs = [r for r, _ in batch]
        greedy = self.best_path_only and all(r.greedy for r, _ in batch)
        frames = [f.shape[0] for f in rows]
        if self.packing and len(rows) * max(frames) > (1 + PACK_MIN_PADDING) * sum(frames):
            decode_row = self._packed_rows(rows, frames, greedy, reqs)
        else:
            feats, lens = pad_features(rows)
            min_frames = 4 * self.subsampling  # room for the subsampling convolutions; rows keep their lengths
            if feats.shape[1] < min_frames:
                feats = torch.nn.functional.pad(feats, (0, 0, 0, min_frames - feats.shape[1]))
            feats = feats.to(device=self.device, dtype=self.dtype)
            lens = lens.to(self.device)
            decode_row = self._best_path_rows(feats, lens) if greedy else self._searched_rows(feats, lens, reqs)
        return decode_row

    def _searched_rows(self, feats: torch.Tensor, lens: torch.Tensor, reqs: list[_Req]) -> _RowDecoder:
        """Run a padded batch; rows are searched over their (T', V) log-probs."""
        log_probs, out_lens, extra = self._forward(feats, lens)
        log_probs = log_probs.detach().to(device="cpu", dtype=torch.float32)
        n_out = [min(int(x), log_probs.shape[1]) for x in out_lens.tolist()]
        rows = [log_probs[row, :n] for row, n in enumerate(n_out)]
        return self._nemo_rows(rows, reqs) if self.nemo is not None else self._search_rows(rows, extra)

    def _best_path_rows(self, feats: torch.Tensor, lens: torch.Tensor) -> _RowDecoder:
        """Run a padded batch of greedy rows: only each frame's best symbol and its
        log-probability leave the device (``forward_offline_best_path``), not the
        (B, T', V) log-probs."""
        top, ids, out_lens = self.model.forward_offline_best_path(feats, lens)
        top, ids = top.detach().to(device="cpu", dtype=torch.float32), ids.detach().cpu()
        n_out = [min(int(x), ids.shape[1]) for x in out_lens.tolist()]
        rows = list(enumerate(n_out))
        return self._collapse_rows([top[row, :n] for row, n in rows], [ids[row, :n] for row, n in rows])

    def _packed_rows(self, rows: list[torch.Tensor], frames: list[int], greedy: bool, reqs: list[_Req]) -> _RowDecoder:
        """Run the batch's windows (``frames`` long each) packed end to end
        (``encode_offline_packed``), then the CTC head on the packed frames: the best path
        for greedy rows, else log-probs."""
        cu_seqlens = torch.tensor([0, *itertools.accumulate(frames)], dtype=torch.long)  # (B + 1,)
        feats = torch.cat(rows).to(device=self.device, dtype=self.dtype)  # (N, F)
        hidden, out_cu = self.model.encode_offline_packed(feats, cu_seqlens)
        n_out = out_cu.diff().tolist()
        head = self.model.ctc_projection
        self.counters.packed_batches += 1
        if greedy:
            top, ids = head.best_path(hidden)
            top, ids = top.detach().to(device="cpu", dtype=torch.float32), ids.detach().cpu()
            return self._collapse_rows(list(top.split(n_out)), list(ids.split(n_out)))
        log_probs = head(hidden).detach().to(device="cpu", dtype=torch.float32)
        rows = list(log_probs.split(n_out))
        return self._nemo_rows(rows, reqs) if self.nemo is not None else self._search_rows(rows, None)

    def _search_rows(self, log_probs: list[torch.Tensor], extra: object) -> _RowDecoder:
        """Rows searched over their (T', V) log-probs (on the CPU, valid frames)."""

        def decode_row(row: int, req: _Req) -> tuple[CtcHypothesis, list[float], int, Offsets | None]:
            lp = log_probs[row]
            hyp = self._search(req, lp, row, extra)
            offsets = self._greedy_offsets(req, lp)
            return hyp, lp[list(hyp.frames), list(hyp.tokens)].exp().tolist(), lp.shape[0], offsets

        return decode_row

    def _nemo_rows(self, log_probs: list[torch.Tensor], reqs: list[_Req]) -> _RowDecoder:
        """NeMo's ``beam_batch`` search (``beam_size`` > 1) or ``greedy_batch`` with the boosting
        tree of the request's hotwords, batched over the rows that share their settings (a
        request's rows share its tree); a search that fails fails its rows alone."""
        groups: dict[tuple, list[int]] = {}
        for row, req in enumerate(reqs):
            if not req.done:
                alpha = float(req.opts.hotword_weight) if req.boost is not None else 0.0
                groups.setdefault((req.beam, alpha, id(req.boost)), []).append(row)
        found: dict[int, CtcHypothesis | Exception] = {}
        beam = self.nemo["beam"]
        for (size, alpha, _), rows in groups.items():
            tree = reqs[rows[0]].boost
            lens = torch.tensor([log_probs[r].shape[0] for r in rows])
            try:
                if size == 1 and tree is None:  # a greedy row in a batch with beams: plain best path
                    hyps = [ctc_greedy_search(log_probs[r], self.blank_id, self.skip_ids) for r in rows]
                else:
                    padded = torch.nn.utils.rnn.pad_sequence([log_probs[r] for r in rows], batch_first=True)
                    if size > 1:
                        settings = BeamSettings(size, float(beam["beam_beta"]), float(beam["beam_threshold"]))
                        nbest = ctc_batched_beam_search(
                            padded, lens, self.blank_id, settings, tree, alpha, self.skip_ids
                        )
                        hyps = [row_nbest[0] for row_nbest in nbest]
                    else:
                        hyps = ctc_greedy_fused_search(padded, lens, self.blank_id, tree, alpha, self.skip_ids)
            except Exception as e:  # a failed search fails its rows alone
                hyps = [e] * len(rows)
            found.update(zip(rows, hyps))
        return self._search_rows(log_probs, found)  # ``_search`` hands each row its hypothesis

    def _greedy_offsets(self, req: _Req, log_probs: torch.Tensor) -> Offsets | None:
        """Under NeMo's timing, a greedy row's token offsets from its best path's runs (NeMo times a
        token from its run's start); None otherwise (a beam's tokens are placed at their spikes)."""
        if self.nemo_timing is None or not req.greedy:
            return None
        return self._run_offsets(log_probs.topk(1, dim=-1).indices[:, 0].tolist())

    def _run_offsets(self, best: list[int]) -> Offsets | None:
        """Under NeMo's timing, the token offsets of a best path (each frame's best label): NeMo
        times a token from the start of its run; None otherwise."""
        if self.nemo_timing is None:
            return None
        return ctc_offsets(best_path_run_starts(best, self.blank_id, self.skip_ids))

    def _collapse_rows(self, top: list[torch.Tensor], ids: list[torch.Tensor]) -> _RowDecoder:
        """Greedy rows collapsed from each frame's best symbol and its log-probability (CPU)."""
        self.counters.best_path_batches += 1

        def decode_row(row: int, req: _Req) -> tuple[CtcHypothesis, list[float], int, Offsets | None]:
            values, best = top[row].tolist(), ids[row].tolist()
            hyp = collapse_best_path(best, values, self.blank_id, self.skip_ids)
            return hyp, [math.exp(values[f]) for f in hyp.frames], len(values), self._run_offsets(best)

        return decode_row

    # -- results ------------------------------------------------------------------------

    def _window_segments(
        self, req: _Req, index: int, hyp: CtcHypothesis, probs: list[float], n_frames: int, offsets: Offsets | None
    ) -> list[dict]:
        """The segments of one decoded window (dicts; ids are given when emitted).

        Args:
            probs: each token's probability at its spike frame.
            n_frames: the window's encoder frames.
            offsets: under NeMo's timing, each token's [start, end] encoder frames (None: the
                spike frames stand for the starts of the tokens' runs).
        """
        tokens = list(hyp.tokens)
        if not tokens:
            return []
        win = req.windows[index]
        avg_logprob = float(hyp.ctc_score) / max(1, n_frames)
        seek = round(win.start_s / self.frontend.frame_shift_s)
        if self.nemo_timing is not None:
            offsets = offsets if offsets is not None else ctc_offsets(hyp.frames)
            req.window_texts[index] = self.nemo_timing.text(tokens)
            return self._nemo_segments(req, win, seek, avg_logprob, tokens, probs, offsets)
        frames = list(hyp.frames)
        spans = token_times(frames, self.frame_s, win.start_s, win.end_s)
        peaks = [win.start_s + f * self.frame_s for f in frames]
        groups: list[list] = []
        for w in group_words(tokens, self.pieces):
            if groups and peaks[w.start] - peaks[w.start - 1] <= SEGMENT_GAP_S:
                groups[-1].append(w)
            else:
                groups.append([w])
        segments = []
        for words in groups:
            lo, hi = words[0].start, words[-1].end
            timed = [t for w in words if (t := timed_word(w, tokens, spans, probs, self.tokenizer)) is not None]
            start, end, text = spans[lo][0], spans[hi - 1][1], "".join(w.word for w in timed)
            segment = self._segment(req, seek, avg_logprob, tokens, spans, lo, hi, start, end, text, timed)
            if segment is not None:
                segments.append(segment)
        return segments

    def _nemo_segments(
        self,
        req: _Req,
        win: Window,
        seek: int,
        avg_logprob: float,
        tokens: list[int],
        probs: list[float],
        offsets: Offsets,
    ) -> list[dict]:
        """A window's segments, words and token times as NeMo's ``transcribe(timestamps=True)``
        gives them (``engine/decode/nemo_times.py``), on the input's timeline."""
        timing = self.nemo_timing
        assert timing is not None
        offsets = timing.refine(tokens, offsets)
        stride, sub = float(self.frontend.frame_shift_s), self.subsampling

        def seconds(frame: int) -> float:
            # NeMo: offset * window_stride * subsampling_factor; never past the window's audio
            return min(win.start_s + frame * stride * sub, win.end_s)

        spans = [(seconds(a), seconds(b)) for a, b in offsets]
        segments = []
        for seg in timing.segments(timing.words(tokens, offsets)):
            timed = [
                Word(
                    start=round(seconds(w.start), 3),
                    end=round(seconds(w.end), 3),
                    word=" " + w.text,
                    probability=float(np.mean(probs[w.lo : w.hi])) if w.hi > w.lo else 1.0,
                )
                for w in seg.words
                if w.text.strip()
            ]
            lo, hi = seg.words[0].lo, seg.words[-1].hi
            start, end, text = seconds(seg.start), seconds(seg.end), " " + seg.text
            segment = self._segment(req, seek, avg_logprob, tokens, spans, lo, hi, start, end, text, timed)
            if segment is not None:
                segments.append(segment)
        return segments

    @staticmethod
    def _segment(
        req: _Req,
        seek: int,
        avg_logprob: float,
        tokens: list[int],
        spans: list[tuple[float, float]],
        lo: int,
        hi: int,
        start: float,
        end: float,
        text: str,
        words: list[Word],
    ) -> dict | None:
        """One segment of tokens ``[lo, hi)`` with its text and timed words (None when it has no text)."""
        if not text.strip():
            return None
        return dict(
            seek=seek,
            start=round(start, 3),
            end=round(end, 3),
            text=text,
            tokens=tokens[lo:hi],
            token_times=[(round(a, 3), round(b, 3)) for a, b in spans[lo:hi]],
            avg_logprob=avg_logprob,
            compression_ratio=compression_ratio(text),
            words=words if req.opts.word_timestamps else None,
        )

    def _request_text(self, req: _Req) -> str:
        """Under NeMo's timing, NeMo's text: each window's tokens decoded together, no space before
        punctuation (a segment's text keeps NeMo's segment text, its words joined by spaces)."""
        if self.nemo_timing is None:
            return super()._request_text(req)
        return " ".join(t for _, t in sorted(req.window_texts.items()) if t.strip()).strip()


class CtcRescoringStrategy(CtcDecodeStrategy):
    """CTC prefix beam search n-best, re-ranked by the attention decoder (WeNet's attention rescoring)."""

    decode_type = DecodeType.CTC_AED_RESCORING
    options_class = CtcRescoringOptions
    best_path_only = False
    packs_rows = False  # the attention decoder reads the encoder output as a padded batch

    def _forward(self, feats: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, object]:
        enc, enc_lens = self.model.encode_offline(feats, lens)
        return self.model.ctc_log_probs(enc), enc_lens, (enc, enc_lens.tolist())

    def _weights(self, opts: TranscribeOptions) -> tuple[float, float]:
        cw = opts.ctc_weight if opts.ctc_weight is not None else float(self.params.get("ctc_weight", 0.5))
        rw = opts.reverse_weight if opts.reverse_weight is not None else float(self.params.get("reverse_weight", 0.0))
        return float(cw), float(rw)

    def _search(self, req: _Req, log_probs: torch.Tensor, row: int, extra: object) -> CtcHypothesis:
        enc, enc_lens = extra  # type: ignore[misc]
        nbest = ctc_prefix_beam_search(
            log_probs, req.beam, self.blank_id, self.skip_ids, lm=self.lm, hotwords=req.hotwords
        )
        n = min(int(enc_lens[row]), enc.shape[1])
        ctc_weight, reverse_weight = self._weights(req.opts)
        return attention_rescoring(self.model.decoder, enc[row : row + 1, :n], n, nbest, ctc_weight, reverse_weight)


__all__ = ["CtcDecodeStrategy", "CtcOptions", "CtcRescoringOptions", "CtcRescoringStrategy", "plan_windows"]
