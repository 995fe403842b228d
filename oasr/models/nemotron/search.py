"""Batched greedy transducer search over a recurrent predictor: RNN-T and TDT.

Pure functions of (joint, predictor, encoder frames, lengths); used by the ``nemotron``
family and the Parakeet RNN-T / TDT checkpoints. Every row of the batch moves at once:

* one joint call per step for all rows, each at its own frame ``t[b]``;
* RNN-T: a blank moves the row to its next frame, a label keeps it on the frame (after
  ``max_symbols_per_step`` labels on one frame the row is moved on anyway);
* TDT: the row moves by the predicted duration (a blank by at least one frame; after
  ``max_symbols_per_step`` zero-duration labels on one frame, by one);
* the predictor advances only the rows that emitted a label; rows that emitted blank (or
  have finished) keep their state;
* the loop ends when every row has passed its last frame.

This is NeMo's (and transformers' ``generate``'s) greedy decode, batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from oasr.models.decoders.base import greedy_advance
from oasr.models.nemotron.predictor import AdditiveJoint, LstmPredictor


@dataclass
class GreedyResult:
    """Per-row labels of a greedy search.

    Attributes:
        tokens: emitted label ids per row (blank never appears).
        frames: the encoder frame each label was emitted at.
        durations: TDT only: how far each label moved its row, in frames (None for RNN-T).
        token_durations: TDT only: each label's duration as the joint predicted it (``durations``
            before the max-symbols rule forces a move; NeMo's ``token_duration``, which times it).
        token_logprobs: each label's log-probability under the joint.
        scores: per row, the log-probability of every symbol chosen (blanks included).
    """

    tokens: list[list[int]]
    frames: list[list[int]]
    durations: list[list[int]] | None = None
    token_logprobs: list[list[float]] | None = None
    scores: list[float] | None = None
    token_durations: list[list[int]] | None = None


def _collect(steps: list[tuple[torch.Tensor, ...]], batch: int, with_durations: bool) -> GreedyResult:
    """Turn per-step (emit, token, frame, advance, predicted duration, log-prob, active) tensors
    into per-row lists (one host copy)."""
    if not steps:
        return GreedyResult(
            [[] for _ in range(batch)],
            [[] for _ in range(batch)],
            [[] for _ in range(batch)] if with_durations else None,
            [[] for _ in range(batch)],
            [0.0] * batch,
            [[] for _ in range(batch)] if with_durations else None,
        )
    emit, tok, frame, dur, pred, logp, active = (torch.stack(x, dim=1).cpu() for x in zip(*steps))  # (B, steps)
    tokens, frames, durations, predicted, logprobs = [], [], [], [], []
    for b in range(batch):
        keep = emit[b]
        tokens.append(tok[b][keep].tolist())
        frames.append(frame[b][keep].tolist())
        durations.append(dur[b][keep].tolist())
        predicted.append(pred[b][keep].tolist())
        logprobs.append(logp[b][keep].tolist())
    scores = (logp.double() * active).sum(dim=1).tolist()
    if not with_durations:
        return GreedyResult(tokens, frames, None, logprobs, scores)
    return GreedyResult(tokens, frames, durations, logprobs, scores, predicted)


@torch.no_grad()
def greedy_search(
    joint: AdditiveJoint,
    predictor: LstmPredictor,
    enc: torch.Tensor,
    enc_lens: torch.Tensor,
    *,
    blank_id: int,
    max_symbols_per_step: int,
    durations: Sequence[int] | None = None,
    blank_penalty: float = 0.0,
) -> GreedyResult:
    """Greedy RNN-T (``durations`` None) or TDT search over a padded batch.

    Args:
        joint: the joint; its encoder projection is applied here once.
        predictor: the LSTM predictor.
        enc: encoder output (B, T, D), before the joint's encoder projection.
        enc_lens: (B,) valid frames per row.
        blank_id: the blank label.
        max_symbols_per_step: labels a row may emit on one frame before it is moved on (>= 1).
        durations: the TDT duration values, in the order of the joint's duration logits.
        blank_penalty: subtracted from the blank logit before the argmax (0: NeMo's search).

    Returns:
        GreedyResult (with ``durations`` for TDT).
    """
    if max_symbols_per_step < 1:
        raise ValueError(f"max_symbols_per_step must be >= 1, got {max_symbols_per_step}")
    b, t_max, _ = enc.shape
    device = enc.device
    if b == 0:
        none_or_empty = [] if durations is not None else None
        return GreedyResult([], [], none_or_empty, token_durations=none_or_empty)
    enc_proj = joint.project_encoder(enc)  # (B, T, Dj)
    lens = enc_lens.to(device=device, dtype=torch.long)
    vocab = joint.vocab_size
    dur_values = None
    if durations is not None:
        dur_values = torch.as_tensor(list(durations), device=device, dtype=torch.long)
        if dur_values.numel() != joint.num_durations:
            raise ValueError(f"{dur_values.numel()} durations given for a joint with {joint.num_durations}")
    rows = torch.arange(b, device=device)
    state = predictor.init_state(b, device)
    t = torch.zeros(b, dtype=torch.long, device=device)
    symbols = torch.zeros(b, dtype=torch.long, device=device)
    steps = []
    while True:
        active = t < lens
        if not bool(active.any()):
            break
        frame = enc_proj[rows, t.clamp(max=max(t_max - 1, 0))]  # (B, Dj)
        logits = joint.join(frame, predictor.predict(state))  # (B, V [+ D])
        if blank_penalty:
            logits[:, blank_id] -= blank_penalty
        tokens = logits[:, :vocab].argmax(dim=-1)
        blank = tokens == blank_id
        frame_durations = None if dur_values is None else dur_values[logits[:, vocab:].argmax(dim=-1)]
        advance, symbols = greedy_advance(blank, symbols, max_symbols_per_step, frame_durations)
        emit = active & ~blank
        chosen = logits[:, :vocab].float().log_softmax(dim=-1).gather(1, tokens[:, None])[:, 0]
        predicted = advance if frame_durations is None else frame_durations
        steps.append((emit, tokens, t.clone(), advance, predicted, chosen, active))
        t = t + torch.where(active, advance, torch.zeros_like(advance))
        if bool(emit.any()):
            state = predictor.advance(state, tokens, emit)
    return _collect(steps, b, dur_values is not None)


def nemo_transducer_search(
    model,
    enc: torch.Tensor,
    enc_lens: torch.Tensor,
    *,
    beam_size: int,
    max_sym_per_frame: int | None,
    blank_penalty: float,
    context_graph=None,
) -> GreedyResult:
    """The engine's ``transducer_search`` for a NeMo LSTM transducer (RNN-T, or TDT where the model
    has ``durations``): batched greedy only.

    Raises:
        ValueError: ``beam_size`` > 1 or hotwords: the recurrent predictor cannot be beam-searched here.
    """
    if beam_size > 1 or context_graph is not None:
        raise ValueError(f"{type(model).__name__} decodes greedily only (its predictor is recurrent)")
    return greedy_search(
        model.joiner,
        model.predictor,
        enc,
        enc_lens,
        blank_id=model.blank_id,
        max_symbols_per_step=max_sym_per_frame or model.config.max_symbols_per_step,
        durations=getattr(model, "durations", None) or None,
        blank_penalty=blank_penalty,
    )


__all__ = ["GreedyResult", "greedy_search", "nemo_transducer_search"]
