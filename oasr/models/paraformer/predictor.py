"""FunASR's CIF predictors: ``CifPredictorV2`` and ``CifPredictorV3`` (BiCif).

Alphas are ``relu(sigmoid(W relu(conv(h))) * smooth - noise)`` per encoder frame; a
``tail_threshold`` weight is added one frame past each row's end (the frame a trailing
token fires on). Integrate-and-fire runs as a prefix sum, as FunASR's ``cif_v1``: the
fire decisions from the float64 prefix sum of the alphas rounded to float32, each token's
acoustic embedding the difference of prefix sums of ``alpha * h`` between consecutive
fires corrected by the carried-over remainders. It always runs in at least float32.

Padded encoder frames are zeroed first, so the convolution's look-ahead and the tail
frame see zeros in a batch exactly as in a lone row (FunASR reads whatever the padded
encoder output holds there, so its batched output depends on the batch).

V3 adds the timestamp head: the CIF convolution's input (or output) upsampled
``upsample_times`` by a transposed convolution, a BLSTM (``cnn_blstm``), and its own
alpha head, rescaled to the predicted token count.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers import Conv1d, Linear
from oasr.models.paraformer.config import CifPredictorConfig


@dataclass
class CifOutput:
    """What the predictor gives the decoder and the timestamps.

    Shapes:
        embeds: (B, N, D) acoustic embeddings (N = max token count), rows past a row's
            count are zero; token_lens: (B,) int64 tokens per row (FunASR's
            ``floor(sum alphas)``); alphas: (B, T + 1) with the tail weight; fires: (B, T + 1)
            FunASR's ``cif_peak`` (1 + fraction at fire frames, the fraction elsewhere).
    """

    embeds: torch.Tensor
    token_lens: torch.Tensor
    alphas: torch.Tensor
    fires: torch.Tensor


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """CIF runs in float32, or float64 when the model does."""
    return torch.promote_types(dtype, torch.float32)


def add_tail(alphas: torch.Tensor, hidden: torch.Tensor, lens: torch.Tensor, tail: float):
    """FunASR's ``tail_process_fn`` with a mask: one more frame, ``tail`` weight at each row's end.

    Shapes:
        alphas: (B, T), hidden: (B, T, D), lens: (B,) -> (B, T + 1), (B, T + 1, D), token count (B,)
    """
    b, t = alphas.shape
    alphas = F.pad(alphas, (0, 1))
    alphas = alphas + tail * F.one_hot(lens.long(), t + 1).to(alphas.dtype)
    hidden = F.pad(hidden, (0, 0, 0, 1))
    return alphas, hidden, alphas.sum(-1).floor()


def fire_points(alphas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Integrate-and-fire decisions as FunASR's ``cif_wo_hidden_v1``.

    Returns:
        fire (B, T) bool, the remainder past the last integer at each frame (FunASR's
        ``fires - floor(fires)``), and FunASR's ``fires`` (B, T), both in the alphas' dtype.
    """
    prefix = torch.cumsum(alphas, dim=1, dtype=torch.float64).to(torch.float32)
    floor = prefix.floor()
    before = torch.cat([prefix.new_zeros(prefix.shape[0], 1), floor[:, :-1]], dim=1)
    fire = (floor - before) > 0
    fires = fire.to(alphas.dtype) + prefix - floor  # FunASR's order of the sums
    return fire, fires - fires.floor(), fires


