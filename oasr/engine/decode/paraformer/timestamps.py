"""Token times from CIF, as funasr 1.4.16 computes them (``ts_prediction_lfr6_standard``).

Plain functions over one row, so they move with the decode layer unchanged.

For the V2 predictor FunASR passes the CIF ``fires`` where the function expects alphas
and the tail alphas where it expects peaks; the peaks test (``>= 1 - 1e-4``) then seldom
finds ``tokens + 1`` fires, and the fires, rescaled to sum to ``tokens + 1``, are
integrated again by the sequential CIF. That is what its output depends on, so it is what
is reproduced here. BiCif passes the upsampled timestamp alphas and their peaks at
``upsample_rate`` 3. Fire frames are shifted by -1.5 frames; the gap before the first
token, a token longer than 12 frames and a long tail become silence.
"""

from __future__ import annotations

import numpy as np
import torch

FIRE_THRESHOLD = 1.0 - 1e-4
START_END_THRESHOLD = 5
MAX_TOKEN_DURATION = 12
FORCE_TIME_SHIFT = -1.5
SIL = "<sil>"


def sequential_cif_peaks(alphas: torch.Tensor, threshold: float = FIRE_THRESHOLD) -> torch.Tensor:
    """FunASR's loop ``cif_wo_hidden`` over one row, in float32: the integrator after each
    frame's weight is added, before a fire subtracts the threshold.

    Shapes:
        alphas: (T,) -> (T,) float32
    """
    a = alphas.detach().to(device="cpu", dtype=torch.float32).numpy()
    th = np.float32(threshold)
    out = np.empty_like(a)
    integrate = np.float32(0.0)
    for t in range(a.shape[0]):
        integrate = np.float32(integrate + a[t])
        out[t] = integrate
        if integrate >= th:
            integrate = np.float32(integrate - th)
    return torch.from_numpy(out)


def _fire_places(peaks: torch.Tensor) -> np.ndarray:
    return torch.where(peaks >= FIRE_THRESHOLD)[0].numpy() + FORCE_TIME_SHIFT


def token_times(
    us_alphas: torch.Tensor, us_peaks: torch.Tensor, n_tokens: int, upsample_rate: int = 3
) -> list[tuple[int, int]]:
    """Start and end (integer milliseconds, truncated as funasr does) of each of ``n_tokens``
    tokens; silences are not listed.

    Shapes:
        us_alphas, us_peaks: (T,) one row's weights and peaks, as funasr passes them.
    """
    if n_tokens <= 0:
        return []
    rate = 10.0 * 6 / 1000 / upsample_rate
    alphas = us_alphas.detach().cpu().float() if us_alphas.dtype != torch.float64 else us_alphas.detach().cpu()
    peaks = us_peaks.detach().cpu()
    fire = _fire_places(peaks)
    if len(fire) != n_tokens + 1:
        alphas = alphas / (alphas.sum() / (n_tokens + 1))
        peaks = sequential_cif_peaks(alphas)
        fire = _fire_places(peaks)
    num_frames = peaks.shape[0]
    spans: list[list[float]] = []
    names: list[str] = []
    if len(fire) == 0:
        return []
    if fire[0] > START_END_THRESHOLD:
        spans.append([0.0, fire[0] * rate])
        names.append(SIL)
    for i in range(len(fire) - 1):
        names.append("tok")
        if MAX_TOKEN_DURATION < 0 or fire[i + 1] - fire[i] <= MAX_TOKEN_DURATION:
            spans.append([fire[i] * rate, fire[i + 1] * rate])
        else:
            split = fire[i] + MAX_TOKEN_DURATION
            spans.append([fire[i] * rate, split * rate])
            spans.append([split * rate, fire[i + 1] * rate])
            names.append(SIL)
    if num_frames - fire[-1] > START_END_THRESHOLD:
        end = (num_frames + fire[-1]) * 0.5
        spans[-1][1] = end * rate
        spans.append([end * rate, num_frames * rate])
        names.append(SIL)
    elif spans:
        spans[-1][1] = num_frames * rate
    # funasr pairs names and spans with zip: a short fire list leaves tokens untimed.
    timed = [(int(s[0] * 1000), int(s[1] * 1000)) for name, s in zip(names, spans) if name != SIL]
    return timed[:n_tokens]


__all__ = ["sequential_cif_peaks", "token_times"]
