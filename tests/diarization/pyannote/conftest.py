"""A tiny pyannote.audio 4 pipeline directory, built and saved by pyannote's own classes.

The directory is laid out as pyannote's released pipelines are (``pyannote/speaker-diarization-community-1``):

    config.yaml                     SpeakerDiarization, $model/<subfolder> references, VBx params
                                    (Fb 0.1: the random PLDA needs less regularisation to split speakers)
    config-ahc.yaml                 the same models with AgglomerativeClustering (3.1's clustering) and
                                    min_duration_off 0.1 s (gaps closed)
    segmentation/pytorch_model.bin  PyanNet (SincNet, 2 BiLSTMs, 2 linears, powerset head: 3 speakers, 2 at once)
    embedding/pytorch_model.bin     WeSpeakerResNet34 (8 mel bins instead of 80, to keep it quick)
    (segmentation_step 0.5 instead of 0.1: fewer windows, still overlapping)
    plda/xvec_transform.npz, plda/plda.npz    a random (well-conditioned) PLDA for VBx

A random segmentation head marks every frame as one speaker, which would test nothing; so the head
(the linears and the classifier) is fitted for a few hundred steps on synthetic "speakers" (harmonic buzzes at
different pitches, turns and overlaps drawn at random) over the frozen random SincNet / LSTM
features, enough for several speakers per clip; the embedding layer is set in closed form to
separate them (``_fit_embedding``). Everything else keeps its random initialisation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

SR = 16000
CHUNK_S = 2.0  # the segmentation model's training duration (released: 10 s)
PITCHES = (110.0, 190.0, 330.0)  # the synthetic speakers' fundamental frequencies


def voice(f0: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """A buzz with harmonics at ``f0`` (jittered), its amplitude following syllable-like bursts."""
    t = np.arange(n) / SR
    f = f0 * (1 + 0.03 * np.sin(2 * np.pi * rng.uniform(2, 5) * t))
    phase = 2 * np.pi * np.cumsum(f) / SR
    x = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = 0.6 + 0.4 * np.sin(2 * np.pi * rng.uniform(3, 6) * t + rng.uniform(0, 6))
    return 0.1 * x * envelope


def synthetic_scene(
    duration: float, rng: np.random.Generator, turns: list[tuple[int, float, float]] | None = None
) -> tuple[np.ndarray, list[tuple[int, float, float]]]:
    """A recording of synthetic speakers: ``turns`` (speaker, start, end), random when None. -> (audio, turns)"""
    n = int(duration * SR)
    if turns is None:
        turns, t = [], rng.uniform(0.0, 0.3)
        while t < duration - 0.3:
            length = rng.uniform(0.4, 1.2)
            turns.append((int(rng.integers(len(PITCHES))), t, min(t + length, duration)))
            t += length + rng.uniform(-0.3, 0.4)
    x = 0.003 * rng.standard_normal(n)
    for speaker, start, end in turns:
        a, b = int(start * SR), int(end * SR)
        x[a:b] += voice(PITCHES[speaker], b - a, rng)
    return x.astype(np.float32), turns


def _powerset_targets(turns, frame_times: np.ndarray) -> np.ndarray:
    """Per-frame powerset class (none, {0}, {1}, {2}, {0,1}, {0,2}, {1,2}) of a scene's turns."""
    active = np.zeros((len(frame_times), len(PITCHES)), dtype=bool)
    for speaker, start, end in turns:
        active[(frame_times >= start) & (frame_times < end), speaker] = True
    classes = {(): 0, (0,): 1, (1,): 2, (2,): 3, (0, 1): 4, (0, 2): 5, (1, 2): 6}
    out = np.zeros(len(frame_times), dtype=np.int64)
    for i, row in enumerate(active):
        key = tuple(np.flatnonzero(row)[:2])
        out[i] = classes[key]
    return out


def _fit_head(seg, rng: np.random.Generator, chunks: int = 24, steps: int = 300) -> None:
    """Fit PyanNet's linears and classifier on frozen features of synthetic scenes (powerset cross-entropy)."""
    import torch.nn.functional as F
    from einops import rearrange

    audio, targets = [], []
    rf = seg.receptive_field
    frames = seg.num_frames(int(CHUNK_S * SR))
    frame_times = rf.start + np.arange(frames) * rf.step + 0.5 * rf.duration
    for _ in range(chunks):
        x, turns = synthetic_scene(CHUNK_S, rng)
        audio.append(x)
        targets.append(_powerset_targets(turns, frame_times))
    with torch.no_grad():
        features = seg.sincnet(torch.from_numpy(np.stack(audio))[:, None])
        features, _ = seg.lstm(rearrange(features, "b f t -> b t f"))
    y = torch.from_numpy(np.concatenate(targets))
    opt = torch.optim.Adam([*seg.linear.parameters(), *seg.classifier.parameters()], lr=0.02)
    for _ in range(steps):
        h = features
        for linear in seg.linear:
            h = F.leaky_relu(linear(h))
        opt.zero_grad()
        F.cross_entropy(seg.classifier(h).reshape(len(y), -1), y).backward()
        opt.step()


