"""Transducer searches carried across chunks, batched across streams.

A stream's search state holds what its next chunk needs and nothing else: the predictor's
state (a label window, or an LSTM's) with its projected output, and the hypothesis so far.
Each ``advance`` runs every stream's chunk in one batch per search setting (the joiner once
per step for all of them), so a stream's result is the same as the search over its whole
encoder output at once, and does not depend on which streams shared its steps:

* greedy (``beam_size`` 1): icefall's ``greedy_search``, at most ``max_sym_per_frame``
  symbols per frame (None: the model's own rule, 1 for icefall, as its streaming decode
  hard-codes; ``config.max_symbols_per_step`` for a NeMo checkpoint), ``blank_penalty``
  off the blank logit. A TDT model (``durations``) moves each row by its predicted duration;
  a jump past the chunk's end is carried into the next chunk.
* modified beam search (``beam_size`` k > 1, icefall's ``modified_beam_search``): one
  symbol per frame, the k best extensions of a stream's hypotheses kept at every frame and
  merged by label sequence, the result the best by score per label. The model runs it
  (``start_beams`` / ``advance_beams``: icefall's transducer shares its offline beam loop);
  a model without them, or with a recurrent predictor, streams greedily only.

Every search starts from the predictor's own start state (``init_state``: icefall's
``[-1] * (context_size - 1) + [blank]``), and again after an endpoint. Emission frames count
from the segment's start; ``trailing_blanks`` is the frames since the best hypothesis's
last label.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from oasr.engine.decode.words import text_labels
from oasr.engine.streaming.search import Hypothesis, StreamSearch
from oasr.models.decoders.base import greedy_advance

__all__ = ["TransducerStreamSearch"]


@dataclass
class _Greedy:
    """A stream's greedy search: predictor state (batch of one) and its projected output."""

    state: Any
    pred_proj: torch.Tensor  # (1, J)
    max_sym: int
    blank_penalty: float
    tokens: list[int] = field(default_factory=list)  # every label, special ids included
    frames: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    score: float = 0.0  # log-probability of every chosen symbol, blanks included
    n_frames: int = 0
    skip: int = 0  # TDT: frames of the next chunk a duration already jumped over


@dataclass
class _Beam:
    """A stream's modified beam search (one row of a ``BeamSet``)."""

    beams: Any  # the model's beam set (``start_beams``): cat / split / best
    blank_penalty: float
    n_frames: int = 0


