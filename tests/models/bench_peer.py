"""``oasr bench``'s transformers child run in the test's process, for the families' bench-peer
tests (it sets torch's thread count to the spec's; the test session's is put back)."""

from __future__ import annotations

import torch


def transformers_child(spec: dict) -> dict:
    """``oasr.cli.bench._transformers_child(spec)``: texts, token count and timings of its run."""
    from oasr.cli import bench

    threads = torch.get_num_threads()
    try:
        return bench._transformers_child(spec)
    finally:
        torch.set_num_threads(threads)
