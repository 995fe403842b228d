"""``LSTM.step`` (the transducer search's one-label step, its own CPU path) against ``nn.LSTM``'s
fused kernel on a length-1 sequence, and its cached fused weights following a weight update."""

from __future__ import annotations

import pytest
import torch

from oasr.layers import LSTM


@pytest.mark.parametrize("bias", [True, False])
def test_step_equals_the_fused_kernel(bias):
    torch.manual_seed(0)
    lstm = LSTM(12, 16, num_layers=2, bias=bias).double().eval()
    x, h, c = torch.randn(5, 12).double(), torch.randn(2, 5, 16).double(), torch.randn(2, 5, 16).double()
    with torch.no_grad():
        want, (wh, wc) = lstm(x[:, None], (h, c))
        got, (gh, gc) = lstm.step(x, h, c)
        torch.testing.assert_close(got, want[:, 0], rtol=0, atol=1e-12)
        torch.testing.assert_close((gh, gc), (wh, wc), rtol=0, atol=1e-12)
        lstm.weight_hh_l1.mul_(-2)  # in place: the fused copy must be rebuilt
        want, _ = lstm(x[:, None], (h, c))
        got, _ = lstm.step(x, h, c)
        torch.testing.assert_close(got, want[:, 0], rtol=0, atol=1e-12)
