"""``Embedding.logits``: the tied output projection, computed in the form MKL runs fastest
for a few rows on a CPU, equal to ``F.linear`` within float32 rounding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from oasr.layers import Embedding


@pytest.mark.parametrize("lead", [(), (1,), (3,), (2, 4), (8, 1)])
def test_logits_equal_the_linear_product(lead):
    torch.manual_seed(0)
    table = Embedding(500, 16)
    x = torch.randn(*lead, 16)
    out = table.logits(x)
    assert out.shape == (*lead, 500) and out.is_contiguous()
    torch.testing.assert_close(out, F.linear(x, table.weight), atol=1e-5, rtol=1e-5)
    half = Embedding(500, 16).to(torch.bfloat16)  # other dtypes take F.linear as it is
    assert torch.equal(half.logits(x.bfloat16()), F.linear(x.bfloat16(), half.weight))
