"""Clustering the (chunk, local speaker) embeddings into recording-level speakers, as pyannote 4 does.

Both pipelines' clusterings share the frame:

1. training set: embeddings that are finite and whose speaker talks alone for at least 20 % of the chunk;
2. cluster the training set (``VBx`` or ``agglomerative`` below) into centroids;
3. assign every (chunk, speaker) to a centroid by cosine similarity (2 - cosine distance); VBx's
   assignment is constrained (Hungarian, one centroid per local speaker in a chunk; silent speakers
   scored below everything) unless the speaker count had to be forced.

VBx (``VBxClustering``, community-1): centroid-linkage AHC on L2-normalised embeddings cut at
``threshold`` initialises the responsibilities (softmax of 7 x one-hot); the embeddings are projected
by the PLDA (x-vector transform: centre, LDA, length-normalise; then PLDA whitening); 20 iterations of
VBx (Landini et al., Bayesian HMM clustering of x-vector sequences, without the HMM) with ``Fa``, ``Fb``;
speakers whose prior stays above 1e-7 give centroids (responsibility-weighted means). A count outside
[min, max] is forced with k-means on the normalised embeddings (scikit-learn's, as pyannote's).

Agglomerative (``AgglomerativeClustering``, 3.1): linkage ``method`` (cosine, or euclidean on
normalised embeddings for centroid / median / ward) cut at ``threshold``; clusters smaller than
``min_cluster_size`` join the nearest large one; a forced count walks the dendrogram to the cut that
gives it.

Numerics are scipy's (``linkage``, ``fcluster``, ``cdist``, ``linear_sum_assignment``, ``eigh``,
``logsumexp``), the same calls pyannote makes, so equal embeddings give equal clusters.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

MIN_ACTIVE_RATIO = 0.2  # a training embedding's speaker talks alone this share of the chunk


def _scipy():
    try:
        import scipy.cluster.hierarchy as hierarchy
        import scipy.linalg as linalg
        import scipy.optimize as optimize
        import scipy.spatial.distance as distance
        import scipy.special as special
    except ImportError as e:  # pragma: no cover - scipy ships with the pyannote extra
        raise ImportError("pyannote pipelines need scipy: pip install 'oasr[pyannote]'") from e
    return hierarchy, linalg, optimize, distance, special


def _l2_normalise(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@dataclass
class PLDA:
    """The x-vector transform and PLDA of a VBx pipeline (``plda/xvec_transform.npz``, ``plda/plda.npz``).

    ``project`` maps (N, 256) embeddings to (N, lda_dimension) PLDA-space features; ``phi`` is the
    across-class covariance (diagonal) in that space, largest first.
    """

    mean1: np.ndarray
    mean2: np.ndarray
    lda: np.ndarray
    mu: np.ndarray
    transform: np.ndarray
    phi: np.ndarray
    lda_dimension: int = 128

    @classmethod
    def load(cls, folder: str | Path, lda_dimension: int = 128) -> PLDA:
        folder = Path(folder)
        for name in ("xvec_transform.npz", "plda.npz"):
            if not (folder / name).is_file():
                raise FileNotFoundError(f"VBx needs {folder / name}")
        _, linalg, _, _, _ = _scipy()
        x = np.load(folder / "xvec_transform.npz")
        p = np.load(folder / "plda.npz")
        tr, psi = p["tr"], p["psi"]
        within = np.linalg.inv(tr.T @ tr)
        between = np.linalg.inv((tr.T / psi) @ tr)
        eigvals, eigvecs = linalg.eigh(between, within)  # generalised problem: between v = w within v
        return cls(
            mean1=x["mean1"],
            mean2=x["mean2"],
            lda=x["lda"],
            mu=p["mu"],
            transform=eigvecs.T[::-1],
            phi=eigvals[::-1][:lda_dimension],
            lda_dimension=lda_dimension,
        )

    def project(self, embeddings: np.ndarray) -> np.ndarray:
        in_dim, out_dim = self.lda.shape
        x = np.sqrt(in_dim) * _l2_normalise(embeddings - self.mean1)
        x = np.sqrt(out_dim) * _l2_normalise(self.lda.T.dot(x.T).T - self.mean2)
        return (x - self.mu).dot(self.transform.T)[:, : self.lda_dimension]


def vbx(
    x: np.ndarray,
    phi: np.ndarray,
    gamma: np.ndarray,
    *,
    fa: float,
    fb: float,
    max_iters: int = 20,
    epsilon: float = 1e-4,
) -> tuple[np.ndarray, np.ndarray]:
    """Variational Bayes clustering of ``x`` (N, D) with across-class covariance ``phi`` (D,), from the
    responsibilities ``gamma`` (N, S); priors start uniform. -> (gamma (N, S), speaker priors (S,))

    Each iteration: speaker posteriors (precision ``1 + Fa/Fb * n_s * phi``, mean ``alpha``), per-frame
    log-likelihoods, responsibilities by softmax against the priors, priors by their means; stop when
    the ELBO improves by less than ``epsilon``.
    """
    _, _, _, _, special = _scipy()
    num_speakers = gamma.shape[1]
    pi = np.ones(num_speakers) / num_speakers
    dim = x.shape[1]
    const = -0.5 * (np.sum(x**2, axis=1, keepdims=True) + dim * np.log(2 * np.pi))
    rho = x * np.sqrt(phi)
    previous = None
    for it in range(max_iters):
        inv_l = 1.0 / (1 + fa / fb * gamma.sum(axis=0, keepdims=True).T * phi)  # (S, D)
        alpha = fa / fb * inv_l * gamma.T.dot(rho)
        log_p = fa * (rho.dot(alpha.T) - 0.5 * (inv_l + alpha**2).dot(phi) + const)  # (N, S)
        log_pi = np.log(pi + 1e-8)
        log_px = special.logsumexp(log_p + log_pi, axis=-1)
        gamma = np.exp(log_p + log_pi - log_px[:, None])
        pi = gamma.sum(axis=0)
        pi = pi / pi.sum()
        elbo = log_px.sum() + fb * 0.5 * np.sum(np.log(inv_l) - inv_l - alpha**2 + 1)
        if it > 0 and elbo - previous < epsilon:
            break
        previous = elbo
    return gamma, pi


def _training_set(embeddings: np.ndarray, binary: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(chunk, speaker) indices of the embeddings clustering learns from."""
    num_frames = binary.shape[1]
    alone = np.sum(binary, axis=2, keepdims=True) == 1
    clean = np.sum(binary * alone, axis=1)  # (C, K) frames each speaker talks alone
    active = clean >= MIN_ACTIVE_RATIO * num_frames
    valid = ~np.any(np.isnan(embeddings), axis=2)
    return np.where(active * valid)


