"""The ``llm`` stream search: a speech model whose encoder streams and whose decoder reads the
whole encoder output (Moonshine Streaming) decodes, after every chunk, greedily again over all
the encoder frames of the segment so far.

The partial after a chunk is that decode; the final (at the end of the stream, or at an
endpoint) is the same decode over all the segment's frames, which for a whole stream is the
offline decode of the whole clip (the streaming encoder's frames are the offline encoder's).
The decoder's prompt, prefill and steps are the model's ``llm`` surface (``prompt_ids``,
``embed_prompt``, ``decoder.prefill`` / ``step``, ``stop_ids``); the budget is the request's
``max_new_tokens``, else the model's ``default_token_budget`` of the segment's seconds. An
autoregressive decoder emits no blanks: ``trailing_blanks`` is 0 (use ``endpoint_vad`` to cut a
stream into segments). Tokens are not timed: each is put at the segment's last frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from oasr.engine.streaming.search import Hypothesis, StreamSearch

__all__ = ["RedecodeStreamSearch"]


@dataclass
class _State:
    max_new_tokens: int | None
    memory: list[torch.Tensor] = field(default_factory=list)  # (n, D) encoder frames, per chunk
    frames: int = 0
    hyp: Hypothesis = field(default_factory=Hypothesis)


class RedecodeStreamSearch(StreamSearch):
    def new_state(self, options) -> _State:
        return _State(getattr(options, "max_new_tokens", None))

    def advance(self, states: list[_State], enc: torch.Tensor, lens: torch.Tensor) -> None:
        for i, st in enumerate(states):
            n = int(lens[i])
            if n == 0:
                continue
            st.memory.append(enc[i, :n])
            st.frames += n
            st.hyp = self._decode(st)

    def partial(self, state: _State) -> Hypothesis:
        return state.hyp

    def trailing_blanks(self, state: _State) -> int:
        return 0

    def frames(self, state: _State) -> int:
        return state.frames

    def finalize(self, state: _State) -> Hypothesis:
        return self._decode(state) if state.frames else Hypothesis()

    def reset(self, state: _State) -> None:
        state.memory, state.frames, state.hyp = [], 0, Hypothesis()

    def _budget(self, state: _State) -> int:
        if state.max_new_tokens is not None:
            return int(state.max_new_tokens)
        if self.params.get("max_new_tokens"):
            return int(self.params["max_new_tokens"])
        enc = self.model.encoder
        seconds = state.frames * enc.subsampling_rate / float(getattr(enc.cfg, "sample_rate", 16000))
        return int(self.model.default_token_budget(seconds))

    def _decode(self, state: _State) -> Hypothesis:
        """Greedy over the segment's frames, as the ``llm`` strategy decodes a clip."""
        model, dec = self.model, self.model.decoder
        memory = torch.cat(state.memory)[None]  # (1, T, D)
        n = torch.tensor([memory.shape[1]], device=memory.device)
        ids = torch.tensor([model.prompt_ids(memory.shape[1])], device=memory.device)
        valid = torch.ones_like(ids, dtype=torch.bool)
        budget = self._budget(state)
        with torch.inference_mode():
            embeds = model.embed_prompt(ids, valid, memory, n)
            pool = dec.new_pool(1, max_len=budget + 1, device=memory.device, dtype=memory.dtype)
            logits, dstate = dec.prefill(pool, embeds, valid)
            stops, tokens, score = frozenset(model.stop_ids), [], 0.0
            while True:
                logp = torch.log_softmax(logits[0].float(), -1)
                tok = int(logp.argmax())
                if tok in stops:
                    break
                tokens.append(tok)
                score += float(logp[tok])
                if len(tokens) >= budget:
                    break
                logits = dec.step(dstate, torch.tensor([tok], device=memory.device))
        return Hypothesis(tokens=tokens, frames=[max(state.frames - 1, 0)] * len(tokens), score=score)
