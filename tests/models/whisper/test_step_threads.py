"""A decode step over one window runs on one intra-op CPU thread (the caller's count restored
after it); a step over several windows keeps every thread; the transcript is the same."""

from __future__ import annotations

import pytest
import torch

import oasr
from oasr.models.decoders.threads import one_intra_op_thread


def test_one_intra_op_thread_restores_the_count_also_after_an_error():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError), one_intra_op_thread(torch.device("cpu")):
            assert torch.get_num_threads() == 1
            raise RuntimeError
        assert torch.get_num_threads() == 2
        with one_intra_op_thread(torch.device("cpu"), enabled=False):
            assert torch.get_num_threads() == 2
        with one_intra_op_thread(torch.device("meta")):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_steps_of_one_window_run_on_one_thread(oasr_hf, clips):
    engine = oasr.ASREngine(oasr_hf, max_batch_size=2)
    decoder = engine.strategy.decoder
    seen: list[tuple[int, int]] = []
    step = decoder.step

    def watched(state, tokens):
        seen.append((state.n_groups, torch.get_num_threads()))
        return step(state, tokens)

    decoder.step = watched
    before = torch.get_num_threads()
    options = dict(beam_size=1, language="en", temperature=0.0, max_new_tokens=24)
    try:
        torch.set_num_threads(2)
        alone = [engine.transcribe(clip, **options).text for clip in clips[:2]]
        assert seen and {n for _, n in seen} == {1}
        assert torch.get_num_threads() == 2
        seen.clear()
        together = [o.text for o in engine.transcribe(clips[:2], **options)]
        assert {n for g, n in seen if g > 1} == {2}  # two windows in one step: both threads
        torch.set_num_threads(1)
        assert engine.transcribe(clips[0], **options).text == alone[0]
        assert alone == together
    finally:
        torch.set_num_threads(before)
