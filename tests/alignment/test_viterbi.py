"""``oasr.alignment.viterbi.forced_align`` against torchaudio's forced-alignment kernel as
ctc-forced-aligner ships it (``align_sequences``: torchaudio's CPU kernel, batch of one; torchaudio's
own compiled kernel is not loadable beside this torch), row by row, and a padded batch against
its rows alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.alignment.viterbi import AlignmentError, forced_align

align_ops = pytest.importorskip("ctc_forced_aligner.ctc_aligner", reason="ctc-forced-aligner is the reference")


def _cases(seed: int, n: int, ties: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random (T, V) log-probs and targets with repeated labels; with ``ties``, log-probs of a few
    integer values (exact ties everywhere), else continuous ones."""
    g = torch.Generator().manual_seed(seed)
    cases = []
    for _ in range(n):
        v = int(torch.randint(3, 7, (1,), generator=g))
        length = int(torch.randint(1, 10, (1,), generator=g))
        target = torch.randint(1, v, (length,), generator=g)
        repeats = int((target[1:] == target[:-1]).sum())
        # the reference's back-pointer buffer is (S + 1) x (T - L): it needs T > L
        frames = length + repeats + int(torch.randint(0 if repeats else 1, 10, (1,), generator=g))
        if ties:
            log_probs = torch.randint(-2, 1, (frames, v), generator=g).float()
        else:
            log_probs = (3 * torch.randn(frames, v, generator=g)).log_softmax(-1)
        cases.append((log_probs, target))
    return cases


@pytest.mark.parametrize("ties", [False, True], ids=["continuous", "ties"])
def test_paths_equal_torchaudios_kernel(ties):
    for log_probs, target in _cases(7 + ties, 60, ties):
        ref, _ = align_ops.align_sequences(log_probs[None].numpy(), target[None].numpy(), 0)
        path, scores = forced_align(log_probs[None], target[None])
        np.testing.assert_array_equal(path[0].numpy(), ref[0])
        # torchaudio.functional.forced_align's scores: each frame's log-prob of its label
        torch.testing.assert_close(scores[0], log_probs.gather(1, path[0][:, None])[:, 0], rtol=0, atol=0)


def test_a_padded_batch_gives_each_row_its_own_path():
    cases = _cases(3, 12, ties=False)
    b = len(cases)
    t_max = max(lp.shape[0] for lp, _ in cases)
    l_max = max(len(t) for _, t in cases)
    log_probs = torch.randn(b, t_max, 7).log_softmax(-1)  # padding: other values past each row's end
    targets = torch.full((b, l_max), 5)
    for row, (lp, t) in enumerate(cases):
        log_probs[row, : lp.shape[0]] = torch.cat([lp, torch.full((lp.shape[0], 7 - lp.shape[1]), -1e9)], 1)
        targets[row, : len(t)] = t
    lens = torch.tensor([lp.shape[0] for lp, _ in cases])
    paths, scores = forced_align(log_probs, targets, lens, torch.tensor([len(t) for _, t in cases]))
    for row, (lp, t) in enumerate(cases):
        alone, alone_scores = forced_align(lp[None], t[None])
        assert torch.equal(paths[row, : lp.shape[0]], alone[0])
        assert torch.equal(scores[row, : lp.shape[0]], alone_scores[0])
        assert bool((paths[row, lp.shape[0] :] == 0).all()) and bool((scores[row, lp.shape[0] :] == 0).all())


def test_blanks_and_repeats_are_where_the_posteriors_put_them():
    # frames: a a _ a b b _ ; the target a a b needs the blank between the two a's
    peaks = [1, 1, 0, 1, 2, 2, 0]
    log_probs = torch.full((len(peaks), 3), -10.0)
    log_probs[torch.arange(len(peaks)), torch.tensor(peaks)] = -0.01
    path, _ = forced_align(log_probs[None], torch.tensor([[1, 1, 2]]))
    assert path[0].tolist() == peaks


def test_a_target_too_long_for_its_frames_is_a_clear_error():
    log_probs = torch.randn(2, 4, 5).log_softmax(-1)
    targets = torch.tensor([[1, 2, 0], [3, 3, 3]])
    with pytest.raises(AlignmentError, match=r"row 1: 3 labels \(2 repeated\) need at least 5 frames.* has 4"):
        forced_align(log_probs, targets, target_lengths=torch.tensor([2, 3]))
    with pytest.raises(ValueError, match="blank index"):
        forced_align(log_probs[:1], torch.tensor([[1, 0]]))
    with pytest.raises(ValueError, match="within"):
        forced_align(log_probs[:1], torch.tensor([[1, 9]]))


def test_a_row_with_no_possible_path_is_a_clear_error():
    log_probs = torch.zeros(1, 3, 3)
    log_probs[0, :, 2] = float("-inf")
    with pytest.raises(AlignmentError, match="probability 0"):
        forced_align(log_probs, torch.tensor([[1, 2]]))
