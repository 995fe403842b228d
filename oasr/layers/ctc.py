"""The CTC output projection: ``log_softmax(x @ W.T + b)`` in one module, and the
best path of greedy decoding (``best_path``) straight from the logits.

The weight is allocated at a GEMM-aligned width (``align_out_features``); the
padding rows carry a ``PAD_LOGIT`` bias so they never win an argmax, and are cut
off before the log-softmax, so the log-probs are over the real vocabulary exactly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from oasr.layers.linear import Linear

GEMM_ALIGNMENT = 8
PAD_LOGIT = -1.0e4  # finite (fp16-safe) and far below any real logit: padding never wins argmax


def align_out_features(n: int, multiple: int = GEMM_ALIGNMENT) -> int:
    """Round an output width up to the GEMM alignment."""
    return int(math.ceil(n / multiple) * multiple)


def pad_output_projection(
    weight: torch.Tensor, bias: torch.Tensor | None, multiple: int = GEMM_ALIGNMENT
) -> tuple[torch.Tensor, torch.Tensor]:
    """Widen an output projection to an aligned width.

    Padding rows get zero weights and a ``PAD_LOGIT`` bias, so they can never win
    an argmax and contribute ~nothing to a softmax.

    Shapes:
        weight: (V, D), bias: (V,) or None -> (V', D), (V',) with V' = align(V)
    """
    v, d = weight.shape
    v_pad = align_out_features(v, multiple)
    if bias is None:
        bias = torch.zeros(v, dtype=weight.dtype, device=weight.device)
    if v_pad == v:
        return weight, bias
    w = torch.zeros(v_pad, d, dtype=weight.dtype, device=weight.device)
    w[:v] = weight
    b = torch.full((v_pad,), PAD_LOGIT, dtype=bias.dtype, device=bias.device)
    b[:v] = bias
    return w, b


def _aligned(n: int) -> int:
    return align_out_features(n)


class CtcProjection(Linear):
    """Linear head + log-softmax over the vocabulary (computed in float32).

    Args:
        d_model: encoder width.
        vocab_size: real vocabulary size V (blank included).
        bias: whether the projection has a bias.

    Shapes:
        x: (..., d_model) -> log-probs (..., V) float32
    """

    def __init__(self, d_model: int, vocab_size: int, bias: bool = True) -> None:
        # A padded head always has a bias: it is what keeps the padding rows from winning.
        super().__init__(d_model, _aligned(vocab_size), bias=bias or _aligned(vocab_size) != vocab_size)
        self.vocab_size = vocab_size
        self.padded_size = self.out_features
        if self.padded_size != vocab_size:
            with torch.no_grad():
                self.weight[vocab_size:].zero_()
                if self.bias is not None:
                    self.bias[vocab_size:].fill_(PAD_LOGIT)

    def adapt_checkpoint(self, prefix: str, state_dict):
        """The load hook (``BaseAsrModel.load_weights``): a checkpoint's (V, D) head under
        ``prefix`` widened to the allocated GEMM-aligned width.

        Raises:
            ValueError: the checkpoint's head does not have the model's vocabulary.
        """
        weight = state_dict.get(f"{prefix}weight")
        if self.padded_size == self.vocab_size or weight is None or weight.shape[0] == self.padded_size:
            return state_dict
        state = dict(state_dict)
        state[f"{prefix}weight"], bias = self.pad_checkpoint(weight, state.get(f"{prefix}bias"))
        if bias is not None:
            state[f"{prefix}bias"] = bias
        return state

    def pad_checkpoint(
        self, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Widen a checkpoint's (V, D) weight / (V,) bias (or None) to the allocated width.

        A bias-free head that needed padding gets a zero bias for the real rows.
        """
        if weight.shape[0] != self.vocab_size:
            raise ValueError(f"CTC head has {weight.shape[0]} rows; the model's vocabulary is {self.vocab_size}")
        if self.padded_size == self.vocab_size:
            return weight, bias
        return pad_output_projection(weight, bias)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Raw scores over the real vocabulary (no log-softmax)."""
        return F.linear(x, self.weight, self.bias)[..., : self.vocab_size]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits(x).float().log_softmax(dim=-1)

    def best_path(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each frame's most likely symbol and its log-probability, for greedy decoding:
        the logits' max and log-sum-exp, without the (..., V) log-probs (which greedy
        decoding never reads, and which need not leave the device).

        Shapes:
            x: (..., d_model) -> log-prob (...,) float32, id (...,) int64
        """
        logits = self.logits(x)
        top, ids = logits.max(dim=-1)
        return top.float() - torch.logsumexp(logits.float(), dim=-1), ids

    def extra_repr(self) -> str:
        return super().extra_repr() + f", vocab={self.vocab_size}"