class TransducerStreamSearch(StreamSearch):
    """Greedy and modified beam transducer search over chunks, for any transducer whose
    predictor and joiner follow ``oasr.models.decoders.base`` (``init_state`` / ``predict`` /
    ``advance`` / ``stack_states`` / ``unstack_states``; ``encoder_proj`` / ``decoder_proj``
    / ``join``)."""

    def __init__(self, model: Any, blank_id: int, skip_ids: frozenset[int], params: dict[str, Any]) -> None:
        super().__init__(model, blank_id, skip_ids, params)
        self.predictor, self.joiner = model.predictor, model.joiner
        durations = getattr(model, "durations", None)
        self.durations = tuple(durations) if durations else None
        # The logits past the vocabulary are a TDT joiner's duration logits.
        self.vocab = getattr(self.joiner, "vocab_size", None)
        self.context = int(self.predictor.init_state(1, "cpu").shape[1]) if self.predictor.label_window_state else 0

    # -- states -----------------------------------------------------------------------------

    def new_state(self, options: Any) -> _Greedy | _Beam:
        if getattr(options, "hotwords", None):
            raise ValueError("hotwords do not stream here yet: transcribe offline to boost phrases")
        beam = int(getattr(options, "beam_size", 1) or 1)
        penalty = float(getattr(options, "blank_penalty", 0.0) or 0.0)
        device = self.model.device
        if beam > 1:
            if self.durations is not None:
                raise ValueError(f"beam_size={beam}: a TDT model decodes greedily only; stream with beam_size=1")
            if not self.predictor.label_window_state or not hasattr(self.model, "start_beams"):
                raise ValueError(
                    f"beam_size={beam}: {type(self.model).__name__} streams greedily only (its predictor "
                    f"keeps a recurrent state, or it has no streaming beam search); stream with beam_size=1"
                )
            return _Beam(self.model.start_beams(1, beam), penalty)
        max_sym = getattr(options, "max_sym_per_frame", None) or self._default_max_sym()
        if max_sym < 1:
            raise ValueError(f"max_sym_per_frame must be at least 1, got {max_sym}")
        state = self.predictor.init_state(1, device)
        pred_proj = self.joiner.decoder_proj(self.predictor.predict(state))
        return _Greedy(state, pred_proj, int(max_sym), penalty)

    def _default_max_sym(self) -> int:
        """The model's own symbols-per-frame rule: a NeMo config's ``max_symbols_per_step``,
        else icefall's 1."""
        return int(getattr(getattr(self.model, "config", None), "max_symbols_per_step", 1))

    def reset(self, state: _Greedy | _Beam) -> None:
        if isinstance(state, _Beam):
            state.beams, state.n_frames = self.model.start_beams(1, state.beams.k), 0
            return
        fresh_state = self.predictor.init_state(1, self.model.device)
        state.__init__(
            fresh_state,
            self.joiner.decoder_proj(self.predictor.predict(fresh_state)),
            state.max_sym,
            state.blank_penalty,
        )

    # -- the step ---------------------------------------------------------------------------

    @torch.inference_mode()
    def advance(self, states: list[_Greedy | _Beam], enc: torch.Tensor, lens: torch.Tensor) -> None:
        enc_proj = self.joiner.encoder_proj(enc)  # (B, T, J)
        n = [int(x) for x in lens.tolist()]
        groups: dict[tuple, list[int]] = {}
        for row, st in enumerate(states):
            key = (
                ("beam", st.beams.k, st.blank_penalty)
                if isinstance(st, _Beam)
                else ("greedy", st.max_sym, st.blank_penalty)
            )
            groups.setdefault(key, []).append(row)
        for key, rows in groups.items():
            index = torch.tensor(rows, device=enc_proj.device)
            part, part_lens = enc_proj.index_select(0, index), [n[r] for r in rows]
            chosen = [states[r] for r in rows]
            if key[0] == "beam":
                self._advance_beam(chosen, part, part_lens)
            else:
                self._advance_greedy(chosen, part, part_lens)
        for st, frames in zip(states, n, strict=True):
            st.n_frames += frames

    def _advance_beam(self, states: list[_Beam], enc_proj: torch.Tensor, lens: list[int]) -> None:
        beams = type(states[0].beams).cat([st.beams for st in states])
        self.model.advance_beams(
            beams, enc_proj, lens, frame0=[st.n_frames for st in states], blank_penalty=states[0].blank_penalty
        )
        for st, row in zip(states, beams.split(), strict=True):
            st.beams = row

    def _advance_greedy(self, states: list[_Greedy], enc_proj: torch.Tensor, lens: list[int]) -> None:
        """Every row from its carried frame to its chunk's end, all rows one joiner call a step
        (``oasr.models.transducer.search.greedy_search`` / ``oasr.models.nemotron.search``)."""
        predictor, joiner, blank = self.predictor, self.joiner, self.blank_id
        device = enc_proj.device
        b, t_max, _ = enc_proj.shape
        max_sym, penalty = states[0].max_sym, states[0].blank_penalty
        rows = torch.arange(b, device=device)
        n = torch.tensor(lens, dtype=torch.long, device=device)
        t = torch.tensor([st.skip for st in states], dtype=torch.long, device=device)
        state = predictor.stack_states([st.state for st in states])
        pred_proj = torch.cat([st.pred_proj for st in states])
        dur = torch.tensor(self.durations, device=device) if self.durations is not None else None
        symbols = torch.zeros(b, dtype=torch.long, device=device)  # symbols emitted on the current frame
        steps = []
        active = t < n
        while bool(active.any()):
            logits = joiner.join(enc_proj[rows, t.clamp(max=max(t_max - 1, 0))], pred_proj)  # (B, V [+ durations])
            if penalty:
                logits[:, blank] -= penalty
            token_logits = logits if self.vocab is None else logits[:, : self.vocab]
            best = token_logits.argmax(dim=-1)
            logp = token_logits.float().log_softmax(dim=-1).gather(1, best[:, None])[:, 0]
            is_blank = best == blank
            frame_durations = None if dur is None else dur[logits[:, self.vocab :].argmax(dim=-1)]
            step, symbols = greedy_advance(is_blank, symbols, max_sym, frame_durations)
            emit = active & ~is_blank
            steps.append((emit, best, t.clone(), logp, active))
            t = t + torch.where(active, step, torch.zeros_like(step))
            if bool(emit.any()):
                state = predictor.advance(state, best, emit)
                pred_proj = torch.where(emit[:, None], joiner.decoder_proj(predictor.predict(state)), pred_proj)
            active = t < n
        skips = (t - n).clamp(min=0).tolist()
        for i, (st, row_state) in enumerate(zip(states, predictor.unstack_states(state), strict=True)):
            st.state, st.pred_proj, st.skip = row_state, pred_proj[i : i + 1], skips[i]
        if not steps:
            return
        emit, best, frame, logp, active = (torch.stack(x, dim=1).cpu() for x in zip(*steps))  # each (B, steps)
        scores = (logp.double() * active).sum(dim=1).tolist()
        for i, st in enumerate(states):
            keep = emit[i]
            st.tokens += best[i][keep].tolist()
            st.frames += [st.n_frames + f for f in frame[i][keep].tolist()]
            st.logprobs += logp[i][keep].tolist()
            st.score += scores[i]

    # -- results ----------------------------------------------------------------------------

    def partial(self, state: _Greedy | _Beam) -> Hypothesis:
        if isinstance(state, _Beam):
            labels, frames, score = state.beams.best(self.context)[0]
            tokens, frames, _ = text_labels(self.skip_ids, labels, frames)
            return Hypothesis(tokens, frames, [], float(score))
        tokens, frames, probs = text_labels(
            self.skip_ids, state.tokens, state.frames, [math.exp(x) for x in state.logprobs]
        )
        return Hypothesis(tokens, frames, probs or [], state.score)

    def trailing_blanks(self, state: _Greedy | _Beam) -> int:
        if isinstance(state, _Beam):
            frames = state.beams.best(self.context)[0][1]
        else:
            frames = state.frames
        return state.n_frames - 1 - (frames[-1] if frames else -1)

    def frames(self, state: _Greedy | _Beam) -> int:
        return state.n_frames

    def finalize(self, state: _Greedy | _Beam) -> Hypothesis:
        return self.partial(state)
