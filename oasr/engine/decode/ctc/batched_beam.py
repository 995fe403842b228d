"""NeMo's CTC decodings without external decoders: the batched beam search of its ``beam_batch``
strategy and the greedy search of ``greedy_batch`` with a fusion model (a phrase-boosting tree,
``oasr.engine.decode.boosting``), in plain torch and batched over rows.

The beam search keeps, per row, ``beam_size`` *alignment* hypotheses, each with a score, the
label of its last frame (blank included), its collapsed transcript (as a 64-bit rolling hash)
and its number of collapsed tokens. Frame by frame:

1. every hypothesis is extended by every symbol: ``score + log_prob``; a symbol that starts a
   new token (not blank, not the last frame's label) gains ``beam_beta``, and, with a fusion
   model, ``fusion_alpha x`` its fusion score (blank and repeats gain nothing);
2. the ``beam_size`` best (hypothesis, symbol) pairs of the row survive (``topk`` over the
   flattened ``beam x vocab`` scores, in its order), and those more than ``beam_threshold``
   below the row's best are dropped (score -inf);
3. survivors with the same transcript, last label and length are merged: the best keeps the
   *maximum* of their scores (not their sum), the others are dropped.

The result is the best-scoring hypothesis, its score unnormalised (NeMo's ``beam_batch`` sorts
with ``score_norm=False``); with a fusion model that is a boosting tree no end-of-utterance bonus
is added, as in NeMo.

Where oasr departs from NeMo, on purpose: a row is searched over its own frames only. NeMo's batch
goes on past a row's length over the padding (labels dropped, scores still moved by the padded
frames' log-probs, ``beam_beta`` and the fusion scores), so a row's result there may depend on its
batch-mates; here every row's result is its result decoded alone, which is NeMo's for a batch of
one (tests/models/parakeet/test_nemo_ctc_beam.py holds both to NeMo's own classes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import torch

from oasr.engine.decode.ctc.search import CtcHypothesis, collapse_best_path

NEG_INF = float("-inf")
_HASH_MUL = 0x5851F42D4C957F2D  # a 64-bit LCG multiplier (Knuth's MMIX), wrapped to int64 below
_HASH_MUL = _HASH_MUL - (1 << 64) if _HASH_MUL >= 1 << 63 else _HASH_MUL


class FusionModel(Protocol):
    """A token-level model fused into a CTC search (NeMo's ``NGramGPULanguageModel`` interface):
    states are integer ids, scores cover the vocabulary without the blank."""

    vocab_size: int

    def initial(self, n: int, device: torch.device) -> torch.Tensor:
        """(n,) start states."""

    def advance(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores (N, V) float32 and next states (N, V) of every label from ``states`` (N,)."""


@dataclass(frozen=True)
class BeamSettings:
    """NeMo's ``decoding.beam`` knobs of ``beam_batch`` (with NeMo's ``BeamCTCInferConfig`` defaults).

    Attributes:
        beam_size: hypotheses kept per row.
        beam_beta: bonus per emitted token (word insertion bonus).
        beam_threshold: candidates more than this below the row's best are dropped.
    """

    beam_size: int = 4
    beam_beta: float = 1.0
    beam_threshold: float = 20.0

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}")
        if not self.beam_threshold > 0:
            raise ValueError(f"beam_threshold must be > 0, got {self.beam_threshold}")


def _check_fusion(fusion: FusionModel | None, vocab: int, blank_id: int) -> None:
    if fusion is None:
        return
    if blank_id != vocab - 1 or fusion.vocab_size != vocab - 1:
        raise ValueError(
            f"fusion needs the blank last and a fusion vocabulary without it: blank {blank_id}, "
            f"{vocab} outputs, fusion vocabulary {fusion.vocab_size}"
        )


