"""The ``transducer`` decode strategy: frame-synchronous transducer search over batched windows.

A transducer request lives exactly as a CTC one does (``oasr.engine.decode.ctc.strategy``):
``prepare`` decodes the audio and cuts it into windows of at most ``ctc_window_s``; each
``step`` encodes up to ``max_batch_size`` windows of any requests in one padded
``encode_offline``; the rows are searched; segments, token and word times come from the
emission frames through the same frame-synchronous timing CTC uses (NeMo's, a label over
``[t, t + 1]`` or its TDT duration, where the model declares ``token_timing = "nemo"``), and go
out in time order. What differs is the search, which the model runs over the whole batch at once.

The search is the request's ``search`` and ``beam_size`` (``TransducerOptions``); left unset,
the checkpoint's (``DecodingSpec.params``: ``search``, ``beam_size`` and the ``beam`` settings a
NeMo archive's ``decoding`` section carries), greedy where it names none; a ``beam_size`` alone
picks greedy for 1, else the checkpoint's beam search or the model's first. A model declares the
searches it runs (``transducer_searches``; icefall's: greedy, and modified beam search over a
label window):

* ``greedy`` (icefall's ``greedy_search``, NeMo's greedy decoding): batched over every row, at
  most ``max_sym_per_frame`` symbols per frame (None: the model's own default, icefall's 1 or
  the NeMo checkpoint's ``max_symbols_per_step``) and ``blank_penalty`` subtracted from the blank
  logit; a TDT model advances each row by its predicted duration;
* ``modified_beam`` (icefall's modified beam search, beam k > 1): one symbol per frame,
  hypotheses merged by label sequence, batched across requests; hotwords bias it through a
  context graph (``hotwords`` / ``hotword_weight``) as icefall and sherpa-onnx do;
* ``malsd`` (NeMo's ``malsd_batch``, RNN-T and TDT): batched over rows and beams, the labels
  per frame bounded by ``max_sym_per_frame`` (None: the archive's ``decoding.beam.max_symbols``),
  the answer chosen with NeMo's ``score_norm``, hotwords boosted;
* ``maes`` and ``beam`` (NeMo's modified adaptive expansion search, with the archive's
  ``maes_*`` settings, and its default beam search; RNN-T and TDT, beam > 1): row by row, as
  NeMo runs them.

Hotwords are boosted by ``modified_beam`` (icefall's context graph, ``hotword_weight`` per token)
and by NeMo's ``greedy`` and ``malsd`` (NeMo's boosting tree, ``oasr.engine.decode.boosting``, in the shape of the
archive's ``decoding.beam.boosting_tree``, fused with weight ``hotword_weight``: NeMo's
``boosting_tree_alpha``, unset: the archive's where above 0, else 1.5; its ``pruning_mode`` and
``blank_lm_score_mode``); refused with the other beam searches, as NeMo refuses them.

The model answers through the contract: ``encode_offline``, ``predictor.label_window_state``
and ``transducer_search(enc, enc_lens, *, beam_size, max_sym_per_frame, blank_penalty,
context_graph[, search, params])`` (``search`` and the checkpoint's ``params`` where the model
declares ``transducer_searches``) returning per-row tokens, emission frames, and (greedy) each token's
log-probability. A model whose ``encoder_options`` include ``language`` conditions each row
on its request's language (resolved by the base ``validate`` to an entry of
``model.languages``; None: the model's default prompt): ``prompt_ids(languages, batch_size,
device)`` maps them and ``encode_offline`` takes them as its third argument.

Labels the checkpoint declares special (``TokenizerSpec.special_ids``: a language tag such as
Nemotron's ``<en-US>``) are dropped with their frames before text and times are built
(``words.text_labels``, which the streaming search uses too), so an offline transcript and a
stream of the same audio give the same text.

A word's probability is the mean probability of its tokens where the search reports them
(greedy); beam search reports the best hypothesis's score, and each of its tokens is given
the hypothesis's mean per-frame probability. ``avg_logprob`` is the hypothesis's
log-probability per encoder frame (greedy: of the chosen symbols, blanks included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from oasr.audio.frontends import pad_features
from oasr.engine.config import EngineConfig, StrategyOptions, TranscribeOptions
from oasr.engine.decode.base import Request, StepEvent
from oasr.engine.decode.boosting import BoostingTree
from oasr.engine.decode.ctc.search import CtcHypothesis
from oasr.engine.decode.ctc.strategy import CtcDecodeStrategy, _Req
from oasr.engine.decode.nemo_times import transducer_offsets
from oasr.engine.decode.words import text_labels
from oasr.models.base import DecodeType
from oasr.models.loaders import LoadedModel


@dataclass(frozen=True)
class TransducerOptions(StrategyOptions):
    """The options the ``transducer`` strategy reads. ``search`` and ``beam_size`` None are the
    checkpoint's decoding (a NeMo archive's ``decoding`` section; greedy where it names none, as
    icefall's and NeMo's own default); ``max_sym_per_frame`` None is the model's own rule."""

    beam_size: int | None = None
    search: str | None = None
    hotword_weight: float = 1.5
    max_sym_per_frame: int | None = None
    blank_penalty: float = 0.0


