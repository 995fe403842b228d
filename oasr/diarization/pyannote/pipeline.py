"""pyannote.audio 4's ``SpeakerDiarization`` pipeline on oasr's models, batched across recordings.

The life of a batch of recordings (16 kHz mono float arrays):

1. **Windows**: each recording is cut into windows of the segmentation model's duration every
   ``segmentation_step`` x duration (the last, partial one zero-padded), as pyannote's ``Inference``.
2. **Segmentation**: PyanNet runs on the windows of every recording together; each frame's powerset
   argmax gives the local speakers' binary activity (C, F, K).
3. **Speaker count**: the number of active local speakers per frame, averaged over overlapping
   windows and rounded, on the recording's frame grid.
4. **Embeddings**: one WeSpeaker pass per window (all recordings together), statistics-pooled under
   each local speaker's activity (only where it talks alone when ``embedding_exclude_overlap`` and
   that leaves enough frames) -> (C, K, D).
5. **Clustering** (``clustering.py``): VBx or agglomerative -> each (window, local speaker) gets a
   recording-level speaker or none.
6. **Reconstruction**: per window, a cluster's activity is the max of its local speakers'; summed over
   windows, the ``count`` most active clusters of each frame are on (``count`` capped at
   ``max_speakers``; at 1 for the exclusive diarization).
7. **Turns**: each cluster's on-frames become turns between frame middles; gaps shorter than
   ``min_duration_off`` are closed. Speakers are named ``SPEAKER_00``.. by first turn.

Frame arithmetic, the float32 accumulators and numpy's ``argsort`` ties follow pyannote's code, so on
the same weights the turns are the same to the last bit of their float times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from oasr.diarization.pyannote.checkpoint import PipelineConfig
from oasr.diarization.pyannote.clustering import PLDA, cluster_agglomerative, cluster_vbx
from oasr.diarization.pyannote.embedding import WeSpeakerEmbedding
from oasr.diarization.pyannote.segmentation import Frames, PyanNet
from oasr.diarization.types import Diarization, SpeakerTurn, speaker_label

# pyannote's defaults for the parameters a config may leave out (SpeakerDiarization.default_parameters)
_DEFAULT_PARAMS = {
    "VBxClustering": {"threshold": 0.6, "Fa": 0.07, "Fb": 0.8},
    "segmentation": {"min_duration_off": 0.0},
}
_EPSILON = 1e-12  # pyannote's aggregation floor
_SEGMENT_PRECISION = 1e-6  # pyannote.core: a gap of at most 1 us is no gap


@dataclass
class Analysis:
    """One recording through the pipeline, every stage kept (for parity checks and known speakers).

    Attributes:
        scores: (C, F, P) segmentation log-probabilities per window (powerset classes).
        binary: (C, F, K) local speakers' activity (float32 0 / 1).
        count: (T,) speakers per frame on the recording's grid.
        embeddings: (C, K, D) per window and local speaker (None when nobody speaks).
        clusters: (C, K) recording speaker of each local speaker (-2: none).
        centroids: (N, D) cluster centroids (None when nobody speaks).
        diarization / exclusive: the turns, overlapping and one speaker at a time.
        speaker_embeddings: (len(diarization.speakers), D) centroid of each label, in label order.
    """

    scores: np.ndarray
    binary: np.ndarray
    count: np.ndarray
    embeddings: np.ndarray | None
    clusters: np.ndarray | None
    centroids: np.ndarray | None
    diarization: Diarization
    exclusive: Diarization
    speaker_embeddings: np.ndarray


def _speaker_bounds(num: int | None, lo: int | None, hi: int | None) -> tuple[int | None, int, float]:
    """pyannote's ``set_num_speakers``: (num, min, max) with max possibly infinite."""
    for name, value in (("num_speakers", num), ("min_speakers", lo), ("max_speakers", hi)):
        if value is not None and (not isinstance(value, (int, np.integer)) or value < 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    lo = num or lo or 1
    hi = num or hi or math.inf
    if lo > hi:
        raise ValueError(f"min_speakers ({lo}) must not exceed max_speakers ({hi})")
    return (lo if lo == hi else num), lo, hi


def _aggregate(scores: np.ndarray, chunk_step: float, frames: Frames, duration: float, skip_average: bool):
    """pyannote's ``Inference.aggregate`` (no warm-up, no Hamming; NaN = missing, filled with 0).

    Shapes: scores (C, F, K) -> (T, K) float32 on ``frames`` shifted to start at 0."""
    num_chunks, num_frames, num_classes = scores.shape
    grid = Frames(0.0, frames.duration, frames.step)
    total = grid.closest_frame(0.0 + duration + (num_chunks - 1) * chunk_step + 0.5 * frames.duration) + 1
    out = np.zeros((total, num_classes), dtype=np.float32)
    overlap = np.zeros((total, num_classes), dtype=np.float32)
    seen = np.zeros((total, num_classes), dtype=np.float32)
    for c in range(num_chunks):
        score = scores[c]
        mask = 1 - np.isnan(score)
        score = np.nan_to_num(score, nan=0.0)
        first = grid.closest_frame(0.0 + c * chunk_step + 0.5 * frames.duration)
        out[first : first + num_frames] += score * mask
        overlap[first : first + num_frames] += mask
        seen[first : first + num_frames] = np.maximum(seen[first : first + num_frames], mask)
    average = out if skip_average else out / np.maximum(overlap, _EPSILON)
    average[seen == 0.0] = 0.0
    return average


def _turns(discrete: np.ndarray, frames: Frames, min_duration_off: float) -> list[tuple[float, float, int]]:
    """pyannote's ``Binarize`` (onset = offset = 0.5) of a (T, N) 0/1 diarization -> (start, end, cluster)."""
    middles = [frames.middle(i) for i in range(discrete.shape[0])]
    out: list[tuple[float, float, int]] = []
    for k, column in enumerate(discrete.T):
        regions = []
        start, active = middles[0], column[0] > 0.5
        for t, y in zip(middles[1:], column[1:]):
            if active and y < 0.5:
                regions.append((start, t))
                start, active = t, False
            elif not active and y > 0.5:
                start, active = t, True
        if active:
            regions.append((start, middles[-1]))
        regions = [r for r in regions if r[1] - r[0] > _SEGMENT_PRECISION]
        if min_duration_off > 0.0 and regions:  # Annotation.support(collar)
            merged = [regions[0]]
            for s, e in regions[1:]:
                gap = max(merged[-1][0], s) - min(merged[-1][1], e)
                if gap <= _SEGMENT_PRECISION or gap < min_duration_off:
                    merged[-1] = (min(merged[-1][0], s), max(merged[-1][1], e))
                else:
                    merged.append((s, e))
            regions = merged
        out.extend((s, e, k) for s, e in regions)
    return out


def _reconstruct(binary: np.ndarray, clusters: np.ndarray, count: np.ndarray, chunk_step, frames, duration):
    """Clustered segmentation -> (T, N) 0/1 diarization keeping the ``count`` most active clusters."""
    num_chunks, num_frames, _ = binary.shape
    num_clusters = int(np.max(clusters)) + 1
    clustered = np.full((num_chunks, num_frames, num_clusters), np.nan)
    for c in range(num_chunks):
        for k in np.unique(clusters[c]):
            if k == -2:
                continue
            clustered[c, :, k] = np.max(binary[c][:, clusters[c] == k], axis=1)
    activations = _aggregate(clustered, chunk_step, frames, duration, skip_average=True)
    if num_clusters < count.max():
        activations = np.pad(activations, ((0, 0), (0, int(count.max()) - num_clusters)))
    if activations.shape[0] != count.shape[0]:
        raise AssertionError("activations and speaker count must share the frame grid")
    ranked = np.argsort(-activations, axis=-1)
    discrete = np.zeros_like(activations)
    for t in range(discrete.shape[0]):
        discrete[t, ranked[t, : int(count[t])]] = 1.0
    return discrete


class PyannoteDiarizer:
    """A loaded pyannote speaker-diarization pipeline (``Diarizer``); see the module docstring."""

    sampling_rate = 16000
    max_speakers: int | None = None  # clustering finds any number of speakers

    def __init__(
        self,
        config: PipelineConfig,
        segmentation: PyanNet,
        powerset: torch.Tensor,
        window_s: float,
        embedding: WeSpeakerEmbedding,
        plda: PLDA | None,
        *,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        self.config = config
        self.segmentation = segmentation.to(device=device, dtype=dtype)
        self.powerset = powerset.to(device)
        self.window_s = window_s
        self.embedding = embedding.to(device=device, dtype=dtype)
        self.plda = plda
        self.device, self.dtype = device, dtype
        self.frames = segmentation.frames()
        params = config.params
        self.clustering_params = {**_DEFAULT_PARAMS.get(config.clustering, {}), **params.get("clustering", {})}
        if config.clustering == "AgglomerativeClustering":
            missing = {"method", "threshold", "min_cluster_size"} - set(self.clustering_params)
            if missing:
                raise ValueError(f"config.yaml params.clustering lacks {sorted(missing)} for AgglomerativeClustering")
        self.min_duration_off = float(
            {**_DEFAULT_PARAMS["segmentation"], **params.get("segmentation", {})}["min_duration_off"]
        )

    # -- windows -----------------------------------------------------------------------------------
    @property
    def chunk_step(self) -> float:
        return self.config.segmentation_step * self.window_s

    def _windows(self, x: torch.Tensor) -> torch.Tensor:
        """(S,) -> (C, window) segmentation windows, the last zero-padded (pyannote's ``Inference.slide``)."""
        window = round(self.window_s * self.sampling_rate)
        step = round(self.chunk_step * self.sampling_rate)
        n = x.shape[0]
        chunks = x.unfold(0, window, step) if n >= window else x.new_zeros(0, window)
        if 0 < n < window or (n >= window and (n - window) % step > 0):  # an empty recording has no window
            last = x[chunks.shape[0] * step :]
            chunks = torch.cat([chunks, torch.nn.functional.pad(last, (0, window - last.shape[0]))[None]])
        return chunks

    def _crop(self, x: torch.Tensor, c: int) -> torch.Tensor:
        """Window ``c`` as the embedding step reads it (pyannote's ``Audio.crop(mode="pad")``)."""
        start_s = 0.0 + c * self.chunk_step
        start = round(start_s * self.sampling_rate)
        end = round((start_s + self.window_s) * self.sampling_rate)
        n = x.shape[0]
        piece = x[start : min(end, n)]
        return torch.nn.functional.pad(piece, (0, max(end, n) - n))

    # -- neural stages -----------------------------------------------------------------------------
    @torch.inference_mode()
    def segment(self, windows: torch.Tensor) -> torch.Tensor:
        """(C, window) -> (C, F, P) powerset log-probabilities, in batches of the config's size."""
        size = max(1, self.config.segmentation_batch_size)
        out = [self.segmentation(windows[i : i + size, None]) for i in range(0, windows.shape[0], size)]
        return torch.cat(out) if out else windows.new_zeros(0, 0, self.powerset.shape[0])

    def to_multilabel(self, scores: torch.Tensor) -> np.ndarray:
        """(C, F, P) log-probabilities -> (C, F, K) float32 0/1 activity of the argmax powerset class."""
        one_hot = torch.nn.functional.one_hot(scores.argmax(-1), self.powerset.shape[0]).float()
        return (one_hot @ self.powerset.float()).cpu().numpy()

    def _masks(self, binary: np.ndarray) -> np.ndarray:
        """Pooling weights per (window, local speaker): activity, or clean activity when overlap is excluded."""
        if not self.config.embedding_exclude_overlap:
            return binary
        num_frames = binary.shape[1]
        min_frames = math.ceil(
            num_frames * self.embedding.window_samples / (self.window_s * self.embedding.sample_rate)
        )
        clean = binary * (np.sum(binary, axis=2, keepdims=True) < 2)
        use_clean = np.sum(clean, axis=1, keepdims=True) > min_frames  # (C, 1, K)
        return np.where(use_clean, clean, binary)

    @torch.inference_mode()
    def _embed_windows(self, crops: list[torch.Tensor], masks: list[np.ndarray]) -> list[np.ndarray]:
        """Windows (each (window,)) and their masks ((F, K)) -> per window (K, D) embeddings."""
        size = max(1, self.config.embedding_batch_size)
        out = []
        for i in range(0, len(crops), size):
            waves = torch.stack(crops[i : i + size])
            weights = torch.from_numpy(np.stack(masks[i : i + size])).transpose(1, 2).to(self.device)
            out.extend(self.embedding(waves, weights).double().cpu().numpy())
        return out

    @torch.inference_mode()
    def embed(self, audios: Sequence[np.ndarray]) -> np.ndarray:
        """One speaker embedding per clip: the embedding model over the whole clip, unweighted
        statistics pooling (what pyannote's ``PretrainedSpeakerEmbedding(waveforms)`` gives).

        Args:
            audios: 16 kHz mono float clips, each at least one fbank window (25 ms) long.

        Returns:
            (len(audios), D) float32 embeddings (D = 256 for the released WeSpeaker models).
        """
        rows = []
        for i, x in enumerate(self._check(audios)):
            if x.shape[0] < self.embedding.window_samples:
                need = self.embedding.window_samples
                raise ValueError(
                    f"audio {i} has {x.shape[0]} samples; a speaker embedding needs at least {need} "
                    f"({need / self.sampling_rate * 1000:g} ms)"
                )
            rows.append(self.embedding(x[None])[0, 0].float().cpu().numpy())
        return np.stack(rows) if rows else np.zeros((0, self.embedding.resnet.seg_1.out_features), np.float32)

    # -- the pipeline ------------------------------------------------------------------------------
    def _check(self, audios: Sequence[np.ndarray]) -> list[torch.Tensor]:
        from oasr.audio.io import check_samples

        out = []
        for i, audio in enumerate(audios):
            a = np.asarray(audio)
            if a.ndim != 1 or not np.issubdtype(a.dtype, np.floating):
                raise ValueError(f"audio {i} must be a 1-D float array of 16 kHz samples, got {a.dtype} {a.shape}")
            check_samples(a, f"audio {i}")
            out.append(torch.from_numpy(np.ascontiguousarray(a)).to(device=self.device, dtype=self.dtype))
        return out

    def analyse(
        self,
        audios: Sequence[np.ndarray],
        *,
        num_speakers: int | None = None,
        min_speakers: int | None = None,
        max_speakers: int | None = None,
    ) -> list[Analysis]:
        """Run the pipeline on a batch and keep every stage (see ``Analysis``)."""
        num, lo, hi = _speaker_bounds(num_speakers, min_speakers, max_speakers)
        waves = self._check(audios)
        if not waves:
            return []
        windows = [self._windows(x) for x in waves]
        scores_all = self.segment(torch.cat(windows))
        offsets = np.cumsum([0] + [w.shape[0] for w in windows])
        binaries, counts = [], []
        for r in range(len(waves)):
            binary = self.to_multilabel(scores_all[offsets[r] : offsets[r + 1]])
            if binary.shape[0] == 0:
                count = np.zeros(0, dtype=np.uint8)
            else:
                summed = _aggregate(binary.sum(-1, keepdims=True), self.chunk_step, self.frames, self.window_s, False)
                count = np.rint(summed).astype(np.uint8)[:, 0]
            counts.append(count)
            binaries.append(binary)
        # embeddings of every window of every recording that has speech, batched together
        crops, masks, owner = [], [], []
        for r, (x, binary, count) in enumerate(zip(waves, binaries, counts)):
            if not count.any():
                continue
            for c, mask in enumerate(self._masks(binary)):
                crops.append(self._crop(x, c))
                masks.append(mask)
                owner.append(r)
        embedded = self._embed_windows(crops, masks) if crops else []
        out = []
        for r, (x, binary, count) in enumerate(zip(waves, binaries, counts)):
            scores = scores_all[offsets[r] : offsets[r + 1]].double().cpu().numpy()
            duration = x.shape[0] / self.sampling_rate
            if not count.any():
                nobody = np.zeros((0, self.embedding.resnet.seg_1.out_features))
                empty = Diarization([], duration)
                out.append(Analysis(scores, binary, count, None, None, None, empty, Diarization([], duration), nobody))
                continue
            embeddings = np.stack([e for e, o in zip(embedded, owner) if o == r])
            out.append(self._finish(scores, binary, count, embeddings, duration, num, lo, hi))
        return out

    def _finish(self, scores, binary, count, embeddings, duration, num, lo, hi) -> Analysis:
        """Clustering, reconstruction and turns of one recording."""
        p = self.clustering_params
        if self.config.clustering == "VBxClustering":
            clusters, centroids = cluster_vbx(
                embeddings, binary, self.plda, threshold=p["threshold"], fa=p["Fa"], fb=p["Fb"], num=num, lo=lo, hi=hi
            )
        else:
            clusters, centroids = cluster_agglomerative(
                embeddings,
                binary,
                method=p["method"],
                threshold=p["threshold"],
                min_cluster_size=int(p["min_cluster_size"]),
                num=num,
                lo=lo,
                hi=hi,
            )
        clusters = np.array(clusters)
        clusters[np.sum(binary, axis=1) == 0] = -2  # silent local speakers belong to no one
        capped = np.minimum(count, hi).astype(np.int8)
        grid = Frames(0.0, self.frames.duration, self.frames.step)  # the aggregated frames start at 0
        regular = _turns(
            _reconstruct(binary, clusters, capped, self.chunk_step, self.frames, self.window_s),
            grid,
            self.min_duration_off,
        )
        exclusive = _turns(
            _reconstruct(binary, clusters, np.minimum(capped, 1), self.chunk_step, self.frames, self.window_s),
            grid,
            self.min_duration_off,
        )
        # labels by first turn of the regular diarization (then any cluster only the exclusive one has)
        order: dict[int, int] = {}
        for _, _, k in sorted(regular) + sorted(exclusive):
            order.setdefault(k, len(order))

        def named(turns):
            return Diarization([SpeakerTurn(s, e, speaker_label(order[k])) for s, e, k in turns], duration)

        diarization = named(regular)
        rows = []
        for label in diarization.speakers:
            k = next(k for k, i in order.items() if speaker_label(i) == label)
            rows.append(centroids[k] if k < len(centroids) else np.zeros(centroids.shape[1]))
        speaker_embeddings = np.stack(rows) if rows else np.zeros((0, embeddings.shape[-1]))
        return Analysis(
            scores, binary, count, embeddings, clusters, centroids, diarization, named(exclusive), speaker_embeddings
        )

    def diarize(
        self,
        audios: Sequence[np.ndarray],
        *,
        num_speakers: int | None = None,
        min_speakers: int | None = None,
        max_speakers: int | None = None,
        exclusive: bool = False,
    ) -> list[Diarization]:
        """``Diarizer.diarize``; ``exclusive=True`` returns pyannote's exclusive diarization (at most one
        speaker at a time, for aligning transcripts) instead of the overlapping one."""
        results = self.analyse(audios, num_speakers=num_speakers, min_speakers=min_speakers, max_speakers=max_speakers)
        return [r.exclusive if exclusive else r.diarization for r in results]