def _rows(log_probs: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs must be (B, T, V), got shape {tuple(log_probs.shape)}")
    lengths = lengths.to(device=log_probs.device, dtype=torch.long).clamp(max=log_probs.shape[1])
    if lengths.shape != log_probs.shape[:1]:
        raise ValueError(f"lengths must be ({log_probs.shape[0]},), got {tuple(lengths.shape)}")
    return log_probs, lengths


@torch.inference_mode()
def ctc_batched_beam_search(
    log_probs: torch.Tensor,
    lengths: torch.Tensor,
    blank_id: int,
    settings: BeamSettings,
    fusion: FusionModel | None = None,
    fusion_alpha: float = 0.0,
    skip_ids: Iterable[int] = (),
) -> list[list[CtcHypothesis]]:
    """NeMo's ``beam_batch`` CTC search over a padded batch (see the module docstring).

    Shapes:
        log_probs: (B, T, V) log-probabilities, blank included (any float dtype; the search runs
            in it, as NeMo's does).
        lengths: (B,) valid frames of each row.

    Args:
        blank_id: the blank's index (the last one when ``fusion`` is given).
        settings: beam size, insertion bonus and pruning threshold.
        fusion: a fusion model (a boosting tree), or None.
        fusion_alpha: its weight.
        skip_ids: ids dropped from the transcripts (special tokens); the search is unchanged.

    Returns:
        per row, its surviving hypotheses best first (``score``: the beam score, fusion
        included; each token at the frame of its highest posterior in its run on the
        hypothesis' alignment).
    """
    log_probs, lengths = _rows(log_probs, lengths)
    batch, n_frames, vocab = log_probs.shape
    _check_fusion(fusion, vocab, blank_id)
    device, dtype, beam = log_probs.device, log_probs.dtype, settings.beam_size
    symbols = torch.arange(vocab, device=device)
    is_blank = symbols == blank_id
    rows = torch.arange(batch, device=device)[:, None]
    scores = torch.full((batch, beam), NEG_INF, dtype=dtype, device=device)
    scores[:, 0] = 0.0
    last = torch.full((batch, beam), -1, dtype=torch.long, device=device)  # label of the last frame
    digest = torch.zeros((batch, beam), dtype=torch.long, device=device)  # hash of the collapsed tokens
    n_tokens = torch.zeros((batch, beam), dtype=torch.long, device=device)
    states = fusion.initial(batch * beam, device).view(batch, beam) if fusion is not None else None
    parents, labels = [], []  # per frame (B, K): the source hypothesis and the label of each survivor
    for t in range(n_frames):
        active = (t < lengths)[:, None]  # (B, 1)
        repeat = last[:, :, None] == symbols  # (B, K, V)
        cand = log_probs[:, t, None, :] + scores[:, :, None]  # (B, K, V)
        cand = torch.where(repeat | is_blank, cand, cand + settings.beam_beta)
        if fusion is not None:
            f_scores, f_next = fusion.advance(states.reshape(-1))  # (B*K, V-1) each
            f_scores = torch.where(repeat[..., :-1], 0, f_scores.view(batch, beam, -1))
            cand[..., :-1] += fusion_alpha * f_scores
        top, flat = torch.topk(cand.view(batch, -1), k=beam, largest=True, sorted=True)  # (B, K)
        src, label = flat // vocab, flat % vocab
        top = top.masked_fill(top <= top.max(dim=-1, keepdim=True).values - settings.beam_threshold, NEG_INF)
        src_last = last.gather(1, src)
        new_token = (label != blank_id) & (label != src_last)
        if fusion is not None:
            moved = f_next.view(batch, beam, -1)[rows, src, torch.where(label == blank_id, 0, label)]
            states = torch.where(active, torch.where(new_token, moved, states.gather(1, src)), states)
        src_digest = digest.gather(1, src)
        new_digest = torch.where(new_token, src_digest * _HASH_MUL + 1 + label, src_digest)
        new_n = n_tokens.gather(1, src) + new_token
        new_scores = _merge(top, new_digest, label, new_n)
        keep = torch.arange(beam, device=device)
        # rows past their length keep their hypotheses as they are
        scores = torch.where(active, new_scores, scores)
        last = torch.where(active, label, last)
        digest = torch.where(active, new_digest, digest)
        n_tokens = torch.where(active, new_n, n_tokens)
        parents.append(torch.where(active, src, keep))
        labels.append(torch.where(active, label, -1))
    return _nbest(scores, parents, labels, log_probs, blank_id, frozenset(int(i) for i in skip_ids))


def _merge(scores: torch.Tensor, digest: torch.Tensor, last: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    """Scores after merging equal hypotheses (same transcript, last label and length): the first
    of the best of each class keeps the class's maximum, the rest -inf. Shapes: (B, K) each."""
    if scores.shape[1] == 1:
        return scores
    same = (
        (digest[:, :, None] == digest[:, None, :])
        & (last[:, :, None] == last[:, None, :])
        & (n_tokens[:, :, None] == n_tokens[:, None, :])
    )  # (B, K, K)
    within = torch.where(same, scores[:, None, :], NEG_INF)  # (B, K, K): row i sees its class
    best, first = within.max(dim=-1).values, within.argmax(dim=-1)
    own = torch.arange(scores.shape[1], device=scores.device)
    return torch.where(first == own, best, NEG_INF)


def _nbest(
    scores: torch.Tensor,
    parents: list[torch.Tensor],
    labels: list[torch.Tensor],
    log_probs: torch.Tensor,
    blank_id: int,
    skip: frozenset[int],
) -> list[list[CtcHypothesis]]:
    """Backtrack every hypothesis' alignment and collapse it, rows best first."""
    batch, beam = scores.shape
    order = torch.sort(scores, dim=-1, descending=True).indices  # (B, K)
    if not labels:
        return [[CtcHypothesis((), (), 0.0)] for _ in range(batch)]
    rows = torch.arange(batch, device=scores.device)[:, None]
    ptr, path = order, []
    for src, label in zip(reversed(parents), reversed(labels)):
        path.append(label[rows, ptr])
        ptr = src[rows, ptr]
    align = torch.stack(path[::-1], dim=-1)  # (B, K, T): each survivor's label per frame, -1 past its row
    frame_lp = log_probs.gather(2, align.clamp(min=0).transpose(1, 2)).transpose(1, 2)  # (B, K, T)
    ranked = scores.gather(1, order).tolist()
    align_l, frame_l = align.tolist(), frame_lp.float().tolist()
    out = []
    for b in range(batch):
        hyps = []
        for k in range(beam):
            if ranked[b][k] == NEG_INF:
                continue
            n = next((i for i, u in enumerate(align_l[b][k]) if u < 0), len(align_l[b][k]))
            h = collapse_best_path(align_l[b][k][:n], frame_l[b][k][:n], blank_id, skip)
            hyps.append(CtcHypothesis(h.tokens, h.frames, ranked[b][k]))
        out.append(hyps)
    return out


@torch.inference_mode()
def ctc_greedy_fused_search(
    log_probs: torch.Tensor,
    lengths: torch.Tensor,
    blank_id: int,
    fusion: FusionModel,
    fusion_alpha: float,
    skip_ids: Iterable[int] = (),
) -> list[CtcHypothesis]:
    """NeMo's ``greedy_batch`` CTC decoding with a fusion model: on a frame whose best symbol
    starts a new token, the token is the best non-blank symbol other than the last frame's
    label after adding ``fusion_alpha x`` the fusion scores; blank and repeats stay as they are,
    and only a new token moves the fusion state.

    Shapes:
        log_probs: (B, T, V) log-probabilities, the blank last.
        lengths: (B,) valid frames of each row.

    Returns:
        per row, the collapsed hypothesis (``score``: the sum of the chosen labels' fused
        log-probabilities over its frames).
    """
    log_probs, lengths = _rows(log_probs, lengths)
    batch, n_frames, vocab = log_probs.shape
    _check_fusion(fusion, vocab, blank_id)
    device = log_probs.device
    rows = torch.arange(batch, device=device)
    last = torch.full((batch,), blank_id, dtype=torch.long, device=device)
    states = fusion.initial(batch, device)
    chosen = torch.empty((batch, n_frames), dtype=torch.long, device=device)
    chosen_lp = torch.empty((batch, n_frames), dtype=log_probs.dtype, device=device)
    for t in range(n_frames):
        frame = log_probs[:, t]  # (B, V)
        best_lp, best = frame.max(dim=-1)
        f_scores, f_next = fusion.advance(states)
        fused = frame.clone()
        fused[:, :-1] += fusion_alpha * f_scores.to(frame.dtype)
        fused.scatter_(1, last[:, None], NEG_INF)  # never the last label again (nor blank: it is cut off)
        fused_lp, fused_label = fused[:, :-1].max(dim=-1)
        stay = (best == blank_id) | (best == last)
        label = torch.where(stay, best, fused_label)
        states = torch.where(stay, states, f_next[rows, label * ~stay])
        chosen[:, t] = label
        chosen_lp[:, t] = torch.where(stay, best_lp, fused_lp)
        last = label
    skip = frozenset(int(i) for i in skip_ids)
    out = []
    for b, n in enumerate(lengths.tolist()):
        probs = chosen_lp[b, :n].float().tolist()
        h = collapse_best_path(chosen[b, :n].tolist(), probs, blank_id, skip)
        out.append(h)
    return out


__all__ = ["BeamSettings", "FusionModel", "ctc_batched_beam_search", "ctc_greedy_fused_search"]
