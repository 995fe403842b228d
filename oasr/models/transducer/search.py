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
    if beam < 1:
        raise ValueError(f"beam must be at least 1, got {beam}")
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    enc_lens = _check(model, enc, enc_lens)
    predictor, joiner, blank = model.predictor, model.joiner, int(model.blank_id)
    if not predictor.label_window_state:
        raise ValueError(
            f"{type(predictor).__name__} keeps a recurrent state: modified beam search needs a label window"
        )
    b, _, _ = enc.shape
    k = beam
    enc_proj = joiner.encoder_proj(enc)  # (B, T, J)
    context = int(predictor.init_state(1, enc.device).shape[1])
    # Slot j of row i is flat hypothesis i * k + j; empty slots score -inf.
    windows = predictor.init_state(b * k, enc.device)  # (B * k, context)
    # Scores accumulate in at least float32 (icefall starts them as float32 zeros).
    score_dtype = torch.promote_types(enc_proj.dtype, torch.float32)
    scores = torch.full((b, k), float("-inf"), dtype=score_dtype, device=enc.device)
    scores[:, 0] = 0.0
    start = context_graph.initial() if context_graph is not None else None
    # Per row, per slot: (labels, emission frames, context-graph state).
    hyps: list[list[tuple[tuple[int, ...], list[int], Any]]] = [[((), [], start)] for _ in range(b)]
    lens = enc_lens.tolist()
    for t in range(max(lens, default=0)):
        live = [i for i in range(b) if t < lens[i]]
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
                    seq, frames = seq + (token,), frames + [t]
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
        parents = torch.tensor(parent_list, device=enc.device)
        new_tokens = torch.tensor(token_list, device=enc.device)
        windows = predictor.advance(windows.index_select(0, parents), new_tokens, new_tokens != blank)
        scores = new_scores
    tokens, frames, best_scores = [], [], []
    score_list = scores.tolist()
    for i in range(b):
        # icefall's length norm counts the start window's context_size labels.
        best = max(range(len(hyps[i])), key=lambda j: score_list[i][j] / (context + len(hyps[i][j][0])))
        tokens.append(list(hyps[i][best][0]))
        frames.append(list(hyps[i][best][1]))
        best_scores.append(score_list[i][best])
    return TransducerResult(tokens=tokens, frames=frames, scores=best_scores)
