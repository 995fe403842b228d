"""Viterbi forced alignment of label sequences to CTC log-posteriors, many rows at once.

Each row's target ``y_1..y_L`` is expanded to CTC's ``S = 2L + 1`` states (blank, y_1, blank,
y_2, ..., y_L, blank). At frame ``t`` a state is reached from the same state (stay), the state
before it (advance) or, for a label that differs from the label two states back, across the blank
between them (skip); the path of highest total log-probability that starts in the first blank or
the first label and ends in the last label or the final blank is the alignment. This is the
recursion of torchaudio's ``forced_align`` (whose CPU kernel ``ctc-forced-aligner`` carries too),
with its choices on a tie, so that paths are equal to it: at a frame, advance or skip only where it
is strictly above both others, else stay (so where advance and skip tie above stay, the path stays,
at the lower score, as torchaudio's does); at the end the final blank only where it is strictly above
the last label.

Rows are independent: a padded batch gives each row, with its own frame count and target, exactly
what it gets alone. The recursion runs frame by frame over every row's states at once
(``(B, S)`` NumPy arrays; the states' emissions gathered 64 frames at a time), so the work is
``O(T * S)`` per row and the memory the ``(B, T, S)`` one-byte back-pointers: align long audio
in pieces (``oasr.alignment.aligner`` aligns within segments).
"""

from __future__ import annotations

import numpy as np
import torch

from oasr.models.decoders.threads import one_intra_op_thread

NEG_INF = float("-inf")
EMIT_CHUNK = 64  # frames whose emissions are gathered at once


class AlignmentError(ValueError):
    """A target that cannot be aligned to its frames (too long, or only through impossible frames)."""


def _repeats(targets: torch.Tensor, target_lengths: torch.Tensor) -> torch.Tensor:
    """Per row, how many labels equal the one before them (each needs a blank frame between)."""
    if targets.shape[1] < 2:
        return torch.zeros(targets.shape[0], dtype=torch.long)
    same = targets[:, 1:] == targets[:, :-1]  # (B, L - 1)
    valid = torch.arange(1, targets.shape[1])[None, :] < target_lengths[:, None]
    return (same & valid).sum(dim=1)


def check_inputs(
    log_probs: torch.Tensor,
    targets: torch.Tensor,
    input_lengths: torch.Tensor,
    target_lengths: torch.Tensor,
    blank: int,
) -> None:
    """Refuse what ``forced_align`` cannot align, naming the row and the reason.

    Raises:
        ValueError: bad shapes, lengths, or a label out of range or equal to the blank.
        AlignmentError: a row whose target needs more frames than it has.
    """
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs must be (B, T, V), got {tuple(log_probs.shape)}")
    b, t, v = log_probs.shape
    if targets.dim() != 2 or targets.shape[0] != b:
        raise ValueError(f"targets must be (B={b}, L), got {tuple(targets.shape)}")
    if input_lengths.shape != (b,) or target_lengths.shape != (b,):
        raise ValueError(f"input_lengths and target_lengths must be ({b},)")
    if not 0 <= blank < v:
        raise ValueError(f"blank={blank} is not an index of the {v} classes")
    if bool((input_lengths < 0).any()) or bool((input_lengths > t).any()):
        raise ValueError(f"input_lengths must be within [0, {t}], got {input_lengths.tolist()}")
    if bool((target_lengths < 0).any()) or bool((target_lengths > targets.shape[1]).any()):
        raise ValueError(f"target_lengths must be within [0, {targets.shape[1]}], got {target_lengths.tolist()}")
    valid = torch.arange(targets.shape[1])[None, :] < target_lengths[:, None]
    labels = targets[valid]
    if labels.numel() and (bool((labels < 0).any()) or bool((labels >= v).any())):
        raise ValueError(f"target labels must be within [0, {v}), got {sorted(set(labels.tolist()))}")
    if bool((labels == blank).any()):
        raise ValueError(f"a target holds the blank index {blank}")
    need = target_lengths + _repeats(targets, target_lengths)
    short = (need > input_lengths).nonzero().flatten().tolist()
    if short:
        r = short[0]
        raise AlignmentError(
            f"row {r}: {int(target_lengths[r])} labels ({int(need[r] - target_lengths[r])} repeated) need at least "
            f"{int(need[r])} frames, and the row has {int(input_lengths[r])}: the text is too long for the audio"
        )