def _fit_embedding(emb, rng: np.random.Generator, clips_per_speaker: int = 2) -> None:
    """Point the embedding layer at what tells the synthetic speakers apart.

    A random ResNet maps every clip to nearly the same embedding (one cluster, nothing tested); so
    ``seg_1`` is set in closed form from the pooled statistics of single-speaker clips: it projects
    onto the speakers' mean deviations from the overall mean (plus a little noise), centred."""
    waves, labels = [], []
    for speaker in range(len(PITCHES)):
        for _ in range(clips_per_speaker):
            x, _ = synthetic_scene(CHUNK_S, rng, turns=[(speaker, 0.0, CHUNK_S)])
            waves.append(x)
            labels.append(speaker)
    emb.eval()
    with torch.no_grad():
        fbank = emb.compute_fbank(torch.from_numpy(np.stack(waves))[:, None])
        stats = emb.resnet.pool(emb.resnet.forward_frames(fbank)).double()  # (N, 2D)
        labels = torch.tensor(labels)
        mean = stats.mean(0)
        directions = torch.stack([stats[labels == k].mean(0) - mean for k in range(len(PITCHES))])
        directions = directions / directions.norm(dim=1, keepdim=True)
        out_dim = emb.resnet.seg_1.out_features
        weight = torch.randn(out_dim, len(PITCHES), dtype=torch.float64) @ directions
        weight = weight + 0.01 * torch.randn(out_dim, stats.shape[1], dtype=torch.float64) / stats.shape[1] ** 0.5
        emb.resnet.seg_1.weight.copy_(weight)
        emb.resnet.seg_1.bias.copy_(-(weight @ mean))


def _save(model, folder) -> None:
    """As pyannote's checkpoints are saved: Lightning's ``state_dict`` / ``hyper_parameters`` plus
    pyannote's own ``on_save_checkpoint`` record (versions, architecture, specifications)."""
    import lightning

    folder.mkdir(parents=True, exist_ok=True)
    checkpoint = {
        "state_dict": model.state_dict(),
        "hyper_parameters": dict(model.hparams),
        "pytorch-lightning_version": lightning.__version__,
    }
    model.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, folder / "pytorch_model.bin")


def build_pipeline_dir(root, seed: int = 0) -> None:
    """Write the tiny pipeline directory described in the module docstring under ``root``."""
    import yaml
    from pyannote.audio.core.task import Problem, Resolution, Specifications
    from pyannote.audio.models.embedding import WeSpeakerResNet34
    from pyannote.audio.models.segmentation import PyanNet

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    seg = PyanNet(lstm={"hidden_size": 16, "num_layers": 2}, linear={"hidden_size": 16, "num_layers": 2})
    seg.specifications = Specifications(
        problem=Problem.MONO_LABEL_CLASSIFICATION,
        resolution=Resolution.FRAME,
        duration=CHUNK_S,
        classes=[f"speaker#{k + 1}" for k in range(len(PITCHES))],
        powerset_max_classes=2,
        permutation_invariant=True,
    )
    seg.setup()
    _fit_head(seg, rng)
    _save(seg, root / "segmentation")

    emb = WeSpeakerResNet34(num_mel_bins=8)
    emb.specifications = Specifications(problem=Problem.REPRESENTATION, resolution=Resolution.CHUNK, duration=5.0)
    _fit_embedding(emb, rng)
    _save(emb, root / "embedding")

    dim, lda_dim = 256, 128
    (root / "plda").mkdir(exist_ok=True)
    np.savez(
        root / "plda" / "xvec_transform.npz",
        mean1=0.1 * rng.standard_normal(dim),
        mean2=0.1 * rng.standard_normal(lda_dim),
        lda=rng.standard_normal((dim, lda_dim)) / np.sqrt(dim),
    )
    np.savez(
        root / "plda" / "plda.npz",
        mu=0.1 * rng.standard_normal(lda_dim),
        tr=np.linalg.qr(rng.standard_normal((lda_dim, lda_dim)))[0] + 0.1 * np.eye(lda_dim),
        psi=np.sort(rng.uniform(0.5, 5.0, lda_dim))[::-1],
    )

    def config(clustering: str, params: dict, min_duration_off: float = 0.0) -> dict:
        return {
            "dependencies": {"pyannote.audio": "4.0.3"},
            "pipeline": {
                "name": "pyannote.audio.pipelines.SpeakerDiarization",
                "params": {
                    "segmentation": "$model/segmentation",
                    "segmentation_step": 0.5,
                    "embedding": "$model/embedding",
                    "embedding_exclude_overlap": True,
                    "plda": "$model/plda",
                    "clustering": clustering,
                    "embedding_batch_size": 32,
                    "segmentation_batch_size": 32,
                },
            },
            "params": {"clustering": params, "segmentation": {"min_duration_off": min_duration_off}},
        }

    vbx = config("VBxClustering", {"threshold": 0.6, "Fa": 0.07, "Fb": 0.1})
    ahc = config(
        "AgglomerativeClustering", {"method": "centroid", "min_cluster_size": 2, "threshold": 0.7}, min_duration_off=0.1
    )
    (root / "config.yaml").write_text(yaml.safe_dump(vbx, sort_keys=False))
    (root / "config-ahc.yaml").write_text(yaml.safe_dump(ahc, sort_keys=False))


@pytest.fixture(scope="module")
def pyannote_dir(tmp_path_factory):
    pytest.importorskip("pyannote.audio", reason="pyannote.audio is not installed (see .ci/run)")
    from pyannote.audio.telemetry import set_telemetry_metrics

    set_telemetry_metrics(False)  # pyannote counts model loads for otel.pyannote.ai by default
    root = tmp_path_factory.mktemp("pyannote-pipeline")
    build_pipeline_dir(root)
    return root
