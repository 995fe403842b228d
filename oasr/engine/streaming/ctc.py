"""CTC searches carried across chunks.

Greedy: each chunk's best path, collapsed against the last frame of the chunk before (so
a token spanning a chunk boundary is emitted once), blanks and special ids dropped: the
same tokens as the greedy search over the whole stream's log-probs, chunk by chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from oasr.engine.streaming.search import Hypothesis, StreamSearch

__all__ = ["CtcStreamSearch"]


@dataclass
class _GreedyState:
    tokens: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0
    prev: int = -1  # best-path id of the last frame (-1: none yet)
    n_frames: int = 0
    last_emit: int = -1  # frame of the last non-blank best-path id


class CtcStreamSearch(StreamSearch):
    """Greedy CTC over chunks (the default CTC decoding)."""

    def new_state(self, options: Any) -> _GreedyState:
        beam = getattr(options, "beam_size", 1)
        if isinstance(beam, int) and beam > 1:
            raise ValueError(
                f"beam_size={beam}: CTC prefix beam search does not stream here yet; stream with beam_size=1"
            )
        return _GreedyState()

    def log_probs(self, enc: torch.Tensor) -> torch.Tensor:
        return self.model.ctc_log_probs(enc).float()

    def advance(self, states: list[_GreedyState], enc: torch.Tensor, lens: torch.Tensor) -> None:
        logp = self.log_probs(enc)
        best, ids = logp.max(dim=-1)  # (B, T)
        best, ids = best.cpu(), ids.cpu()
        for row, st in enumerate(states):
            n = int(lens[row])
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

    def partial(self, state: _GreedyState) -> Hypothesis:
        return Hypothesis(list(state.tokens), list(state.frames), list(state.probs), state.score)

    def trailing_blanks(self, state: _GreedyState) -> int:
        return state.n_frames - 1 - state.last_emit

    def frames(self, state: _GreedyState) -> int:
        return state.n_frames

    def finalize(self, state: _GreedyState) -> Hypothesis:
        return self.partial(state)

    def reset(self, state: _GreedyState) -> None:
        state.__init__()
