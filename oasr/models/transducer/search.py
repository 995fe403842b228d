"""Transducer search as pure functions of a model and its encoder output, batched over rows.

Both follow icefall's ``zipformer.decode.search`` exactly (token for token):

* ``greedy_search``: every row steps together; a row emits the joiner's argmax at its
  current frame when it is not blank, and moves to its next frame after a blank or after
  ``max_sym_per_frame`` symbols on this frame (icefall's default 1: one symbol per frame).
  ``blank_penalty`` is subtracted from the blank logit.
* ``modified_beam_search``: one symbol per frame; at every frame each row keeps the ``beam``
  best (hypothesis, symbol) extensions of its hypotheses by total log-probability, and
  extensions with the same label sequence are merged with log-add (a blank extension of
  ``y`` and a symbol extension of ``y[:-1]``); the answer is the best hypothesis by score
  divided by its length (icefall counts the ``context_size`` start labels in that length).

The joiner runs once per step over all rows (and hypotheses); only the merge bookkeeping of
the beam search is per row, on the host. Emission frames are encoder frame indices, from
which the engine times tokens (``frame * subsampling_rate * frame_shift``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch


class Biasing(Protocol):
    """A hotword context graph as the search walks it (``oasr.engine.decode.ctc.lm.ContextGraph``
    has this shape; an adapter gives icefall's ``ContextGraph`` the same)."""

    def initial(self) -> Any:
        """The state before any token."""
        ...

    def advance(self, state: Any, token: int) -> tuple[float, Any]:
        """(bonus, next state) after ``token``."""
        ...


@dataclass
class TransducerResult:
    """Per row: the emitted tokens, the encoder frame each was emitted at, and (beam search)
    the hypothesis score."""

    tokens: list[list[int]]
    frames: list[list[int]]
    scores: list[float] = field(default_factory=list)
    token_logprobs: list[list[float]] = field(default_factory=list)  # greedy: each token's log-probability


def _check(model: Any, enc: torch.Tensor, enc_lens: torch.Tensor) -> torch.Tensor:
    if enc.dim() != 3:
        raise ValueError(f"encoder output must be (B, T, D), got {tuple(enc.shape)}")
    enc_lens = enc_lens.to(device=enc.device, dtype=torch.long)
    if enc_lens.shape != (enc.shape[0],) or bool((enc_lens > enc.shape[1]).any()) or bool((enc_lens < 0).any()):
        raise ValueError(f"enc_lens {enc_lens.tolist()} do not fit an encoder output of {enc.shape[1]} frames")
    for member in ("predictor", "joiner", "blank_id"):
        if not hasattr(model, member):
            raise TypeError(f"{type(model).__name__} has no {member}: not a transducer model")
    return enc_lens


@torch.inference_mode()
def greedy_search(
    model: Any,
    enc: torch.Tensor,
    enc_lens: torch.Tensor,
    *,
    max_sym_per_frame: int = 1,
    blank_penalty: float = 0.0,
) -> TransducerResult:
    """Greedy transducer search over all rows at once.

    Args:
        model: a transducer (``predictor``, ``joiner`` with ``encoder_proj`` /
            ``decoder_proj`` / ``join``, ``blank_id``).
        enc: encoder output; enc_lens: valid frames per row.
        max_sym_per_frame: symbols a row may emit on one frame before moving on (>= 1).
        blank_penalty: subtracted from the blank logit before the argmax.

    Shapes:
        enc: (B, T, D), enc_lens: (B,)
    """
    if max_sym_per_frame < 1:
        raise ValueError(f"max_sym_per_frame must be at least 1, got {max_sym_per_frame}")
    enc_lens = _check(model, enc, enc_lens)
    if max_sym_per_frame == 1:
        return _greedy_one_per_frame(model, enc, enc_lens, blank_penalty)
    predictor, joiner, blank = model.predictor, model.joiner, int(model.blank_id)
    b, t_max, _ = enc.shape
    rows = torch.arange(b, device=enc.device)
    enc_proj = joiner.encoder_proj(enc)  # (B, T, J)
    state = predictor.init_state(b, enc.device)
    pred_proj = joiner.decoder_proj(predictor.predict(state))  # (B, J)
    frame = torch.zeros(b, dtype=torch.long, device=enc.device)
    on_frame = torch.zeros_like(frame)  # symbols emitted on the current frame
    tokens: list[list[int]] = [[] for _ in range(b)]
    frames: list[list[int]] = [[] for _ in range(b)]
    logprobs: list[list[float]] = [[] for _ in range(b)]
    score = torch.zeros(b, dtype=torch.float64, device=enc.device)  # log-prob of the chosen symbols, blanks included
    active = frame < enc_lens
    while bool(active.any()):
        logits = joiner.join(enc_proj[rows, frame.clamp(max=max(t_max - 1, 0))], pred_proj)  # (B, V)
        if blank_penalty:
            logits[:, blank] -= blank_penalty
        best = logits.argmax(dim=-1)
        chosen = logits.float().log_softmax(dim=-1).gather(1, best[:, None])[:, 0]  # (B,)
        score += torch.where(active, chosen, torch.zeros_like(chosen)).double()
        emit = active & (best != blank)
        if bool(emit.any()):
            for i in emit.nonzero()[:, 0].tolist():
                tokens[i].append(int(best[i]))
                frames[i].append(int(frame[i]))
                logprobs[i].append(float(chosen[i]))
            state = predictor.advance(state, best, emit)
            pred_proj = torch.where(emit[:, None], joiner.decoder_proj(predictor.predict(state)), pred_proj)
        on_frame = torch.where(emit, on_frame + 1, on_frame)
        move = active & (~emit | (on_frame >= max_sym_per_frame))
        frame = frame + move.long()
        on_frame = torch.where(move, torch.zeros_like(on_frame), on_frame)
        active = frame < enc_lens
    return TransducerResult(tokens=tokens, frames=frames, scores=score.tolist(), token_logprobs=logprobs)


def _greedy_one_per_frame(model: Any, enc: torch.Tensor, enc_lens: torch.Tensor, blank_penalty: float):
    """``greedy_search`` at one symbol per frame (icefall's default), the same arithmetic in
    fewer steps: every row moves one frame a step, so the loop runs over frames; each step's
    logits and choices stay on the device, and the log-softmax, the scores and the emitted
    tokens are read from them once at the end (a step is ~12 ops and one read of "did any row
    emit" besides the predictor's, against ~30 ops and a read per emitted token in the general
    loop).

    Shapes:
        enc: (B, T, D), enc_lens: (B,) long on enc's device
    """
    predictor, joiner, blank = model.predictor, model.joiner, int(model.blank_id)
    b, _, _ = enc.shape
    n = int(enc_lens.max()) if b else 0
    enc_proj = joiner.encoder_proj(enc).transpose(0, 1)  # (T, B, J)
    valid = torch.arange(n, device=enc.device)[:, None] < enc_lens[None, :]  # (n, B)
    state = predictor.init_state(b, enc.device)
    pred_proj = joiner.decoder_proj(predictor.predict(state))  # (B, J)
    logits_at: list[torch.Tensor] = []  # per frame (B, V)
    best_at: list[torch.Tensor] = []  # per frame (B,)
    for t in range(n):
        logits = joiner.join(enc_proj[t], pred_proj)
        if blank_penalty:
            logits[:, blank] -= blank_penalty
        best = logits.argmax(dim=-1)
        logits_at.append(logits)
        best_at.append(best)
        emit = valid[t] & (best != blank)
        if bool(emit.any()):
            state = predictor.advance(state, best, emit)
            pred_proj = torch.where(emit[:, None], joiner.decoder_proj(predictor.predict(state)), pred_proj)
    if not n:
        return TransducerResult([[] for _ in range(b)], [[] for _ in range(b)], [0.0] * b, [[] for _ in range(b)])
    best_all = torch.stack(best_at)  # (n, B)
    chosen = torch.stack(logits_at).float().log_softmax(dim=-1).gather(2, best_all[..., None])[..., 0]  # (n, B)
    # Summed frame by frame in float64, blanks included, as the general loop adds them.
    score = torch.where(valid, chosen, torch.zeros_like(chosen)).double().cumsum(0)[-1]
    emitted = (valid & (best_all != blank)).t()  # (B, n)
    row, frame = emitted.nonzero().unbind(1)  # row-major: each row's emissions in frame order
    counts = emitted.sum(1).tolist()
    tokens_flat = best_all[frame, row].tolist()
    frames_flat = frame.tolist()
    logprobs_flat = chosen[frame, row].tolist()
    tokens, frames, logprobs, at = [], [], [], 0
    for c in counts:
        tokens.append(tokens_flat[at : at + c])
        frames.append(frames_flat[at : at + c])
        logprobs.append(logprobs_flat[at : at + c])
        at += c
    return TransducerResult(tokens=tokens, frames=frames, scores=score.tolist(), token_logprobs=logprobs)


@dataclass
class BeamSet:
    """Modified beam search in progress over ``B`` rows of ``k`` slots (flat hypothesis
    ``i * k + j`` is slot ``j`` of row ``i``); carried across a stream's chunks.

    Attributes:
        k: slots per row (the beam).
        windows: the predictor's label windows of the ``B * k`` hypotheses.
        scores: (B, k) total log-probabilities; an empty slot is -inf.
        hyps: per row, per slot: (labels, emission frames, context-graph state).
    """

    k: int
    windows: torch.Tensor
    scores: torch.Tensor
    hyps: list[list[tuple[tuple[int, ...], list[int], Any]]]

    @classmethod
    def start(cls, model: Any, rows: int, k: int, device, dtype: torch.dtype, context_graph: Biasing | None = None):
        """Every row at its start window, one live slot. Scores accumulate in at least float32
        (icefall starts them as float32 zeros)."""
        if k < 1:
            raise ValueError(f"beam must be at least 1, got {k}")
        if not model.predictor.label_window_state:
            raise ValueError(
                f"{type(model.predictor).__name__} keeps a recurrent state: modified beam search needs a label window"
            )
        scores = torch.full((rows, k), float("-inf"), dtype=torch.promote_types(dtype, torch.float32), device=device)
        scores[:, 0] = 0.0
        start = context_graph.initial() if context_graph is not None else None
        return cls(k, model.predictor.init_state(rows * k, device), scores, [[((), [], start)] for _ in range(rows)])

    @classmethod
    def cat(cls, sets: list[BeamSet]) -> BeamSet:
        """The rows of several sets (same ``k``) as one."""
        return cls(
            sets[0].k,
            torch.cat([s.windows for s in sets]),
            torch.cat([s.scores for s in sets]),
            [h for s in sets for h in s.hyps],
        )

    def split(self) -> list[BeamSet]:
        """One set per row (the inverse of ``cat``)."""
        k = self.k
        return [
            BeamSet(k, self.windows[i * k : (i + 1) * k], self.scores[i : i + 1], [self.hyps[i]])
            for i in range(len(self.hyps))
        ]

    def best(self, context: int) -> list[tuple[tuple[int, ...], list[int], float]]:
        """Per row: (labels, frames, score) of the best hypothesis by score per label, icefall's
        length norm (it counts the ``context`` start labels)."""
        out = []
        score_list = self.scores.tolist()
        for i, hyps in enumerate(self.hyps):
            j = max(range(len(hyps)), key=lambda j: score_list[i][j] / (context + len(hyps[j][0])))
            out.append((hyps[j][0], hyps[j][1], score_list[i][j]))
        return out


@torch.inference_mode()
def beam_advance(
    model: Any,
    beams: BeamSet,
    enc_proj: torch.Tensor,
    enc_lens: list[int],
    *,
    frame0: list[int] | None = None,
    blank_penalty: float = 0.0,
    temperature: float = 1.0,
    context_graph: Biasing | None = None,
) -> None:
    """Advance ``beams`` over each row's projected encoder frames (one symbol per frame), in place.

    Args:
        enc_proj: the joiner's projection of the encoder output of the rows.
        enc_lens: valid frames per row.
        frame0: per row, the frame index of ``enc_proj[:, 0]`` in the row's emission frames.

    Shapes:
        enc_proj: (B, T, J)
    """
    predictor, joiner, blank = model.predictor, model.joiner, int(model.blank_id)
    b, k = len(beams.hyps), beams.k
    frame0 = frame0 or [0] * b
    windows, scores, hyps = beams.windows, beams.scores, beams.hyps
    for t in range(max(enc_lens, default=0)):
        live = [i for i in range(b) if t < enc_lens[i]]
        if not live:
            break
        pred_proj = joiner.decoder_proj(predictor.predict(windows))  # (B * k, J)
        frame = enc_proj[:, t].repeat_interleave(k, dim=0)  # (B * k, J)
        logits = joiner.join(frame, pred_proj)  # (B * k, V)
        if blank_penalty:
            logits[:, blank] -= blank_penalty
        vocab = logits.shape[-1]
        log_probs = (logits / temperature).log_softmax(dim=-1) + scores.reshape(-1, 1)
        top_vals, top_idx = log_probs.reshape(b, k * vocab).topk(k, dim=-1)  # (B, k), best first
        top_list, val_list = top_idx.tolist(), top_vals.tolist()
        new_scores = scores.clone()
        parent_list = list(range(b * k))
        token_list = [blank] * (b * k)
        for i in live:
            kept: dict[tuple[int, ...], int] = {}  # label sequence -> slot
            new_hyps: list[tuple[tuple[int, ...], list[int], Any]] = []
            slot_vals: list[float] = []
            slot_src: list[int] = []  # the candidate each slot was created from
            for c in range(k):
                if val_list[i][c] == float("-inf"):
                    continue
                parent, token = divmod(top_list[i][c], vocab)
                seq, frames, ctx = hyps[i][parent]
                if token != blank:
                    seq, frames = seq + (token,), frames + [frame0[i] + t]
                    if context_graph is not None:
                        bonus, ctx = context_graph.advance(ctx, token)
                        if bonus:
                            top_vals[i, c] += bonus
                            val_list[i][c] = float(top_vals[i, c])
                slot = kept.get(seq)
                if slot is not None:  # same labels: log-add, in the scores' dtype (as icefall)
                    merged = torch.logaddexp(top_vals[i, slot_src[slot]], top_vals[i, c])
                    top_vals[i, slot_src[slot]] = merged
                    slot_vals[slot] = float(merged)
                    continue
                kept[seq] = len(new_hyps)
                parent_list[i * k + len(new_hyps)] = i * k + parent
                token_list[i * k + len(new_hyps)] = token
                slot_src.append(c)
                new_hyps.append((seq, frames, ctx))
                slot_vals.append(val_list[i][c])
            hyps[i] = new_hyps
            new_scores[i] = float("-inf")
            new_scores[i, : len(slot_vals)] = torch.tensor(slot_vals, dtype=scores.dtype)
        parents = torch.tensor(parent_list, device=enc_proj.device)
        new_tokens = torch.tensor(token_list, device=enc_proj.device)
        windows = predictor.advance(windows.index_select(0, parents), new_tokens, new_tokens != blank)
        scores = new_scores
    beams.windows, beams.scores = windows, scores


@torch.inference_mode()
def modified_beam_search(
    model: Any,
    enc: torch.Tensor,
    enc_lens: torch.Tensor,
    *,
    beam: int = 4,
    blank_penalty: float = 0.0,
    temperature: float = 1.0,
    context_graph: Biasing | None = None,
) -> TransducerResult:
    """icefall's modified beam search (one symbol per frame), batched over rows.

    Args:
        model: a transducer whose predictor has a label-window state.
        beam: hypotheses kept per row.
        blank_penalty: subtracted from the blank logit.
        temperature: the logits are divided by it before the log-softmax.
        context_graph: hotword biasing, as icefall applies it: a kept extension by a symbol
            adds the graph's bonus to its score after the beam is chosen (so it steers the next
            frames, not this one); the graph's end-of-utterance correction does not enter the
            final ranking (icefall adds it to a score the ranking does not read).

    Shapes:
        enc: (B, T, D), enc_lens: (B,)
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    enc_lens = _check(model, enc, enc_lens)
    enc_proj = model.joiner.encoder_proj(enc)  # (B, T, J)
    beams = BeamSet.start(model, enc.shape[0], beam, enc.device, enc_proj.dtype, context_graph)
    beam_advance(
        model,
        beams,
        enc_proj,
        enc_lens.tolist(),
        blank_penalty=blank_penalty,
        temperature=temperature,
        context_graph=context_graph,
    )
    context = int(model.predictor.init_state(1, enc.device).shape[1])
    best = beams.best(context)
    return TransducerResult(
        tokens=[list(labels) for labels, _, _ in best],
        frames=[list(frames) for _, frames, _ in best],
        scores=[score for _, _, score in best],
    )