def _bounds(num_embeddings: int, num: int | None, lo: int | None, hi: int | None) -> tuple[int | None, int, int]:
    lo = max(1, min(num_embeddings, num or lo or 1))
    hi = max(1, min(num_embeddings, num or hi or num_embeddings))
    if lo > hi:
        raise ValueError(f"min_speakers ({lo}) must not exceed max_speakers ({hi})")
    return (lo if lo == hi else num), lo, hi


def _constrained_argmax(scores: np.ndarray) -> np.ndarray:
    """Per chunk, the one-to-one speaker -> cluster assignment of highest total score; unmatched -2."""
    _, _, optimize, _, _ = _scipy()
    scores = np.nan_to_num(scores, nan=np.nanmin(scores))
    hard = -2 * np.ones(scores.shape[:2], dtype=np.int8)
    for c, cost in enumerate(scores):
        speakers, clusters = optimize.linear_sum_assignment(cost, maximize=True)
        hard[c, speakers] = clusters
    return hard


def _similarity(embeddings: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """(C, K, D) x (N, D) -> (C, K, N) 2 - cosine distance"""
    _, _, _, distance, _ = _scipy()
    c, k, d = embeddings.shape
    return 2 - distance.cdist(embeddings.reshape(c * k, d), centroids, metric="cosine").reshape(c, k, -1)


def _kmeans(x: np.ndarray, k: int) -> np.ndarray:
    try:
        from sklearn.cluster import KMeans
    except ImportError as e:  # pragma: no cover
        raise ImportError("forcing a speaker count needs scikit-learn: pip install 'oasr[pyannote]'") from e
    return KMeans(n_clusters=k, n_init=3, random_state=42, copy_x=False).fit_predict(x)


def _single_cluster(embeddings: np.ndarray, train: np.ndarray):
    c, k, _ = embeddings.shape
    return np.zeros((c, k), dtype=np.int8), np.mean(train, axis=0, keepdims=True)


def cluster_vbx(
    embeddings: np.ndarray,
    binary: np.ndarray,
    plda: PLDA,
    *,
    threshold: float,
    fa: float,
    fb: float,
    num: int | None,
    lo: int,
    hi: float,
) -> tuple[np.ndarray, np.ndarray]:
    """pyannote's ``VBxClustering``. ``embeddings`` (C, K, D), ``binary`` (C, F, K) segmentation;
    ``num`` / ``lo`` / ``hi``: the speaker count and bounds (``hi`` may be infinite).
    -> (hard clusters (C, K) with -2 for unassigned, centroids (N, D))"""
    hierarchy, _, _, _, special = _scipy()
    ci, si = _training_set(embeddings, binary)
    train = embeddings[ci, si]
    if train.shape[0] < 2:
        return _single_cluster(embeddings, train)
    normed = _l2_normalise(train)
    dendrogram = hierarchy.linkage(normed, method="centroid", metric="euclidean")
    ahc = hierarchy.fcluster(dendrogram, threshold, criterion="distance") - 1
    _, ahc = np.unique(ahc, return_inverse=True)
    init = np.zeros((len(ahc), ahc.max() + 1))
    init[np.arange(len(ahc)), ahc.astype(int)] = 1.0
    gamma, pi = vbx(plda.project(train), plda.phi, special.softmax(init * 7.0, axis=1), fa=fa, fb=fb)
    kept = gamma[:, pi > 1e-7]
    centroids = kept.T @ train / kept.sum(0, keepdims=True).T

    # the pipeline's bounds as given (pyannote's VBx does not clip them to the training set's size)
    found = centroids.shape[0]
    target = lo if found < lo else hi if found > hi else num
    constrained = True
    if target and target != found:
        constrained = False
        labels = _kmeans(normed, target)
        centroids = np.vstack([np.mean(train[labels == k], axis=0) for k in range(target)])
    scores = _similarity(embeddings, centroids)
    if constrained:
        scores[binary.sum(1) == 0] = scores.min() - 1.0  # silent local speakers lose every match
        return _constrained_argmax(scores), centroids
    return np.argmax(scores, axis=2), centroids


def _agglomerate(x: np.ndarray, method: str, threshold: float, min_size: int, lo: int, hi: int, num: int | None):
    """pyannote's ``AgglomerativeClustering.cluster`` on the training embeddings -> labels (N,)"""
    hierarchy, _, _, distance, _ = _scipy()
    n = x.shape[0]
    min_size = min(min_size, max(1, round(0.1 * n)))
    if n == 1:
        return np.zeros((1,), dtype=np.uint8)
    if method in ("centroid", "median", "ward"):
        with np.errstate(divide="ignore", invalid="ignore"):
            x = _l2_normalise(x)
        dendrogram = hierarchy.linkage(x, method=method, metric="euclidean")
    else:
        dendrogram = hierarchy.linkage(x, method=method, metric="cosine")

    def large_of(labels):
        unique, counts = np.unique(labels, return_counts=True)
        return unique, counts, unique[counts >= min_size]

    labels = hierarchy.fcluster(dendrogram, threshold, criterion="distance") - 1
    unique, counts, large = large_of(labels)
    if len(large) < lo:
        num = lo
    elif len(large) > hi:
        num = hi
    if num is not None and len(large) != num:
        # walk the merges, nearest to the threshold first, to the cut giving ``num`` large clusters
        steps = np.copy(dendrogram)
        steps[:, 2] = np.arange(n - 1)
        best, best_count = n - 1, 1
        for it in np.argsort(np.abs(dendrogram[:, 2] - threshold)):
            if steps[it, 3] < min_size:
                continue
            labels = hierarchy.fcluster(steps, it, criterion="distance") - 1
            unique, counts, large = large_of(labels)
            if abs(len(large) - num) < abs(best_count - num):
                best, best_count = it, len(large)
            if len(large) == num:
                break
        if best_count != num:
            labels = hierarchy.fcluster(steps, best, criterion="distance") - 1
            unique, counts, large = large_of(labels)
    if len(large) == 0:
        labels[:] = 0
        return labels
    small = unique[counts < min_size]
    if len(small) == 0:
        return labels
    large_centroids = np.vstack([np.mean(x[labels == k], axis=0) for k in large])
    small_centroids = np.vstack([np.mean(x[labels == k], axis=0) for k in small])
    nearest = np.argmin(distance.cdist(large_centroids, small_centroids, metric="cosine"), axis=0)
    for s, target in enumerate(nearest):
        labels[labels == small[s]] = large[target]
    _, labels = np.unique(labels, return_inverse=True)
    return labels


def cluster_agglomerative(
    embeddings: np.ndarray,
    binary: np.ndarray,
    *,
    method: str,
    threshold: float,
    min_cluster_size: int,
    num: int | None = None,
    lo: int | None = None,
    hi: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """pyannote's ``AgglomerativeClustering`` (unconstrained assignment). -> (hard (C, K), centroids)"""
    ci, si = _training_set(embeddings, binary)
    train = embeddings[ci, si]
    num, lo, hi = _bounds(train.shape[0], num, lo, hi)
    if hi < 2:
        return _single_cluster(embeddings, train)
    labels = _agglomerate(np.copy(train), method, threshold, min_cluster_size, lo, hi, num)
    centroids = np.vstack([np.mean(train[labels == k], axis=0) for k in range(np.max(labels) + 1)])
    return np.argmax(_similarity(embeddings, centroids), axis=2), centroids