DEFAULT_BEAM = 4  # icefall's --beam-size and NeMo's BeamRNNTInferConfig default, where a checkpoint names none
_TAKES_MAX_SYM = ("greedy", "malsd")  # the searches with a labels-per-frame bound
_BOOSTS = ("modified_beam", "malsd")  # the searches that boost hotwords


class TransducerDecodeStrategy(CtcDecodeStrategy):
    """Batched greedy / beam transducer decoding (see the module notes)."""

    decode_type = DecodeType.TRANSDUCER
    options_class = TransducerOptions
    best_path_only = False
    packs_rows = False  # the search reads a padded (B, T', D) encoder output

    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        if config.lm_path:
            raise ValueError("lm_path: n-gram LM fusion applies to CTC beam search, not to the transducer strategy")
        super().__init__(loaded, config)
        self.label_window = bool(getattr(self.model.predictor, "label_window_state", False))
        # The searches the model runs: declared (``transducer_searches``, which ``transducer_search``
        # then takes by name), else greedy and, over a label window, icefall's modified beam search.
        declared = tuple(getattr(self.model, "transducer_searches", ()))
        self.named_search = bool(declared)
        self.searches = declared or (("greedy", "modified_beam") if self.label_window else ("greedy",))
        self.default_search = str(self.params.get("search", "greedy"))
        self.default_beam = int(self.params.get("beam_size", DEFAULT_BEAM))
        self.search_params = dict(self.params.get("beam") or {})
        # NeMo's timing (a model's ``token_timing``): a TDT label spans its predicted duration.
        self.tdt_timing = self.nemo_timing is not None and bool(self.params.get("durations"))
        if self.nemo_timing is not None:
            self.nemo_timing = self._nemo_timing("tdt" if self.tdt_timing else "rnnt")
        self.prompted = "language" in self.model.encoder_options
        # Windows per encoder pass (the search still batches every row). On a CPU one window
        # already fills the GEMMs and a padded batch is slower (icefall Zipformer-medium, 1
        # thread, the 8 longest of 16 clips of 5-20 s: 12.3 s padded against 8.0 s one at a time).
        self.encoder_batch = config.encoder_batch_size or (config.max_batch_size if self.device.type == "cuda" else 1)

    def validate(self, options: TranscribeOptions) -> TranscribeOptions:
        what = f"{type(self.model).__name__} decoded by 'transducer'"
        given = options.given()
        options = self.options_class.resolve(options, str(self.decode_type))
        search, beam = self._search_and_beam(options.search, options.beam_size, what)
        if options.max_sym_per_frame is not None and search not in _TAKES_MAX_SYM:
            raise ValueError(
                f"max_sym_per_frame applies to greedy search (and NeMo's malsd); {search!r} search emits "
                f"{'one per frame' if search == 'modified_beam' else 'by its own rule'}"
            )
        boosts = (*_BOOSTS, "greedy") if self.named_search else _BOOSTS
        if options.hotwords and search not in boosts:
            raise ValueError(
                "hotwords: phrase boosting is implemented for icefall's modified beam search and NeMo's greedy and "
                f"malsd, not for search={search!r}"
            )
        options = options.replace(search=search, beam_size=beam)
        if self.named_search and "hotword_weight" not in given and self.search_params.get("boosting_alpha", 0) > 0:
            options = options.replace(hotword_weight=float(self.search_params["boosting_alpha"]))
        if not (self.named_search and options.hotwords):
            return super().validate(options)
        # NeMo's boosting tree, not the CTC base's context graph: built here, refused if a phrase has no tokens.
        options = super().validate(options.replace(hotwords=None)).replace(hotwords=options.hotwords)
        self._nemo_tree(options)
        return options

    def _nemo_tree(self, opts: TranscribeOptions) -> BoostingTree:
        """NeMo's boosting tree of a request's hotwords, in the shape of the archive's
        ``decoding.beam.boosting_tree`` (NeMo's defaults where it has none)."""
        return self._phrase_tree(opts, self.search_params.get("boosting", {}))

    def _new_entry(self, request: Request) -> _Req:
        opts = request.options
        if not (self.named_search and opts.hotwords):
            return super()._new_entry(request)
        windows = list(request.features.windows)
        return _Req(request, opts, windows, [None] * len(windows), beam=opts.beam_size, hotwords=self._nemo_tree(opts))

    def _search_and_beam(self, search: str | None, beam: int | None, what: str) -> tuple[str, int]:
        """The search and beam of a request: what it names, else the checkpoint's (see the options)."""
        beams = [s for s in self.searches if s != "greedy"]
        if search is None:
            if beam is None:
                search = self.default_search
            elif beam == 1:
                search = "greedy"
            elif self.default_search != "greedy":
                search = self.default_search
            elif beams:
                search = beams[0]
            else:
                raise ValueError(
                    f"beam_size={beam}: {what} has a recurrent predictor, which beam search cannot reorder; "
                    f"use beam_size=1 (greedy)"
                )
        if search not in self.searches:
            raise ValueError(f"search={search!r}: {what} runs the searches {list(self.searches)}")
        if beam is None:
            beam = 1 if search == "greedy" else self.default_beam
        if search == "greedy" and beam != 1:
            raise ValueError(f"beam_size={beam} with search='greedy': greedy search keeps one hypothesis")
        if search in ("modified_beam", "beam", "maes") and beam < 2:
            raise ValueError(f"search={search!r} needs beam_size > 1 (beam_size 1 is greedy search)")
        return search, beam

    def _run_batch(self, batch: list[tuple[_Req, int]], events: list[StepEvent]) -> None:
        feats, lens = pad_features([r.windows[i].feats for r, i in batch])
        min_frames = 4 * self.subsampling  # room for the subsampling convolutions; rows keep their lengths
        if feats.shape[1] < min_frames:
            feats = torch.nn.functional.pad(feats, (0, 0, 0, min_frames - feats.shape[1]))
        feats = feats.to(device=self.device, dtype=self.dtype)
        lens = lens.to(self.device)
        prompts = None
        if self.prompted:
            prompts = self.model.prompt_ids([r.opts.language for r, _ in batch], len(batch), self.device)
        enc, enc_lens = self._encode(feats, lens, prompts, min_frames)
        n_frames = [min(int(n), enc.shape[1]) for n in enc_lens.tolist()]
        # Rows searched together share their search settings.
        groups: dict[tuple, list[int]] = {}
        for row, (req, _) in enumerate(batch):
            opts = req.opts
            key = (opts.search, req.beam, opts.max_sym_per_frame, opts.blank_penalty, req.hotwords is not None)
            groups.setdefault(key, []).append(row)
        for (search, beam, max_sym, penalty, biased), rows in groups.items():
            try:
                if biased:  # each request its own phrases: one row at a time
                    parts = [
                        (self._search(enc, enc_lens, [r], search, beam, max_sym, penalty, batch[r][0]), 0) for r in rows
                    ]
                else:
                    res = self._search(enc, enc_lens, rows, search, beam, max_sym, penalty, None)
                    parts = [(res, j) for j in range(len(rows))]
                found = [
                    (
                        res.tokens[j],
                        res.frames[j],
                        _nth(res.token_logprobs, j),
                        _nth(res.scores, j),
                        _nth(res.token_durations, j) if self.tdt_timing else None,
                    )
                    for res, j in parts
                ]
            except Exception as e:  # a failing search fails the requests of its rows alone
                for r in rows:
                    self._fail(batch[r][0], e, events)
                continue
            for r, (tokens, frames, logprobs, score, durations) in zip(rows, found):
                req, index = batch[r]
                if req.done:
                    continue
                n = n_frames[r]
                if logprobs is not None:
                    probs = [math.exp(x) for x in logprobs]
                else:
                    probs = [math.exp((score or 0.0) / max(1, n))] * len(tokens)
                offsets = None
                if self.nemo_timing is not None:  # NeMo's [t, t + 1] (RNN-T) or [t, t + duration] (TDT)
                    spans = transducer_offsets(frames, durations if self.tdt_timing else None)
                    offsets = [o for tok, o in zip(tokens, spans) if int(tok) not in self.skip_ids]
                tokens, frames, probs = text_labels(self.skip_ids, tokens, frames, probs)
                hyp = CtcHypothesis(tuple(tokens), tuple(frames), float(score or 0.0))
                try:
                    req.results[index] = self._window_segments(req, index, hyp, probs, n, offsets)
                except Exception as e:
                    self._fail(req, e, events)
                    continue
                self._touched[req.rid] = req

    def _encode(self, feats, lens, prompts, min_frames: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder over the rows in passes of ``encoder_batch``, each cut to its longest row,
        padded back together into one (B, T', D) for the search."""

        def run(x, n, p):
            return self.model.encode_offline(x, n) if p is None else self.model.encode_offline(x, n, p)

        if self.encoder_batch >= feats.shape[0]:
            return run(feats, lens, prompts)
        outs, out_lens = [], []
        for at in range(0, feats.shape[0], self.encoder_batch):
            part = slice(at, at + self.encoder_batch)
            width = max(int(lens[part].max()), min_frames)
            enc, enc_lens = run(feats[part, :width], lens[part], None if prompts is None else prompts[part])
            outs.append(enc)
            out_lens.append(enc_lens)
        t = max(e.shape[1] for e in outs)
        enc = torch.cat([torch.nn.functional.pad(e, (0, 0, 0, t - e.shape[1])) for e in outs])
        return enc, torch.cat(out_lens)

    def _search(self, enc, enc_lens, rows: list[int], search: str, beam: int, max_sym, penalty: float, biased=None):
        """The model's search over ``rows`` of the encoder output (``biased``: the one request whose
        hotwords bias them)."""
        idx = torch.tensor(rows, device=enc.device)
        hotwords = biased.hotwords if biased is not None else None
        params = self.search_params
        if biased is not None and self.named_search:
            params = {**params, "boosting_alpha": float(biased.opts.hotword_weight)}
        named = {"search": search, "params": params} if self.named_search else {}
        return self.model.transducer_search(
            enc.index_select(0, idx),
            enc_lens.index_select(0, idx),
            beam_size=beam,
            max_sym_per_frame=max_sym,
            blank_penalty=penalty,
            context_graph=hotwords,
            **named,
        )


def _nth(values, j: int):
    return values[j] if values else None


__all__ = ["TransducerDecodeStrategy"]
