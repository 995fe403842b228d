"""Sortformer's streaming forward: chunk by chunk with a FIFO of the latest frames and a speaker
cache compressed to the frames that best represent each speaker (NeMo's ``forward_streaming``
with the synchronous ``SortformerModules.streaming_update``).

Each step takes the features of one chunk of ``chunk_len`` encoder frames with up to
``chunk_left_context`` frames before and ``chunk_right_context`` after (in feature frames: 8x
those), and runs

    pre_encode(chunk) -> [speaker cache | FIFO | chunk] -> FastConformer blocks -> transformer
    -> head -> probabilities of every frame of the concatenation

The chunk's own frames' probabilities are the step's output; the chunk's pre-encoded frames join
the FIFO; when the FIFO overflows, its oldest frames (at least ``spkcache_update_period``) move
to the speaker cache, the ones predicted silent (all speakers below ``sil_threshold`` in sum)
updating the running mean silence embedding; when the cache exceeds ``spkcache_len`` it is
compressed (``compress_spkcache``): per speaker, log-probability scores of confident,
non-overlapped frames, boosted so that every speaker keeps some frames, the ``spkcache_len``
best kept in time order, with ``spkcache_sil_frames_per_spk`` slots per speaker filled by the
mean silence embedding.

The state is explicit (``StreamState``): ``step(model, params, state, chunk_feats, lc, rc)``
returns the chunk's probabilities and changes nothing else. The rows of a batch share one step
when their chunks have the same sizes (all rows but those on their last, shorter chunk); every
operation is per row, so a row gets what it gets alone (NeMo's synchronous update gives that only
for equal lengths; oasr runs a row of NeMo as a batch of one).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from oasr.diarization.sortformer.config import StreamingParams
from oasr.diarization.sortformer.model import SortformerModel

MAX_INDEX = 99999  # NeMo's placeholder index for a top-k slot that holds no frame


@dataclass
class StreamState:
    """The streaming state of a batch of rows (all rows at the same step).

    Attributes:
        spkcache: (B, n_cache, D) pre-encoded frames of the speaker cache.
        spkcache_preds: (B, n_cache, S) their probabilities, or None before the first compression
            (the cache then holds plain frames, re-scored at every step).
        fifo: (B, n_fifo, D) the latest pre-encoded frames.
        fifo_preds: (B, n_fifo, S).
        mean_sil_emb: (B, D) mean embedding of the frames predicted silent.
        n_sil_frames: (B,) how many frames that mean is over.
    """

    spkcache: torch.Tensor
    spkcache_preds: torch.Tensor | None
    fifo: torch.Tensor
    fifo_preds: torch.Tensor
    mean_sil_emb: torch.Tensor
    n_sil_frames: torch.Tensor

    @classmethod
    def initial(cls, batch: int, dim: int, speakers: int, device: torch.device, dtype: torch.dtype) -> StreamState:
        empty = torch.zeros(batch, 0, dim, device=device, dtype=dtype)
        return cls(
            spkcache=empty,
            spkcache_preds=None,
            fifo=empty,
            fifo_preds=torch.zeros(batch, 0, speakers, device=device, dtype=dtype),
            mean_sil_emb=torch.zeros(batch, dim, device=device, dtype=dtype),
            n_sil_frames=torch.zeros(batch, dtype=torch.long, device=device),
        )

    def select(self, rows: torch.Tensor | list[int]) -> StreamState:
        """The state of ``rows`` only."""
        rows = torch.as_tensor(rows, dtype=torch.long, device=self.fifo.device)
        preds = None if self.spkcache_preds is None else self.spkcache_preds[rows]
        return StreamState(
            self.spkcache[rows],
            preds,
            self.fifo[rows],
            self.fifo_preds[rows],
            self.mean_sil_emb[rows],
            self.n_sil_frames[rows],
        )


def chunk_bounds(n_feats: int, params: StreamingParams, factor: int) -> Iterator[tuple[int, int, int, int]]:
    """NeMo's ``streaming_feat_loader``: (start, end, left, right) feature frames of each chunk of a
    sequence of ``n_feats`` feature frames; the step feeds ``[start - left, end + right)``."""
    start = end = 0
    while end < n_feats:
        left = min(params.chunk_left_context * factor, start)
        end = min(start + params.chunk_len * factor, n_feats)
        right = min(params.chunk_right_context * factor, n_feats - end)
        yield start, end, left, right
        start = end


def _silence_profile(
    mean: torch.Tensor, count: torch.Tensor, embs: torch.Tensor, preds: torch.Tensor, threshold: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The running mean of the frames whose speaker probabilities sum below ``threshold``."""
    is_sil = preds.sum(dim=2) < threshold  # (B, n)
    sil_count = is_sil.sum(dim=1)
    if not bool(sil_count.any()):
        return mean, count
    total = count + sil_count
    sums = mean * count[:, None].to(mean.dtype) + (embs * is_sil[..., None].to(embs.dtype)).sum(dim=1)
    return sums / total.clamp(min=1)[:, None].to(mean.dtype), total