def integrate_fire(hidden: torch.Tensor, alphas: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Acoustic embeddings at the fire frames (FunASR's ``cif_v1``), vectorised.

    Token k of a row integrates ``alpha * h`` from just after fire k-1 to fire k, plus the
    remainder of fire k-1's frame, minus the part of fire k's frame that spills over.

    Shapes:
        hidden: (B, T, D), alphas: (B, T) -> embeds (B, width, D), fires (B, T)
    """
    b, t, d = hidden.shape
    fire, frac, fires = fire_points(alphas)
    out = hidden.new_zeros(b, width, d)
    rows, frames = fire.nonzero(as_tuple=True)
    if rows.numel() == 0:
        return out, fires
    prefix = torch.cumsum(alphas[..., None] * hidden, dim=1)  # (B, T, D)
    at_fire = prefix[rows, frames]  # (N, D)
    spill = frac[rows, frames].to(hidden.dtype)[:, None] * hidden[rows, frames]  # (N, D)
    counts = fire.sum(1)
    starts = torch.cumsum(counts, 0) - counts
    k = torch.arange(rows.numel(), device=rows.device) - starts[rows]
    first = (k == 0)[:, None]
    prev_at = torch.where(first, torch.zeros_like(at_fire), at_fire.roll(1, 0))
    prev_spill = torch.where(first, torch.zeros_like(spill), spill.roll(1, 0))
    emb = at_fire - prev_at + prev_spill - spill
    keep = k < width
    out[rows[keep], k[keep]] = emb[keep]
    return out, fires


class CifPredictor(nn.Module):
    """``CifPredictorV2`` / ``CifPredictorV3`` with FunASR's parameter names
    (``cif_conv1d``, ``cif_output``; V3: ``upsample_cnn``, ``blstm``, ``cif_output2``).

    The V3 head uses ``nn.ConvTranspose1d`` and ``nn.LSTM`` directly: the waist has neither,
    and this timestamp-only head is the one user.
    """

    def __init__(self, d_model: int, cfg: CifPredictorConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.cif_conv1d = Conv1d(d_model, d_model, cfg.l_order + cfg.r_order + 1)
        self.cif_output = Linear(d_model, 1)
        if cfg.bicif:
            u = cfg.upsample_times
            self.upsample_cnn = nn.ConvTranspose1d(d_model, d_model, u, u)
            if cfg.upsample_type == "cnn_blstm":
                self.blstm = nn.LSTM(d_model, d_model, 1, bias=True, batch_first=True, bidirectional=True)
                self.cif_output2 = Linear(2 * d_model, 1)
            else:
                self.cif_output2 = Linear(d_model, 1)

    def _apply(self, fn, recurse: bool = True):
        """Casts keep the predictor's weights in at least float32: the CIF always integrates
        in float32, and the alphas it integrates come from these heads (a few D x D weights)."""
        super()._apply(fn, recurse)
        for p in self.parameters():
            if p.is_floating_point() and p.dtype not in (torch.float32, torch.float64):
                p.data = p.data.float()
        return self

    def _conv(self, hidden: torch.Tensor) -> torch.Tensor:
        """relu(conv) over (B, D, T) with FunASR's (l_order, r_order) zero padding."""
        return F.relu(self.cif_conv1d(F.pad(hidden.transpose(1, 2), (self.cfg.l_order, self.cfg.r_order))))

    @staticmethod
    def _masked(hidden: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        valid = torch.arange(hidden.shape[1], device=hidden.device)[None, :] < lens[:, None]
        return hidden * valid[..., None].to(hidden.dtype)

    def alphas(self, hidden: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        """Per-frame weights before the tail (zero past each row's length).

        Shapes:
            hidden: (B, T, D) encoder output, lens: (B,) -> (B, T) in the CIF dtype
        """
        return self._alphas(self._masked(hidden, lens).to(work_dtype(hidden.dtype)), lens)

    def _alphas(self, masked: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        logits = self.cif_output(self._conv(masked).transpose(1, 2)).squeeze(-1)
        a = F.relu(torch.sigmoid(logits) * self.cfg.smooth_factor - self.cfg.noise_threshold)
        valid = torch.arange(masked.shape[1], device=masked.device)[None, :] < lens[:, None]
        return a * valid.to(a.dtype)

    def forward(self, hidden: torch.Tensor, lens: torch.Tensor) -> CifOutput:
        """Alphas, tail, integrate-and-fire.

        Shapes:
            hidden: (B, T, D), lens: (B,) -> ``CifOutput`` (embeds in the CIF dtype)
        """
        h = self._masked(hidden, lens).to(work_dtype(hidden.dtype))
        alphas = self._alphas(h, lens)
        if self.cfg.tail_threshold > 0.0:
            alphas, h, token_num = add_tail(alphas, h, lens, self.cfg.tail_threshold)
        else:
            token_num = alphas.sum(-1)
        token_lens = token_num.round().long()
        width = max(int(token_lens.max()) if token_lens.numel() else 0, 0)
        embeds, fires = integrate_fire(h, alphas, width)
        return CifOutput(embeds=embeds, token_lens=token_lens, alphas=alphas, fires=fires)

    def upsampled_alphas(self, hidden: torch.Tensor, lens: torch.Tensor, token_lens: torch.Tensor) -> torch.Tensor:
        """The V3 timestamp alphas (FunASR's ``get_upsample_timestamp`` ``us_alphas``): the
        upsampled head, masked, rescaled so each row sums to its token count.

        Shapes:
            hidden: (B, T, D), lens / token_lens: (B,) -> (B, T * upsample_times)
        """
        if not self.cfg.bicif:
            raise NotImplementedError("upsampled timestamp alphas need a CifPredictorV3 (BiCifParaformer)")
        dt = work_dtype(hidden.dtype)
        u = self.cfg.upsample_times
        h = self._masked(hidden, lens).to(dt)
        source = self._conv(h) if self.cfg.use_cif1_cnn else h.transpose(1, 2)
        up = self.upsample_cnn(source).transpose(1, 2)  # (B, T * u, D)
        up_lens = lens * u
        if self.cfg.upsample_type == "cnn_blstm":
            packed = nn.utils.rnn.pack_padded_sequence(
                up, up_lens.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False
            )
            out, _ = self.blstm(packed)
            up, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=up.shape[1])
        a = torch.sigmoid(self.cif_output2(up)).squeeze(-1)
        a = F.relu(a * self.cfg.smooth_factor2 - self.cfg.noise_threshold2)
        valid = torch.arange(a.shape[1], device=a.device)[None, :] < up_lens[:, None]
        a = a * valid.to(a.dtype)
        return a * (token_lens.to(a.dtype) / a.sum(-1))[:, None]
