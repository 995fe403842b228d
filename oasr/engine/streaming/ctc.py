"""CTC searches carried across chunks.

- Greedy (``beam_size`` 1): each chunk's best path, collapsed against the last frame of the
  chunk before (so a token spanning a chunk boundary is emitted once), blanks and special
  ids dropped: the same tokens as the greedy search over the whole stream's log-probs.
- Prefix beam (``beam_size`` > 1): one ``CtcPrefixBeam`` per segment, fed each chunk's
  log-probs; the beam is resumed frame by frame, so the segment's n-best is exactly the
  prefix beam search over its concatenated log-probs (WeNet's streaming CTC prefix beam).
- Attention rescoring (``ctc_aed_rescoring``, WeNet's two-pass decoding): the prefix beam
  as above, and the segment's encoder output kept; at an endpoint or at the end of the
  stream the n-best is re-ranked by the attention decoder over that output
  (``attention_rescoring``, ``ctc_weight`` / ``reverse_weight`` from the options, else the
  checkpoint's decoding params, else 0.5 / 0.0, as the offline strategy).

Hotwords and the engine's n-gram LM are offline-only: a stream refuses hotwords, and the
beam is never fused with the LM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from oasr.engine.decode.ctc.rescoring import attention_rescoring
from oasr.engine.decode.ctc.search import CtcHypothesis, CtcPrefixBeam
from oasr.engine.streaming.search import Hypothesis, StreamSearch

__all__ = ["CtcRescoringStreamSearch", "CtcStreamSearch"]


@dataclass
class _GreedyState:
    tokens: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0
    prev: int = -1  # best-path id of the last frame (-1: none yet)
    n_frames: int = 0
    last_emit: int = -1  # frame of the last non-blank best-path id


@dataclass
class _BeamState:
    """A segment's prefix beam, and (rescoring) its encoder output and weights."""

    beam: CtcPrefixBeam
    enc: list[torch.Tensor] = field(default_factory=list)  # (T_i, D) per chunk, rescoring only
    ctc_weight: float = 0.0
    reverse_weight: float = 0.0


def _hypothesis(h: CtcHypothesis) -> Hypothesis:
    return Hypothesis(list(h.tokens), list(h.frames), [], float(h.score))


class CtcStreamSearch(StreamSearch):
    """Greedy CTC (``beam_size`` 1, the default) or prefix beam search over chunks."""

    keeps_encoder_output = False  # a beam state also keeps the segment's encoder output (rescoring)

    def new_state(self, options: Any) -> _GreedyState | _BeamState:
        if getattr(options, "hotwords", None):
            raise ValueError("hotwords: CTC hotword boosting does not stream; transcribe the audio offline to use them")
        beam = int(getattr(options, "beam_size", 1) or 1)
        if beam > 1:
            return _BeamState(self._new_beam(beam))
        return _GreedyState()

    def _new_beam(self, beam_size: int) -> CtcPrefixBeam:
        return CtcPrefixBeam(beam_size, self.blank_id, self.skip_ids)

    def log_probs(self, enc: torch.Tensor) -> torch.Tensor:
        return self.model.ctc_log_probs(enc).float()

    def advance(self, states: list[Any], enc: torch.Tensor, lens: torch.Tensor) -> None:
        logp = self.log_probs(enc)  # (B, T, V)
        if any(isinstance(st, _GreedyState) for st in states):
            best, ids = logp.max(dim=-1)  # (B, T)
            best, ids = best.cpu(), ids.cpu()
        if any(isinstance(st, _BeamState) for st in states):
            logp_cpu = logp.cpu()  # one copy for all the beams
        lens = lens.cpu()
        for row, st in enumerate(states):
            n = int(lens[row])
            if isinstance(st, _BeamState):
                st.beam.feed(logp_cpu[row, :n])
                if self.keeps_encoder_output:
                    st.enc.append(enc[row, :n].clone())
                continue
            for t in range(n):
                token = int(ids[row, t])
                st.score += float(best[row, t])
                if token != self.blank_id:
                    st.last_emit = st.n_frames + t
                if token != st.prev and token != self.blank_id and token not in self.skip_ids:
                    st.tokens.append(token)
                    st.frames.append(st.n_frames + t)
                    st.probs.append(float(best[row, t].exp()))
                st.prev = token
            st.n_frames += n

    def partial(self, state: _GreedyState | _BeamState) -> Hypothesis:
        if isinstance(state, _BeamState):
            return _hypothesis(state.beam.nbest()[0])
        return Hypothesis(list(state.tokens), list(state.frames), list(state.probs), state.score)

    def trailing_blanks(self, state: _GreedyState | _BeamState) -> int:
        if isinstance(state, _BeamState):
            frames = state.beam.nbest()[0].frames
            return state.beam.frames - 1 - (frames[-1] if frames else -1)
        return state.n_frames - 1 - state.last_emit

    def frames(self, state: _GreedyState | _BeamState) -> int:
        return state.beam.frames if isinstance(state, _BeamState) else state.n_frames

    def finalize(self, state: _GreedyState | _BeamState) -> Hypothesis:
        return self.partial(state)

    def reset(self, state: _GreedyState | _BeamState) -> None:
        if isinstance(state, _BeamState):
            state.beam = self._new_beam(state.beam.beam_size)
            state.enc.clear()
        else:
            state.__init__()


class CtcRescoringStreamSearch(CtcStreamSearch):
    """WeNet's two-pass streaming: CTC prefix beam over chunks, attention rescoring of the
    segment's n-best at an endpoint or at the end of the stream."""

    keeps_encoder_output = True

    def new_state(self, options: Any) -> _BeamState:
        if getattr(options, "hotwords", None):
            raise ValueError("hotwords: CTC hotword boosting does not stream; transcribe the audio offline to use them")
        if getattr(self.model, "decoder", None) is None:
            raise ValueError(f"{type(self.model).__name__} has no attention decoder to rescore with")
        cw = getattr(options, "ctc_weight", None)
        rw = getattr(options, "reverse_weight", None)
        return _BeamState(
            self._new_beam(int(getattr(options, "beam_size", 1) or 1)),
            ctc_weight=float(cw if cw is not None else self.params.get("ctc_weight", 0.5)),
            reverse_weight=float(rw if rw is not None else self.params.get("reverse_weight", 0.0)),
        )

    def finalize(self, state: _BeamState) -> Hypothesis:
        if state.beam.frames == 0:
            return Hypothesis()  # nothing encoded in this segment
        nbest = state.beam.nbest()
        enc = torch.cat(state.enc)[None]  # (1, T', D): the segment's encoder output
        best = attention_rescoring(self.model.decoder, enc, enc.shape[1], nbest, state.ctc_weight, state.reverse_weight)
        return _hypothesis(best)