def _log_pred_scores(preds: torch.Tensor, threshold: float) -> torch.Tensor:
    """High for a confident frame of one speaker alone: log p - log(1 - p) + sum_s log(1 - p_s) - log 0.5."""
    log_p = torch.log(preds.clamp(min=threshold))
    log_1p = torch.log((1.0 - preds).clamp(min=threshold))
    return log_p - log_1p + log_1p.sum(dim=2, keepdim=True) - math.log(0.5)


def _boost_topk(scores: torch.Tensor, n: int, scale: float, offset: float = 0.5) -> torch.Tensor:
    """Raise each speaker's ``n`` best scores by ``-scale * log(offset)`` (in place)."""
    if n <= 0:
        return scores
    top = torch.topk(scores, n, dim=1, largest=True, sorted=False).indices  # (B, n, S)
    boost = torch.zeros_like(scores).scatter_(1, top, -scale * math.log(offset))
    scores += boost  # -inf stays -inf
    return scores


def compress_spkcache(
    embs: torch.Tensor, preds: torch.Tensor, mean_sil_emb: torch.Tensor, params: StreamingParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the ``spkcache_len`` most representative frames (NeMo's ``_compress_spkcache`` at
    inference).

    Shapes:
        embs: (B, n, D), preds: (B, n, S) with n > spkcache_len, mean_sil_emb: (B, D)
        -> (B, spkcache_len, D), (B, spkcache_len, S)
    """
    batch, n_frames, n_spk = preds.shape
    cache_len = params.spkcache_len
    per_spk = cache_len // n_spk - params.spkcache_sil_frames_per_spk
    strong = math.floor(per_spk * params.strong_boost_rate)
    weak = math.floor(per_spk * params.weak_boost_rate)
    min_pos = math.floor(per_spk * params.min_pos_scores_rate)

    scores = _log_pred_scores(preds, params.pred_score_threshold)
    # Non-speech frames never enter; nor overlapped ones (score <= 0) of a speaker with enough clean ones.
    neg_inf = torch.tensor(float("-inf"), dtype=scores.dtype, device=scores.device)
    is_speech = preds > 0.5
    scores = torch.where(is_speech, scores, neg_inf)
    is_pos = scores > 0
    enough = is_pos.sum(dim=1, keepdim=True) >= min_pos
    scores = torch.where(~is_pos & is_speech & enough, neg_inf, scores)
    if params.scores_boost_latest > 0:  # the frames that just arrived
        scores[:, cache_len:, :] += params.scores_boost_latest
    scores = _boost_topk(scores, strong, scale=2.0)  # each speaker keeps some frames
    scores = _boost_topk(scores, weak, scale=1.0)  # no speaker takes them all
    sil = params.spkcache_sil_frames_per_spk
    if sil > 0:  # slots at the end of each speaker's block, filled by the mean silence embedding
        pad = torch.full((batch, sil, n_spk), float("inf"), dtype=scores.dtype, device=scores.device)
        scores = torch.cat([scores, pad], dim=1)

    n_all = scores.shape[1]
    flat = scores.permute(0, 2, 1).reshape(batch, -1)  # (B, S * n_all), speaker-major
    values, index = torch.topk(flat, cache_len, dim=1, sorted=False)
    index = torch.where(values != float("-inf"), index, torch.full_like(index, MAX_INDEX))
    index, _ = torch.sort(index, dim=1)  # speaker-major, then time order within each speaker
    disabled = index == MAX_INDEX
    index = torch.remainder(index, n_all)
    disabled |= index >= n_all - sil
    index = index.masked_fill(disabled, 0)

    kept = torch.gather(embs, 1, index[..., None].expand(-1, -1, embs.shape[2]))
    kept = torch.where(disabled[..., None], mean_sil_emb[:, None, :].expand_as(kept), kept)
    kept_preds = torch.gather(preds, 1, index[..., None].expand(-1, -1, n_spk))
    kept_preds = kept_preds.masked_fill(disabled[..., None], 0.0)
    return kept, kept_preds


@torch.no_grad()
def step(
    model: SortformerModel,
    params: StreamingParams,
    state: StreamState,
    chunk_feats: torch.Tensor,
    left: int,
    right: int,
) -> tuple[torch.Tensor, StreamState]:
    """One streaming step of a batch of rows whose chunks have the same sizes.

    Args:
        chunk_feats: (B, left + chunk + right, F) feature frames of the chunk with its contexts.
        left, right: feature frames of left / right context in ``chunk_feats``.

    Returns:
        (B, chunk_len', S) probabilities of the chunk's own encoder frames, and the new state.
    """
    factor = model.subsampling_factor
    b, t, _ = chunk_feats.shape
    lens = torch.full((b,), t, dtype=torch.long, device=chunk_feats.device)
    chunk, _ = model.pre_encode(chunk_feats, lens)  # (B, lc + chunk + rc, D)
    lc, rc = round(left / factor), math.ceil(right / factor)
    n_cache, n_fifo = state.spkcache.shape[1], state.fifo.shape[1]
    embs = torch.cat([state.spkcache, state.fifo, chunk], dim=1)
    total = torch.full((b,), embs.shape[1], dtype=torch.long, device=embs.device)
    preds = model.encode_embedded(embs, total)  # (B, n_cache + n_fifo + T', S)

    chunk_len = chunk.shape[1] - lc - rc
    chunk = chunk[:, lc : lc + chunk_len]
    start = n_cache + n_fifo + lc
    chunk_preds = preds[:, start : start + chunk_len]
    fifo = torch.cat([state.fifo, chunk], dim=1)
    fifo_preds = torch.cat([preds[:, n_cache : n_cache + n_fifo], chunk_preds], dim=1)
    spkcache, spkcache_preds = state.spkcache, state.spkcache_preds
    mean_sil, n_sil = state.mean_sil_emb, state.n_sil_frames

    if n_fifo + chunk_len > params.fifo_len:
        pop = max(params.spkcache_update_period, chunk_len - params.fifo_len + n_fifo)
        pop = min(pop, n_fifo + chunk_len)
        pop_embs, pop_preds = fifo[:, :pop], fifo_preds[:, :pop]
        mean_sil, n_sil = _silence_profile(mean_sil, n_sil, pop_embs, pop_preds, params.sil_threshold)
        fifo, fifo_preds = fifo[:, pop:], fifo_preds[:, pop:]
        spkcache = torch.cat([spkcache, pop_embs], dim=1)
        if spkcache_preds is not None:
            spkcache_preds = torch.cat([spkcache_preds, pop_preds], dim=1)
        if spkcache.shape[1] > params.spkcache_len:
            if spkcache_preds is None:  # the first compression scores the plain frames with this step's predictions
                spkcache_preds = torch.cat([preds[:, :n_cache], pop_preds], dim=1)
            spkcache, spkcache_preds = compress_spkcache(spkcache, spkcache_preds, mean_sil, params)
    return chunk_preds, StreamState(spkcache, spkcache_preds, fifo, fifo_preds, mean_sil, n_sil)


@torch.no_grad()
def streaming_forward(
    model: SortformerModel, params: StreamingParams, feats: torch.Tensor, feat_lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole streaming forward over a padded batch of features, each row as NeMo runs it alone.

    Shapes:
        feats: (B, T, F), feat_lens: (B,) -> probabilities (B, T', S) zero past each row's
        frames, frame counts (B,)
    """
    factor = model.subsampling_factor
    b, n_spk = feats.shape[0], model.config.num_speakers
    dim = model.config.encoder.hidden_size
    states = [StreamState.initial(1, dim, n_spk, feats.device, feats.dtype) for _ in range(b)]
    outputs: list[list[torch.Tensor]] = [[] for _ in range(b)]
    bounds = [list(chunk_bounds(int(n), params, factor)) for n in feat_lens]
    for k in range(max((len(c) for c in bounds), default=0)):
        # Rows whose k-th chunk has the same sizes run as one batch: every earlier chunk of
        # theirs was a full one, so their states have the same sizes too.
        groups: dict[tuple[int, int, int], list[int]] = {}
        for row, chunks in enumerate(bounds):
            if k < len(chunks):
                s, e, left, right = chunks[k]
                groups.setdefault((e - s, left, right), []).append(row)
        for (_, left, right), rows in groups.items():
            s, e, _, _ = bounds[rows[0]][k]
            probs, state = step(
                model, params, stack([states[r] for r in rows]), feats[rows, s - left : e + right], left, right
            )
            for i, row in enumerate(rows):
                outputs[row].append(probs[i])
                states[row] = state.select([i])
    n_out = torch.tensor([sum(p.shape[0] for p in o) for o in outputs], dtype=torch.long)
    out = feats.new_zeros(b, int(n_out.max()) if b else 0, n_spk)
    for i, o in enumerate(outputs):
        if o:
            out[i, : n_out[i]] = torch.cat(o, dim=0)
    return out, n_out


def stack(states: list[StreamState]) -> StreamState:
    """One batch state from states of the same sizes (rows at the same step)."""
    first = states[0]
    preds = None if first.spkcache_preds is None else torch.cat([s.spkcache_preds for s in states])
    return StreamState(
        torch.cat([s.spkcache for s in states]),
        preds,
        torch.cat([s.fifo for s in states]),
        torch.cat([s.fifo_preds for s in states]),
        torch.cat([s.mean_sil_emb for s in states]),
        torch.cat([s.n_sil_frames for s in states]),
    )
