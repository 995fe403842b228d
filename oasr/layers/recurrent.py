"""Recurrent layers: the multi-layer LSTM of transducer prediction networks.

``LSTM`` is ``torch.nn.LSTM`` (batch-first), whose fused kernels (cuDNN on a GPU, the
native fused cell on CPU) are the fast path, with its checkpoint names (``weight_ih_l0``,
``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0``, ...) kept so NeMo / Hugging Face
prediction networks load as they are.
"""

from __future__ import annotations

import torch
from torch import nn


class LSTM(nn.LSTM):
    """Batch-first multi-layer LSTM.

    Shapes:
        x: (B, T, input_size), state: ((L, B, H), (L, B, H)) or None
        -> out (B, T, H), (h (L, B, H), c (L, B, H))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True) -> None:
        super().__init__(input_size, hidden_size, num_layers=num_layers, bias=bias, batch_first=True)

    def forward(
        self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        return super().forward(x, state)


__all__ = ["LSTM"]
