"""Beam searches over NeMo's LSTM transducer (RNN-T and TDT), token for token NeMo's.

Pure functions of (joint, predictor, encoder frames, lengths), as the greedy search in
``search.py`` (whose ``nemo_transducer_search`` dispatches to them by name); used by the
Parakeet RNN-T / TDT / hybrid checkpoints (and any model built on ``LstmPredictor`` +
``AdditiveJoint``). Each follows the NeMo 3.0 decoding of the same name:

* ``malsd_search`` (NeMo's ``malsd_batch``: modified alignment-length synchronous decoding,
  batched). Every row keeps ``k`` hypotheses, all rows and hypotheses stepping together (one
  joint call per step over the (B * k) grid). At each step every live hypothesis proposes its
  ``k`` best extensions at its current frame (RNN-T: a label, or blank to move one frame on; TDT:
  a (label, duration) pair by the sum of the two log-probabilities, a blank of duration 0 moved
  one frame); a hypothesis past its last frame keeps its place with its score; one that has
  emitted ``max_symbols`` labels on its frame is forced to blank. The ``k`` best of the ``k * k``
  candidates survive; survivors with the same labels (and, for TDT, the same frame) are merged
  by log-add into the best of them. The search ends when every hypothesis of every row has
  passed its last frame; the answer is the best by score, or by score / (labels + 1) with
  ``score_norm``.

* ``default_beam_search`` (NeMo's ``beam``, its ``search_type="default"``: ESPnet's transducer
  beam search, one row at a time). RNN-T: at each frame the best open hypothesis is expanded
  by blank (kept for the next frame) and by its ``k`` best labels (open again on this frame),
  until ``k`` kept hypotheses beat every open one. TDT: hypotheses wait for the frame their
  durations reach; the best is expanded by its ``k`` best (label, duration) pairs (duration 0
  stays on the frame) and by blank with each of its ``k`` best non-zero durations, kept
  hypotheses with the same labels and frame merged by log-add. The answer is the best by score,
  or by score per label (the start symbol counted) with ``score_norm``.

* ``maes_search`` (NeMo's ``maes``: modified adaptive expansion search, one row at a time). At
  each frame the hypotheses first absorb the paths through their prefixes (at most
  ``prefix_alpha`` labels shorter); then up to ``num_steps`` expansion steps: each open
  hypothesis proposes its ``beam + expansion_beta`` best symbols (TDT: (label, duration) pairs),
  those within ``expansion_gamma`` of its best are kept, blanks (TDT: and labels that move on)
  set aside, new label sequences expanded again; after the last step each gets its blank, and
  the ``beam`` best of everything set aside survive (TDT: merged by labels and frame).

Tokens are reported with the encoder frame at which each was emitted, and the hypothesis's
(unnormalised) log-probability as its score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oasr.models.nemotron.predictor import AdditiveJoint, LstmPredictor, LstmState

# NeMo recombines hypotheses by a rolling hash of their labels (a 64-bit LCG step per label).
_HASH_MUL = 6364136223846793005
_NO_LABEL = -1  # the label of a finished hypothesis's step (it keeps its place unchanged)


@dataclass
class BeamResult:
    """Per row, the best hypothesis of a beam search.

    Attributes:
        tokens: its labels (blank never appears).
        frames: the encoder frame each label was emitted at.
        scores: its total log-probability (not length-normalised).
        token_logprobs: None (a beam search scores hypotheses, not tokens).
        token_durations: None (no per-label TDT durations: NeMo's timing gives each label a frame).
    """

    tokens: list[list[int]]
    frames: list[list[int]]
    scores: list[float]
    token_logprobs: None = None
    token_durations: None = None


def _select(state: LstmState, index: torch.Tensor) -> LstmState:
    """Rows ``index`` of a predictor state (repeats allowed)."""
    return LstmState(state.h[:, index], state.c[:, index], state.pred[index])


def _label_hash(prev: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return prev * _HASH_MUL + 1 + labels  # int64 arithmetic wraps, as NeMo's does


def _backtrack(
    parents: list[torch.Tensor], labels: list[torch.Tensor], frames: list[torch.Tensor], best: torch.Tensor, blank: int
) -> tuple[list[list[int]], list[list[int]]]:
    """Follow each row's best slot back through the steps: (labels, frames) per row."""
    b = best.shape[0]
    if not parents:
        return [[] for _ in range(b)], [[] for _ in range(b)]
    par, lab, fr = (torch.stack(x).cpu() for x in (parents, labels, frames))  # (S, B, k)
    rows = torch.arange(b)
    slot = best.cpu()
    out_lab, out_fr = [], []
    for s in range(par.shape[0] - 1, -1, -1):
        out_lab.append(lab[s, rows, slot])
        out_fr.append(fr[s, rows, slot])
        slot = par[s, rows, slot]
    seq = torch.stack(out_lab[::-1], dim=1)  # (B, S)
    when = torch.stack(out_fr[::-1], dim=1)
    keep = (seq >= 0) & (seq != blank)
    return [seq[i][keep[i]].tolist() for i in range(b)], [when[i][keep[i]].tolist() for i in range(b)]


@torch.no_grad()
def malsd_search(
    joint: AdditiveJoint,
    predictor: LstmPredictor,
    enc: torch.Tensor,
    enc_lens: torch.Tensor,
    *,
    blank_id: int,
    beam_size: int,
    durations: Sequence[int] | None = None,
    max_symbols: int | None = 10,
    score_norm: bool = True,
    blank_penalty: float = 0.0,
    boosting: Any = None,
    boosting_alpha: float = 1.0,
    pruning_mode: str = "late",
    blank_lm_score_mode: str = "lm_weighted_full",
) -> BeamResult:
    """NeMo's ``malsd_batch`` beam search (see the module notes) over a padded batch.

    Args:
        joint, predictor: the transducer's label side.
        enc: encoder output, before the joint's encoder projection.
        enc_lens: valid frames per row.
        blank_id: the blank label (the last of the vocabulary).
        beam_size: hypotheses kept per row (>= 1).
        durations: TDT duration values, in the order of the joint's duration logits (None: RNN-T).
        max_symbols: labels a hypothesis may emit on one frame before it is forced to blank
            (NeMo's ``decoding.beam.max_symbols``; None: no bound).
        score_norm: pick the answer by score per label (NeMo's ``score_norm``).
        blank_penalty: subtracted from the blank logit before the log-softmax (0: NeMo's search).
        boosting: phrase boosting as NeMo's boosting tree fuses it (a fusion model over the
            labels without blank: ``initial(n, device)`` -> (n,) states, ``advance(states)`` ->
            every label's (n, V - 1) score and next state; ``oasr.engine.decode.boosting``), or None.
        boosting_alpha: the weight of its scores (NeMo's ``boosting_tree_alpha``).
        pruning_mode: "late" (candidates chosen after the fusion scores are added, NeMo's default)
            or "early" (chosen by the transducer's log-probabilities, then scored).
        blank_lm_score_mode: "lm_weighted_full" (the labels' share of the non-blank probability
            weighted by ``alpha``, the blank's log-probability scaled by ``1 + alpha``, NeMo's
            default) or "no_score" (the fusion scores added to the labels alone).

    Shapes:
        enc: (B, T, D), enc_lens: (B,)
    """
    if pruning_mode not in ("late", "early") or blank_lm_score_mode not in ("lm_weighted_full", "no_score"):
        raise ValueError(f"pruning_mode={pruning_mode!r} / blank_lm_score_mode={blank_lm_score_mode!r}")
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if max_symbols is not None and max_symbols < 1:
        raise ValueError(f"max_symbols must be >= 1 or None, got {max_symbols}")
    b, t_max, _ = enc.shape
    k, device = beam_size, enc.device
    if b == 0:
        return BeamResult([], [], [])
    enc_proj = joint.project_encoder(enc)  # (B, T, J)
    dtype = enc_proj.dtype
    vocab = joint.vocab_size
    dur = None
    if durations is not None:
        dur = torch.as_tensor(list(durations), device=device, dtype=torch.long)
        if dur.numel() != joint.num_durations:
            raise ValueError(f"{dur.numel()} durations given for a joint with {joint.num_durations}")
    n_dur = 0 if dur is None else dur.numel()
    inactive = torch.tensor(float("-inf"), dtype=dtype, device=device)

    row_of = torch.arange(b, device=device)[:, None].expand(b, k).reshape(-1)  # (B * k,)
    lens = enc_lens.to(device=device, dtype=torch.long)
    last_t = (lens - 1)[:, None].expand(b, k)  # (B, k)
    scores = torch.full((b, k), float("-inf"), dtype=dtype, device=device)
    scores[:, 0] = 0.0
    time = torch.zeros((b, k), dtype=torch.long, device=device)
    on_frame = torch.zeros_like(time)  # labels emitted on the current frame
    n_labels = torch.zeros_like(time)
    last_label = torch.full_like(time, _NO_LABEL)
    seq_hash = torch.zeros_like(time)
    state = predictor.init_state(b * k, device)
    fusion = _Fusion(boosting, boosting_alpha, pruning_mode, blank_lm_score_mode, b, k, device) if boosting else None
    parents, labels_at, frames_at = [], [], []
    active = time <= last_t
    while bool(active.any()):
        frame = enc_proj[row_of, time.clamp(min=0).minimum(last_t.clamp(min=0)).reshape(-1)]  # (B * k, J)
        logits = joint.join(frame, predictor.predict(state))  # (B * k, V [+ D])
        if blank_penalty:
            logits[:, blank_id] -= blank_penalty
        logp = logits[:, :vocab].log_softmax(dim=-1).view(b, k, vocab)
        dur_lp = None if dur is None else logits[:, vocab:].log_softmax(dim=-1).view(b, k, n_dur)
        if fusion is not None:
            top_lp, top_label, top_dur_at = fusion.top(logp, dur_lp, k)  # may rescale logp in place (late)
        elif dur_lp is None:
            top_lp, top_label = logp.topk(k, dim=-1)  # (B, k, k), best first
            top_dur_at = None
        else:
            pair = (logp[..., :, None] + dur_lp[..., None, :]).view(b, k, vocab * n_dur)
            top_lp, top_pair = pair.topk(k, dim=-1)
            top_label, top_dur_at = top_pair // n_dur, top_pair % n_dur
        if dur_lp is None:
            top_dur = None
            forced_lp = logp[..., blank_id]
        else:
            top_dur = dur[top_dur_at]
            top_dur = torch.where((top_label == blank_id) & (top_dur == 0), 1, top_dur)
            forced_lp = logp[..., blank_id] + dur_lp.max(dim=-1).values
        cand = scores[..., None] + top_lp  # (B, k, k)
        # A finished hypothesis keeps its place (first candidate, its own score, no label).
        cand = torch.where(active[..., None], cand, inactive)
        cand[..., 0] = torch.where(active, cand[..., 0], scores)
        top_label = torch.where(active[..., None], top_label, _NO_LABEL)
        if max_symbols is not None:  # too many labels on this frame: blank only
            forced = (on_frame >= max_symbols) & active
            cand = torch.where(forced[..., None], inactive, cand)
            cand[..., 0] = torch.where(forced, scores + forced_lp, cand[..., 0])
            top_label = torch.where(forced[..., None], blank_id, top_label)
            if top_dur is not None:
                top_dur = torch.where(forced[..., None] & (top_dur == 0), 1, top_dur)
        new_scores, pick = cand.view(b, k * k).topk(k, dim=-1)  # (B, k)
        parent = pick // k
        label = top_label.view(b, k * k).gather(1, pick)
        emitted = label >= 0
        is_label = emitted & (label != blank_id)
        if top_dur is None:
            step = (label == blank_id).long()
            on_frame = torch.where(label == blank_id, 0, on_frame.gather(1, parent) + is_label)
        else:
            step = torch.where(emitted, top_dur.view(b, k * k).gather(1, pick), 0)
            on_frame = torch.where(emitted & (step > 0), 0, on_frame.gather(1, parent) + is_label)
        parents.append(parent)
        labels_at.append(label)
        frames_at.append(time.gather(1, parent))
        time = time.gather(1, parent) + step
        n_labels = n_labels.gather(1, parent) + is_label
        prev_hash = seq_hash.gather(1, parent)
        seq_hash = torch.where(is_label, _label_hash(prev_hash, label), prev_hash)
        last_label = torch.where(is_label, label, last_label.gather(1, parent))
        scores = _recombine(new_scores, seq_hash, last_label, n_labels, time if dur is not None else None)
        flat_parent = (parent + torch.arange(b, device=device)[:, None] * k).reshape(-1)
        state = predictor.advance(_select(state, flat_parent), label.clamp(min=0).reshape(-1), is_label.reshape(-1))
        if fusion is not None:
            fusion.update(parent, label, is_label)
        active = time <= last_t
    rank = scores / (n_labels.to(dtype) + 1) if score_norm else scores
    best = torch.sort(rank, dim=-1, descending=True).indices[:, 0]
    tokens, frames = _backtrack(parents, labels_at, frames_at, best, blank_id)
    return BeamResult(tokens, frames, scores.gather(1, best[:, None])[:, 0].tolist())


class _Fusion:
    """A boosting tree fused into ``malsd_search`` as NeMo fuses its fusion models: each of the
    (B, k) hypotheses holds a tree state; its labels' scores (times ``alpha``) join the
    transducer's log-probabilities by ``pruning_mode`` / ``blank_lm_score_mode``."""

    EPS = 1e-2  # NeMo's bound on the blank probability in the non-blank share (its bf16 guard)

    def __init__(self, tree: Any, alpha: float, pruning: str, blank_mode: str, b: int, k: int, device) -> None:
        self.tree, self.alpha, self.b, self.k = tree, float(alpha), b, k
        self.late, self.weighted = pruning == "late", blank_mode == "lm_weighted_full"
        self.states = tree.initial(b * k, device)
        self._scores()

    def _scores(self) -> None:
        scores, self.next = self.tree.advance(self.states)  # (B * k, V - 1)
        self.scores = scores.view(self.b, self.k, -1)

    def top(self, logp: torch.Tensor, dur_lp: torch.Tensor | None, k: int):
        """(log-probabilities, labels, duration indices or None) of each hypothesis's ``k`` best
        candidates, fusion scores included (late pruning: ``logp`` itself rescaled, as NeMo's)."""
        fused = self.scores.to(logp.dtype) * self.alpha  # (B, k, V - 1)
        blank = logp.shape[-1] - 1
        non_blank = torch.log1p(-torch.clamp(torch.exp(logp[..., -1]), max=1.0 - self.EPS))
        if self.late:
            if self.weighted:
                logp[..., :-1] += non_blank[..., None] * self.alpha + fused
                logp[..., -1] *= 1 + self.alpha
            else:
                logp[..., :-1] += fused
            if dur_lp is None:
                top_lp, top_label = logp.topk(k, dim=-1)
                return top_lp, top_label, None
            n_dur = dur_lp.shape[-1]
            pair = (logp[..., :, None] + dur_lp[..., None, :]).view(self.b, self.k, -1)
            top_lp, top_pair = pair.topk(k, dim=-1)
            return top_lp, top_pair // n_dur, top_pair % n_dur
        top_lp, top_label = logp.topk(k, dim=-1)
        is_blank = top_label == blank
        bonus = fused.gather(-1, torch.where(is_blank, 0, top_label))
        if self.weighted:
            scaled = top_lp + non_blank[..., None] * self.alpha + bonus
            top_lp = torch.where(is_blank, top_lp * (1 + self.alpha), scaled)
        else:
            top_lp = torch.where(is_blank, top_lp, top_lp + bonus)
        if dur_lp is None:
            return top_lp, top_label, None
        n_dur = dur_lp.shape[-1]
        pair = (top_lp[..., :, None] + dur_lp[..., None, :]).view(self.b, self.k, -1)
        top_lp, top_pair = pair.topk(k, dim=-1)
        return top_lp, top_label.gather(-1, top_pair // n_dur), top_pair % n_dur

    def update(self, parent: torch.Tensor, label: torch.Tensor, is_label: torch.Tensor) -> None:
        """Move each surviving hypothesis's state from its parent's by its label (blank: kept)."""
        nxt = self.next.view(self.b, self.k, -1)
        nxt = nxt.gather(1, parent[..., None].expand(-1, -1, nxt.shape[-1]))  # (B, k, V - 1)
        prev = self.states.view(self.b, self.k).gather(1, parent)
        moved = nxt.gather(-1, torch.where(is_label, label, 0)[..., None])[..., 0]
        self.states = torch.where(is_label, moved, prev).reshape(-1)
        self._scores()


def _recombine(
    scores: torch.Tensor,
    seq_hash: torch.Tensor,
    last_label: torch.Tensor,
    n_labels: torch.Tensor,
    time: torch.Tensor | None,
) -> torch.Tensor:
    """Merge the hypotheses of a row with the same labels (and frame, where given): the best of
    each group takes the log-add of the group's scores, the others drop out (-inf)."""
    k = scores.shape[1]
    if k == 1:
        return scores
    same = (
        (seq_hash[:, :, None] == seq_hash[:, None, :])
        & (last_label[:, :, None] == last_label[:, None, :])
        & (n_labels[:, :, None] == n_labels[:, None, :])
    )  # (B, k, k)
    if time is not None:
        same &= time[:, :, None] == time[:, None, :]
    group = torch.where(same, scores[:, None, :].expand_as(same), float("-inf"))
    keeper = group.argmax(dim=-1) == torch.arange(k, device=scores.device)[None, :]
    return torch.where(keeper, torch.logsumexp(group, dim=-1), float("-inf"))


@dataclass
class _Hyp:
    score: float
    labels: tuple[int, ...]  # after the start symbol
    frames: tuple[int, ...]
    frame: int = 0  # TDT: the frame this hypothesis waits for


class _Predictions:
    """The predictor's output after each label sequence, computed once (NeMo's score cache)."""

    def __init__(self, predictor: LstmPredictor, device) -> None:
        self.predictor = predictor
        self.states: dict[tuple[int, ...], LstmState] = {(): predictor.init_state(1, device)}

    def __call__(self, labels: tuple[int, ...]) -> torch.Tensor:
        """The output (1, J) after ``labels``."""
        return self.many([labels])

    def many(self, sequences: list[tuple[int, ...]]) -> torch.Tensor:
        """The outputs (N, J) after each of ``sequences``; the new ones in one batched step."""
        new = [q for q in dict.fromkeys(sequences) if q not in self.states]
        if new:
            parents = [q[:-1] for q in new]
            if any(q not in self.states for q in parents):
                self.many([q for q in parents if q not in self.states])
            prev = [self.states[q] for q in parents]
            state = LstmState(*(torch.cat(x, dim=d) for x, d in zip(zip(*prev), (1, 1, 0))))
            tokens = torch.tensor([q[-1] for q in new], device=state.pred.device)
            state = self.predictor.advance(state, tokens, torch.ones_like(tokens, dtype=torch.bool))
            for i, q in enumerate(new):
                self.states[q] = _select(state, torch.tensor([i], device=tokens.device))
        return torch.cat([self.states[q].pred for q in sequences])


def _pop_best(hyps: list[_Hyp]) -> _Hyp:
    best = max(hyps, key=lambda h: h.score)
    hyps.remove(best)
    return best


def _merge(hyps: list[_Hyp]) -> list[_Hyp]:
    """NeMo's TDT merge: hypotheses with the same labels and frame, best first, each group's best
    taking the log-add of the group's scores, computed on float32 tensors (torch's default dtype,
    as NeMo makes them)."""
    merged: dict[tuple, _Hyp] = {}
    for h in sorted(hyps, key=lambda h: h.score, reverse=True):
        key = (h.labels, h.frame)
        if key in merged:
            a, b = torch.tensor(merged[key].score, dtype=torch.float32), torch.tensor(h.score, dtype=torch.float32)
            merged[key].score = float(torch.logaddexp(a, b))
        else:
            merged[key] = h
    return list(merged.values())


def _best_first(hyps: list[_Hyp], n: int) -> list[_Hyp]:
    return sorted(hyps, key=lambda h: h.score, reverse=True)[:n]


def _pick(hyps: list[_Hyp], score_norm: bool) -> _Hyp:
    """The answer: the best by score, or by score per label with the start symbol (NeMo's sort_nbest)."""
    return sorted(hyps, key=lambda h: h.score / (len(h.labels) + 1) if score_norm else h.score, reverse=True)[0]


@torch.no_grad()
def default_beam_search(
    joint: AdditiveJoint,
    predictor: LstmPredictor,
    enc: torch.Tensor,
    enc_lens: torch.Tensor,
    *,
    blank_id: int,
    beam_size: int,
    durations: Sequence[int] | None = None,
    score_norm: bool = True,
    blank_penalty: float = 0.0,
) -> BeamResult:
    """NeMo's default transducer beam search (see the module notes), row by row.

    Args:
        beam_size: hypotheses kept (> 1; NeMo runs its greedy search for 1).
        durations: TDT duration values (None: RNN-T).
        score_norm: pick the answer by score per label.
        blank_penalty: subtracted from the blank logit (0: NeMo's search).

    Shapes:
        enc: (B, T, D), enc_lens: (B,)
    """
    if beam_size < 2:
        raise ValueError(f"beam_size must be >= 2 for NeMo's beam search, got {beam_size}")
    enc_proj = joint.project_encoder(enc)  # (B, T, J)
    out = BeamResult([], [], [])
    for row, n in enumerate(enc_lens.tolist()):
        run = _tdt_row if durations else _rnnt_row
        hyps = run(joint, predictor, enc_proj[row, : int(n)], blank_id, beam_size, durations, blank_penalty)
        best = _pick(hyps, score_norm)
        out.tokens.append(list(best.labels))
        out.frames.append(list(best.frames))
        out.scores.append(best.score)
    return out


def _joint_logits(joint, frame: torch.Tensor, pred: torch.Tensor, blank: int, penalty: float) -> torch.Tensor:
    logits = joint.join(frame[None], pred)[0]  # (V [+ D],)
    if penalty:
        logits[blank] -= penalty
    return logits


def _rnnt_row(joint, predictor, enc_proj, blank, beam, _durations, penalty) -> list[_Hyp]:
    vocab = joint.vocab_size
    beam = min(beam, vocab - 1)  # NeMo bounds the beam by its vocabulary (blank not counted) ...
    beam_k = min(beam, vocab - 2)  # ... and the labels tried by one less
    labels_only = torch.tensor([i for i in range(vocab) if i != blank], device=enc_proj.device)
    predict = _Predictions(predictor, enc_proj.device)
    kept = [_Hyp(0.0, (), ())]
    for t in range(enc_proj.shape[0]):
        hyps, kept = kept, []
        while True:
            best = _pop_best(hyps)
            logp = _joint_logits(joint, enc_proj[t], predict(best.labels), blank, penalty).log_softmax(dim=-1)
            top_lp, top_at = logp[labels_only].topk(beam_k)
            for lp, label in zip([*top_lp.tolist(), float(logp[blank])], [*labels_only[top_at].tolist(), blank]):
                if label == blank:
                    kept.append(_Hyp(best.score + lp, best.labels, best.frames))
                else:
                    hyps.append(_Hyp(best.score + lp, (*best.labels, label), (*best.frames, t)))
            ceiling = max(h.score for h in hyps)
            better = sorted((h for h in kept if h.score > ceiling), key=lambda h: h.score)
            if len(better) >= beam:
                kept = better
                break
    return kept


def _tdt_row(joint, predictor, enc_proj, blank, beam, durations, penalty) -> list[_Hyp]:
    vocab = joint.vocab_size
    beam = min(beam, vocab - 1)
    beam_k = min(beam, vocab - 2)
    dur_k = min(beam, len(durations))
    zero = durations.index(0) if 0 in durations else None
    shortest = min((d, i) for i, d in enumerate(durations) if d != 0)[1]
    predict = _Predictions(predictor, enc_proj.device)
    kept = [_Hyp(0.0, (), (), 0)]
    for t in range(enc_proj.shape[0]):
        hyps = [h for h in kept if h.frame == t]
        kept = [h for h in kept if h.frame > t]
        while hyps:
            best = _pop_best(hyps)
            logits = _joint_logits(joint, enc_proj[t], predict(best.labels), blank, penalty)
            logp, dur_lp = logits[:vocab].log_softmax(dim=-1), logits[vocab:].log_softmax(dim=-1)
            tok_lp, tok_at = logp[:-1].topk(beam_k)
            d_lp, d_at = dur_lp.topk(dur_k)
            pair_lp, pair_at = (d_lp[:, None] + tok_lp[None, :]).reshape(-1).topk(beam_k)  # duration-major pairs
            for lp, at in zip(pair_lp.tolist(), pair_at.tolist()):
                label, d = int(tok_at[at % beam_k]), durations[int(d_at[at // beam_k])]
                new = _Hyp(best.score + lp, (*best.labels, label), (*best.frames, t), best.frame + d)
                (hyps if d == 0 else kept).append(new)
            for i in d_at.tolist():
                if i == zero:
                    if len(d_at) > 1:
                        continue
                    i = shortest
                score = best.score + float(logp[blank]) + float(dur_lp[i])
                kept.append(_Hyp(score, best.labels, best.frames, best.frame + durations[i]))
            kept = _merge(kept)
            if hyps:
                ceiling = max(h.score for h in hyps)
                better = sorted((h for h in kept if h.score > ceiling), key=lambda h: h.score)
                if len(better) >= beam:
                    kept = better
                    break
            else:
                kept = _best_first(kept, beam)
    return kept


@torch.no_grad()
def maes_search(
    joint: AdditiveJoint,
    predictor: LstmPredictor,
    enc: torch.Tensor,
    enc_lens: torch.Tensor,
    *,
    blank_id: int,
    beam_size: int,
    durations: Sequence[int] | None = None,
    num_steps: int = 2,
    prefix_alpha: int = 1,
    expansion_gamma: float = 2.3,
    expansion_beta: int = 2,
    score_norm: bool = True,
    blank_penalty: float = 0.0,
) -> BeamResult:
    """NeMo's ``maes`` (modified adaptive expansion search, see the module notes), row by row.

    Args:
        beam_size: hypotheses kept (> 1; NeMo runs its greedy search for 1 on RNN-T).
        durations: TDT duration values (None: RNN-T).
        num_steps: expansion steps per frame (NeMo's ``maes_num_steps``, >= 2 for RNN-T, >= 1 TDT).
        prefix_alpha: the longest label difference of a prefix merged in (``maes_prefix_alpha``).
        expansion_gamma: expansions within this log-probability of the best (``maes_expansion_gamma``).
        expansion_beta: candidates beyond the beam (``maes_expansion_beta``).
        score_norm: pick the answer by score per label.
        blank_penalty: subtracted from the blank logit (0: NeMo's search).

    Shapes:
        enc: (B, T, D), enc_lens: (B,)
    """
    vocab = joint.vocab_size
    if beam_size < 2:
        raise ValueError(f"beam_size must be >= 2 for NeMo's maes, got {beam_size}")
    if num_steps < (1 if durations else 2) or prefix_alpha < 0 or expansion_beta < 0:
        raise ValueError(
            f"maes: num_steps={num_steps} (>= {1 if durations else 2}), prefix_alpha={prefix_alpha} (>= 0), "
            f"expansion_beta={expansion_beta} (>= 0)"
        )
    if vocab - 1 < beam_size + expansion_beta:
        raise ValueError(
            f"maes: beam_size ({beam_size}) + expansion_beta ({expansion_beta}) exceeds the {vocab - 1} labels"
        )
    enc_proj = joint.project_encoder(enc)  # (B, T, J)
    settings = (blank_id, beam_size, num_steps, prefix_alpha, expansion_gamma, expansion_beta, blank_penalty)
    out = BeamResult([], [], [])
    for row, n in enumerate(enc_lens.tolist()):
        search = _MaesRow(joint, predictor, enc_proj[row, : int(n)], durations, *settings)
        best = _pick(search.run(), score_norm)
        out.tokens.append(list(best.labels))
        out.frames.append(list(best.frames))
        out.scores.append(best.score)
    return out


class _MaesRow:
    """NeMo's maes over one row's projected encoder frames (T, J)."""

    def __init__(self, joint, predictor, enc_proj, durations, blank, beam, steps, alpha, gamma, beta, penalty):
        self.joint, self.enc_proj, self.durations = joint, enc_proj, durations
        self.blank, self.steps, self.alpha, self.gamma, self.penalty = blank, steps, alpha, gamma, penalty
        self.vocab = joint.vocab_size
        self.beam = min(beam, self.vocab - 1)
        self.candidates = beam + beta
        self.predict = _Predictions(predictor, enc_proj.device)
        if durations:
            self.zero = durations.index(0) if 0 in durations else None
            self.shortest = min((d, i) for i, d in enumerate(durations) if d != 0)[1]

    def log_probs(self, t: int, hyps: list[_Hyp]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Label (H, V) and, for TDT, duration (H, D) log-probabilities of ``hyps`` at frame ``t``."""
        preds = self.predict.many([h.labels for h in hyps])  # (H, J)
        logits = self.joint.join(self.enc_proj[t][None].expand_as(preds), preds)
        if self.penalty:
            logits[:, self.blank] -= self.penalty
        if not self.durations:
            return logits.log_softmax(dim=-1), None
        return logits[:, : self.vocab].log_softmax(dim=-1), logits[:, self.vocab :].log_softmax(dim=-1)

    def prefix_search(self, t: int, hyps: list[_Hyp]) -> list[_Hyp]:
        """Add to each hypothesis the paths through a shorter one that is its prefix (in place)."""
        for j, longer in enumerate(hyps[:-1]):
            for shorter in hyps[j + 1 :]:
                n, m = len(longer.labels), len(shorter.labels)
                if not (m < n and longer.labels[:m] == shorter.labels and n - m <= self.alpha):
                    continue
                score = shorter.score
                for k in range(m, n):
                    lp, dur_lp = self.log_probs(t, [_Hyp(0.0, longer.labels[:k], ())])
                    step = lp[0, longer.labels[k]]
                    score += float(step if dur_lp is None else step + dur_lp[0, self.zero])
                longer.score = float(np.logaddexp(longer.score, score))
        return hyps

    def run(self) -> list[_Hyp]:
        return self._tdt() if self.durations else self._rnnt()

    def _rnnt(self) -> list[_Hyp]:
        kept = [_Hyp(0.0, (), ())]
        for t in range(self.enc_proj.shape[0]):
            hyps = self.prefix_search(t, sorted(kept, key=lambda h: len(h.labels), reverse=True))
            seen = {h.labels for h in hyps}
            blanks: list[_Hyp] = []
            for n in range(self.steps):
                lp, _ = self.log_probs(t, hyps)
                top_lp, top_at = lp.topk(self.candidates, dim=-1)
                grown: list[_Hyp] = []
                for i, h in enumerate(hyps):
                    cands = [(k, h.score + v) for k, v in zip(top_at[i].tolist(), top_lp[i].tolist())]
                    best = max(cands, key=lambda c: c[1])
                    near = sorted((c for c in cands if best[1] - self.gamma <= c[1]), key=lambda c: c[1]) or [best]
                    for k, score in near:
                        if k == self.blank:
                            blanks.append(_Hyp(score, h.labels, h.frames))
                        elif (*h.labels, k) not in seen:
                            grown.append(_Hyp(score, (*h.labels, k), (*h.frames, t)))
                if not grown:
                    kept = _best_first(blanks, self.beam)
                    break
                if n < self.steps - 1:
                    hyps = grown
                    continue
                lp, _ = self.log_probs(t, grown)
                for i, h in enumerate(grown):
                    h.score += float(lp[i, self.blank])
                kept = _best_first(blanks + grown, self.beam)
        return kept

    def _tdt(self) -> list[_Hyp]:
        durations, c = self.durations, self.candidates
        kept = [_Hyp(0.0, (), (), 0)]
        for t in range(self.enc_proj.shape[0]):
            hyps = [h for h in kept if h.frame == t]
            kept = [h for h in kept if h.frame > t]
            if not hyps:
                continue
            if self.zero is not None:
                hyps = self.prefix_search(t, sorted(hyps, key=lambda h: len(h.labels), reverse=True))
            blanks: list[_Hyp] = []
            moved: list[_Hyp] = []  # labels with a duration > 0
            for n in range(self.steps):
                lp, dur_lp = self.log_probs(t, hyps)
                top_lp, top_at = lp.topk(c, dim=-1)
                pair = (dur_lp[:, :, None] + top_lp[:, None, :]).view(len(hyps), -1)  # (H, D * C), duration-major
                pair_lp, pair_at = pair.topk(c, dim=-1)
                near = pair_lp >= pair_lp.max(dim=-1, keepdim=True).values - self.gamma
                stay: list[_Hyp] = []  # labels of duration 0
                went: list[_Hyp] = []
                for i, h in enumerate(hyps):
                    for at in pair_at[i][near[i]].tolist():
                        k, d = int(top_at[i][at % c]), durations[at // c]
                        score = h.score + float(pair[i][at])
                        if k == self.blank:
                            blanks.append(_Hyp(score, h.labels, h.frames, h.frame + (d or durations[self.shortest])))
                        else:
                            (stay if d == 0 else went).append(_Hyp(score, (*h.labels, k), (*h.frames, t), h.frame + d))
                moved += went
                if not stay:
                    kept = _best_first(_merge(kept + blanks + moved), self.beam)
                    break
                if n < self.steps - 1:
                    hyps = _merge(stay)
                    continue
                lp, dur_lp = self.log_probs(t, stay)
                best_d = torch.max(dur_lp, dim=-1).indices.tolist()
                for i, h in enumerate(stay):
                    d = self.shortest if best_d[i] == self.zero else best_d[i]
                    h.score += float(lp[i, self.blank] + dur_lp[i, d])
                    h.frame += durations[d]
                kept = _best_first(_merge(kept + blanks + stay + moved), self.beam)
        return kept


__all__ = ["BeamResult", "default_beam_search", "maes_search", "malsd_search"]