def forced_align(
    log_probs: torch.Tensor,
    targets: torch.Tensor,
    input_lengths: torch.Tensor | None = None,
    target_lengths: torch.Tensor | None = None,
    blank: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Viterbi path of each row's target through its CTC log-probabilities.

    Args:
        log_probs: CTC log-probabilities, padded past each row's length.
        targets: label ids, padded past each row's length (any value there).
        input_lengths: frames per row (default: all T).
        target_lengths: labels per row (default: all L).
        blank: the blank's index.

    Returns:
        paths: each frame's label (blank past a row's length); scores: each frame's
        log-probability of that label (0 past a row's length). A row with no labels is all blank.

    Shapes:
        log_probs: (B, T, V), targets: (B, L), lengths: (B,) -> paths (B, T) int64, scores (B, T)

    Raises:
        ValueError / AlignmentError: as ``check_inputs``; AlignmentError for a row whose every path
        crosses a frame of log-probability -inf.
    """
    b, t_max, _ = log_probs.shape
    device = log_probs.device
    targets = targets.to(device=device, dtype=torch.long)
    if input_lengths is None:
        input_lengths = torch.full((b,), t_max, dtype=torch.long)
    if target_lengths is None:
        target_lengths = torch.full((b,), targets.shape[1], dtype=torch.long)
    input_lengths = input_lengths.to("cpu", torch.long)
    target_lengths = target_lengths.to("cpu", torch.long)
    # a frame's work is a few small ops: waking a CPU thread pool for each costs more than it saves
    with one_intra_op_thread(device):
        check_inputs(log_probs, targets.cpu(), input_lengths, target_lengths, blank)
        return _forward(log_probs, targets, input_lengths, target_lengths, blank)


def _forward(
    log_probs: torch.Tensor,
    targets: torch.Tensor,
    input_lengths: torch.Tensor,
    target_lengths: torch.Tensor,
    blank: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The recursion over every row at once, then the backtrack (``forced_align``'s arguments,
    checked). NumPy on the CPU: a frame is a dozen small array ops, where each torch op's dispatch
    would cost more than its work (and on a GPU as much in kernel launches)."""
    b, t_max, _ = log_probs.shape
    wide = log_probs.dtype == torch.float64
    dtype = np.float64 if wide else np.float32
    lp = log_probs.detach().to("cpu", torch.float64 if wide else torch.float32).numpy()
    n_states = 2 * targets.shape[1] + 1
    ext = np.full((b, n_states), blank, dtype=np.int64)  # (B, S) each state's label
    in_target = np.arange(targets.shape[1])[None, :] < target_lengths.numpy()[:, None]
    ext[:, 1::2] = np.where(in_target, targets.cpu().numpy(), blank)
    skip = np.full((b, n_states), NEG_INF, dtype=dtype)  # 0 where the skip is allowed
    if n_states > 3:
        skip[:, 3::2] = np.where(ext[:, 3::2] != ext[:, 1:-2:2], 0.0, NEG_INF)
    # alpha with two -inf states in front: the advance and skip candidates are shifted views of it
    alpha = np.full((b, n_states + 2), NEG_INF, dtype=dtype)
    alpha[:, 2:4] = np.take_along_axis(lp[:, 0], ext[:, :2], axis=1)
    back = np.zeros((b, t_max, n_states), dtype=np.int8)  # 0 stay, 1 advance, 2 skip
    final = alpha[:, 2:].copy()  # each row's alphas at its last frame
    last = (input_lengths - 1).tolist()
    ends: dict[int, list[int]] = {}
    for row, t_end in enumerate(last):
        ends.setdefault(t_end, []).append(row)
    emit = np.empty((b, 0, n_states), dtype=dtype)
    for t in range(1, max(last, default=0) + 1):
        if (t - 1) % EMIT_CHUNK == 0:  # each state's emission, a chunk of frames at a time
            emit = np.take_along_axis(lp[:, t : t + EMIT_CHUNK], ext[:, None, :], axis=2)  # (B, chunk, S)
        stay, advance, across = alpha[:, 2:], alpha[:, 1:-1], alpha[:, :-2] + skip
        # torchaudio's kernel moves only to a strict maximum of the three: advance tied with skip stays
        top = np.maximum(advance, across)
        move = top > stay
        move &= advance != across
        jump = across > advance
        jump &= move
        best = np.where(move, top, stay)
        np.add(move, jump, out=back[:, t], dtype=np.int8, casting="unsafe")  # 0 stay, 1 advance, 2 skip
        np.add(best, emit[:, (t - 1) % EMIT_CHUNK], out=alpha[:, 2:])
        rows = ends.get(t)
        if rows is not None:
            final[rows] = alpha[rows, 2:]
    return _backtrack(log_probs, final, back, ext, input_lengths, target_lengths, blank)


def _backtrack(
    log_probs: torch.Tensor,
    final: np.ndarray,
    back: np.ndarray,
    ext: np.ndarray,
    input_lengths: torch.Tensor,
    target_lengths: torch.Tensor,
    blank: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's path from its better end state back to frame 0 (on the CPU: one short step a frame)."""
    b, t_max, _ = log_probs.shape
    rows = np.arange(b)
    lengths = target_lengths.numpy()
    end_blank = 2 * lengths
    end_label = np.maximum(end_blank - 1, 0)
    a_blank, a_label = final[rows, end_blank], final[rows, end_label]
    state = np.where((lengths == 0) | (a_blank > a_label), end_blank, end_label)
    dead = (np.maximum(a_blank, a_label) == NEG_INF) & (input_lengths.numpy() > 0)
    if dead.any():
        r = int(np.flatnonzero(dead)[0])
        raise AlignmentError(f"row {r}: every path of its target crosses a frame of probability 0 (log-prob -inf)")
    paths = torch.full((b, t_max), blank, dtype=torch.long)
    paths_np = paths.numpy()
    for row, n in enumerate(input_lengths.tolist()):  # scalar steps: cheaper than a batched gather a frame
        s, back_row, ext_row, path_row = int(state[row]), back[row], ext[row], paths_np[row]
        for t in range(n - 1, -1, -1):
            path_row[t] = ext_row[s]
            s -= int(back_row[t, s])
    live = torch.arange(t_max)[None, :] < input_lengths[:, None]  # (B, T)
    scores = log_probs.detach().cpu().gather(2, paths[..., None])[..., 0]
    scores = torch.where(live, scores, torch.zeros((), dtype=scores.dtype))
    return paths.to(log_probs.device), scores.to(log_probs.device)


__all__ = ["AlignmentError", "check_inputs", "forced_align"]
