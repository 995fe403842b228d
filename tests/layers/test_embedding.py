"""``Embedding(tied_output=True)``: the table stored column-major for the logits product,
with lookups, logits, loading, casts and moves unchanged in value."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from oasr.layers import Embedding


def test_tied_output_table_is_column_major_and_equal_in_value():
    torch.manual_seed(0)
    table = torch.randn(50, 8)
    tied, plain = Embedding(50, 8, tied_output=True), Embedding(50, 8)
    assert tied.weight.shape == (50, 8) and tied.weight.stride() == (1, 50)  # the (D, V) transpose, contiguous
    assert plain.weight.is_contiguous()
    with torch.no_grad():
        tied.weight.copy_(table)  # what load_weights does
        plain.weight.copy_(table)
    ids = torch.tensor([[3, 49, 0], [7, 7, 12]])
    assert torch.equal(tied(ids), plain(ids))
    x = torch.randn(2, 8)
    torch.testing.assert_close(tied.logits(x), F.linear(x, table), atol=1e-5, rtol=0)
    half = tied.to(torch.float16)
    assert half.weight.stride() == (1, 50) and torch.equal(half.weight.float(), table.half().float())
