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
* the loop ends when every row has passed its last frame;
* with a phrase-boosting tree (``boosting``), a label is chosen as NeMo's ``greedy_batch``
  chooses it with a boosting tree: blank or not is the joint's call, which label the tree's
  scores help decide.

This is NeMo's (and transformers' ``generate``'s) greedy decode, batched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from oasr.models.decoders.base import greedy_advance
from oasr.models.decoders.threads import one_intra_op_thread
from oasr.models.nemotron.beam import BeamResult, default_beam_search, maes_search, malsd_search
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
    boosting=None,
    boosting_alpha: float = 0.0,
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
        boosting: a phrase-boosting tree (``oasr.engine.decode.boosting.BoostingTree``) fused as
            NeMo's ``greedy_batch`` fuses it: where the best symbol is a label, the label is the
            best non-blank one after adding ``boosting_alpha x`` the tree's scores to the joint's
            log-softmax (over labels and durations, as NeMo's joint returns it on a CPU); blank
            stays blank, and an emitted label moves the tree's state. The blank must be the last
            label.
        boosting_alpha: the tree's weight.

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
    if boosting is not None:
        if blank_id != vocab - 1:
            raise ValueError(f"phrase boosting needs the blank last, got blank {blank_id} of {vocab} labels")
        boost_state = boosting.initial(b, device)
    # One intra-op thread on a CPU: a few rows of a few hundred values a step, and every parallel region
    # waits for all its threads (the tiny NeMo RNN-T archive's search over 4 rows: 7.6 s on 2 threads,
    # 1.3 s on one, load 6 on 2 cores).
    with one_intra_op_thread(device):
        while True:
            active = t < lens
            if not bool(active.any()):
                break
            frame = enc_proj[rows, t.clamp(max=max(t_max - 1, 0))]  # (B, Dj)
            logits = joint.join(frame, predictor.predict(state))  # (B, V [+ D])
            if blank_penalty:
                logits[:, blank_id] -= blank_penalty
            tokens = logits[:, :vocab].argmax(dim=-1)
            if boosting is not None:
                tree_scores, tree_next = boosting.advance(boost_state)
                fused = logits.log_softmax(dim=-1)[:, : vocab - 1] + tree_scores.to(logits.dtype) * boosting_alpha
                tokens = torch.where(tokens == blank_id, tokens, fused.argmax(dim=-1))
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
                if boosting is not None:
                    boost_state = torch.where(emit, tree_next[rows, tokens.clamp(max=vocab - 2)], boost_state)
    return _collect(steps, b, dur_values is not None)


NEMO_SEARCHES = ("greedy", "malsd", "maes", "beam")
"""The searches ``nemo_transducer_search`` runs: NeMo's greedy, ``malsd_batch`` (the beam search
NeMo recommends), ``maes`` and its default ``beam`` (``beam.py``)."""


def nemo_transducer_search(
    model,
    enc: torch.Tensor,
    enc_lens: torch.Tensor,
    *,
    beam_size: int,
    max_sym_per_frame: int | None,
    blank_penalty: float,
    context_graph=None,
    search: str = "greedy",
    params: Mapping[str, Any] | None = None,
) -> GreedyResult | BeamResult:
    """The engine's ``transducer_search`` for a NeMo LSTM transducer (RNN-T, or TDT where the model
    has ``durations``).

    Args:
        search: one of ``NEMO_SEARCHES``: "greedy" (batched, ``beam_size`` 1), "malsd" (NeMo's
            ``malsd_batch`` with beam ``beam_size``), "maes" or "beam" (NeMo's modified adaptive
            expansion search and default beam search, row by row, ``beam_size`` > 1).
        max_sym_per_frame: labels per frame (None: the checkpoint's: ``decoding.greedy.max_symbols``
            for greedy, ``decoding.beam.max_symbols`` for malsd).
        params: the checkpoint's beam settings (NeMo's ``decoding.beam``: ``score_norm``,
            ``max_symbols``, ``maes_num_steps``, ``maes_prefix_alpha``, ``maes_expansion_gamma``,
            ``maes_expansion_beta``); None: NeMo's defaults.

        context_graph: hotwords as NeMo's boosting tree (``oasr.engine.decode.boosting.BoostingTree``),
            fused with weight ``params["boosting_alpha"]`` as NeMo fuses it: into malsd
            (``pruning_mode``, ``blank_lm_score_mode``) and into greedy (NeMo's boosted
            ``greedy_batch``).

    Raises:
        ValueError: another search, or hotwords with maes / beam (NeMo boosts phrases in its
            batched searches only: greedy_batch and malsd_batch).
    """
    if context_graph is not None and search not in ("greedy", "malsd"):
        raise ValueError(f"hotwords: NeMo boosts phrases in greedy and malsd only, not in search={search!r}")
    durations = getattr(model, "durations", None) or None
    params = params or {}
    if search in ("malsd", "maes", "beam"):
        own = {
            "malsd": (
                malsd_search,
                {
                    "max_symbols": max_sym_per_frame or params.get("max_symbols", 10),
                    "boosting": context_graph,
                    "boosting_alpha": float(params.get("boosting_alpha", 1.0)),
                    "pruning_mode": str(params.get("pruning_mode", "late")),
                    "blank_lm_score_mode": str(params.get("blank_lm_score_mode", "lm_weighted_full")),
                },
            ),
            "maes": (
                maes_search,
                {
                    "num_steps": int(params.get("maes_num_steps", 2)),
                    "prefix_alpha": int(params.get("maes_prefix_alpha", 1)),
                    "expansion_gamma": float(params.get("maes_expansion_gamma", 2.3)),
                    "expansion_beta": int(params.get("maes_expansion_beta", 2)),
                },
            ),
            "beam": (default_beam_search, {}),
        }
        run, settings = own[search]
        return run(
            model.joiner,
            model.predictor,
            enc,
            enc_lens,
            blank_id=model.blank_id,
            beam_size=beam_size,
            durations=durations,
            score_norm=bool(params.get("score_norm", True)),
            blank_penalty=blank_penalty,
            **settings,
        )
    if search != "greedy" or beam_size != 1:
        raise ValueError(f"search={search!r} with beam_size={beam_size}: {type(model).__name__} runs {NEMO_SEARCHES}")
    return greedy_search(
        model.joiner,
        model.predictor,
        enc,
        enc_lens,
        blank_id=model.blank_id,
        max_symbols_per_step=max_sym_per_frame or model.config.max_symbols_per_step,
        durations=durations,
        blank_penalty=blank_penalty,
        boosting=context_graph,
        boosting_alpha=float(params.get("boosting_alpha", 1.0)),
    )


__all__ = ["NEMO_SEARCHES", "GreedyResult", "greedy_search", "nemo_transducer_search"]
