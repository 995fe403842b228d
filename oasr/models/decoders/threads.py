"""One intra-op thread for the small ops of a decode step on a CPU.

A decode step over one encoder window is a few rows of a few hundred values: its layer norms,
activations, attention over one window's keys and the logit filters are each far too small for a
second thread to speed up, yet torch opens an OpenMP parallel region for many of them, and every
region waits until all its threads arrive. On a quiet machine that costs a worker's wake-up per op;
beside other busy processes it costs a whole time slice whenever the worker is not running
(whisper-base on a 2-core VM under load: ``gelu`` of 2,048 values 8 us on one thread, 580 us median
on two; one window's cross-attention 0.16 ms against 3.6 ms). The step's GEMMs are bound by memory
bandwidth at these shapes and lose nothing on one thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def one_intra_op_thread(device: torch.device, enabled: bool = True) -> Iterator[None]:
    """Run the block with one intra-op thread when ``device`` is a CPU (and ``enabled``), then
    restore the calling thread's count. Results are the same as on several threads."""
    n = torch.get_num_threads()
    if not enabled or device.type != "cpu" or n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)
