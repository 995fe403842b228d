"""oasr's pyannote pipeline against pyannote.audio 4.0.3 on the tiny folder of ``conftest.py``, in float64:
per stage (segmentation scores, local activity, embeddings, cluster labels) and the final turns, regular and
exclusive, for VBx and agglomerative clustering, on a synthetic scene and on two corpus speakers overlapped."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from oasr.diarization.types import Diarization, Diarizer

from .conftest import SR, synthetic_scene

CONFIGS = ("config.yaml", "config-ahc.yaml")
CORPUS_SPEAKERS = ("speechbrain_spk1_snt1.wav", "sense_and_sensibility_01_austen_64kb-0880.wav")


@pytest.fixture(scope="module")
def clips(audio_dir) -> dict[str, np.ndarray]:
    """A synthetic three-voice scene, and (when the corpus is there) two corpus speakers with 0.5 s of overlap."""
    out = {"synthetic": synthetic_scene(5.0, np.random.default_rng(5))[0].astype(np.float64)}
    paths = [Path(audio_dir) / name for name in CORPUS_SPEAKERS]
    if all(p.is_file() for p in paths):
        from oasr.audio.io import load_audio

        a, b = (load_audio(str(p)).astype(np.float64) for p in paths)
        overlap = SR // 2
        mix = np.zeros(len(a) + len(b) - overlap)
        mix[: len(a)] += a
        mix[len(a) - overlap :] += b
        out["corpus"] = mix
    return out


@pytest.fixture(scope="module")
def oasr_pipelines(pyannote_dir):
    from oasr.diarization.pyannote import load

    return {name: load(pyannote_dir / name, dtype=torch.float64) for name in CONFIGS}


@pytest.fixture(scope="module")
def oasr_runs(oasr_pipelines, clips):
    """Both clips in one batch per pipeline."""
    names = list(clips)
    return {
        config: dict(zip(names, pipeline.analyse([clips[n] for n in names])))
        for config, pipeline in oasr_pipelines.items()
    }


def _pyannote_pipeline(path):
    from pyannote.audio import Pipeline

    pipeline = Pipeline.from_pretrained(path)
    _ = pipeline._embedding.min_num_samples  # probed in float32, before the switch to float64
    pipeline._segmentation.model.double()
    pipeline._embedding.model_.double()
    return pipeline


@pytest.fixture(scope="module")
def reference(pyannote_dir, clips):
    """pyannote's pipelines on the clips. The VBx run caches segmentation and embeddings in the file dict
    (pyannote's own training cache), which the agglomerative run then reuses."""
    pipelines = {name: _pyannote_pipeline(pyannote_dir / name) for name in CONFIGS}
    out = {}
    for clip, audio in clips.items():
        file = {"waveform": torch.from_numpy(audio)[None], "sample_rate": SR, "uri": clip}
        stages = {}

        def hook(step, artefact, file=None, total=None, completed=None, stages=stages):
            if total is None:  # a copy: the pipeline later caps the count it reported in place
                stages[step] = copy.deepcopy(artefact)

        for name, pipeline in pipelines.items():
            pipeline.training = True
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[name, clip] = (pipeline(file, hook=hook), dict(stages))
    return pipelines, out


def _turns(annotation) -> list[tuple[float, float, str]]:
    """pyannote's turns, its labels renamed by first turn (oasr's convention; pyannote numbers by cluster)."""
    turns = sorted((s.start, s.end, label) for s, _, label in annotation.itertracks(yield_label=True))
    names: dict[str, str] = {}
    for _, _, label in turns:
        names.setdefault(label, f"SPEAKER_{len(names):02d}")
    return [(s, e, names[label]) for s, e, label in turns]


def test_detect_and_contract(pyannote_dir, oasr_pipelines, tmp_path):
    from oasr.diarization.pyannote import detect

    assert detect(pyannote_dir) and detect(pyannote_dir / "config-ahc.yaml")
    assert not detect(tmp_path) and not detect(pyannote_dir / "segmentation")
    assert all(isinstance(p, Diarizer) for p in oasr_pipelines.values())


def test_checkpoint_layout_read(pyannote_dir):
    from oasr.diarization.pyannote.checkpoint import read_model_checkpoint

    seg = read_model_checkpoint(pyannote_dir / "segmentation")
    assert seg.architecture == "pyannote.audio.models.segmentation.PyanNet.PyanNet"
    assert seg.specifications.powerset and seg.specifications.classes == ["speaker#1", "speaker#2", "speaker#3"]
    assert seg.hyper_parameters["lstm"]["hidden_size"] == 16 and seg.version == "4.0.3"
    emb = read_model_checkpoint(pyannote_dir / "embedding")
    assert emb.class_name == "WeSpeakerResNet34" and emb.hyper_parameters["num_mel_bins"] == 8


def test_segmentation_equals_pyannote(oasr_pipelines, oasr_runs, reference, clips):
    pipelines, runs = reference
    ref_model = pipelines["config.yaml"]._segmentation.model
    mine = oasr_pipelines["config.yaml"]
    rf = ref_model.receptive_field
    assert (mine.frames.start, mine.frames.duration, mine.frames.step) == (rf.start, rf.duration, rf.step)
    for clip, audio in clips.items():
        windows = mine._windows(torch.from_numpy(audio))
        with torch.inference_mode():
            expected = ref_model(windows[:, None]).numpy()
        got = oasr_runs["config.yaml"][clip].scores
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
        _, stages = runs["config.yaml", clip]
        np.testing.assert_array_equal(oasr_runs["config.yaml"][clip].binary, stages["segmentation"].data)
        np.testing.assert_array_equal(oasr_runs["config.yaml"][clip].count, stages["speaker_counting"].data[:, 0])


def test_embeddings_equal_pyannote(oasr_runs, reference, clips):
    _, runs = reference
    for clip in clips:
        _, stages = runs["config.yaml", clip]
        got = oasr_runs["config.yaml"][clip].embeddings
        # fbank's mel filters are built in float64 by oasr, in float32 by torchaudio: ~1e-8 relative
        np.testing.assert_allclose(got, stages["embeddings"], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("config", CONFIGS)
def test_cluster_labels_equal_pyannote(config, oasr_runs, reference, clips):
    pipelines, runs = reference
    for clip in clips:
        _, stages = runs[config, clip]
        binary = stages["segmentation"]
        hard, _, centroids = pipelines[config].clustering(
            embeddings=stages["embeddings"], segmentations=binary, min_clusters=1, max_clusters=np.inf
        )
        hard[np.sum(binary.data, axis=1) == 0] = -2
        mine = oasr_runs[config][clip]
        np.testing.assert_array_equal(mine.clusters, hard)
        np.testing.assert_allclose(mine.centroids, centroids, rtol=1e-6, atol=1e-7)
    assert len(oasr_runs[config]["synthetic"].diarization.speakers) >= 2  # the fixture is not degenerate


@pytest.mark.parametrize("config", CONFIGS)
def test_segments_equal_pyannote(config, oasr_runs, reference, clips):
    _, runs = reference
    for clip in clips:
        output, _ = runs[config, clip]
        mine = oasr_runs[config][clip]
        for got, expected in (
            (mine.diarization, output.speaker_diarization),
            (mine.exclusive, output.exclusive_speaker_diarization),
        ):
            expected = _turns(expected)
            assert [t.speaker for t in got.turns] == [t[2] for t in expected]
            np.testing.assert_allclose(
                [(t.start, t.end) for t in got.turns], [t[:2] for t in expected], rtol=0, atol=1e-9
            )
        # speaker embeddings: pyannote's centroids, its rows in its label order, ours by first turn
        labels = output.speaker_diarization.labels()
        first = dict.fromkeys(
            label
            for *_, label in sorted(
                (s.start, s.end, label) for s, _, label in output.speaker_diarization.itertracks(yield_label=True)
            )
        )
        rows = [labels.index(label) for label in first]
        np.testing.assert_allclose(mine.speaker_embeddings, output.speaker_embeddings[rows], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("bounds", [{"num_speakers": 3}, {"max_speakers": 1}])
def test_speaker_count_bounds_equal_pyannote(bounds, oasr_pipelines, reference, clips):
    """Forcing the count: VBx's k-means fallback (pyannote's scikit-learn call) and the capped count."""
    pipelines, runs = reference
    pipeline = pipelines["config.yaml"]
    file = {"waveform": torch.from_numpy(clips["synthetic"])[None], "sample_rate": SR, "uri": "synthetic"}
    stages = runs["config.yaml", "synthetic"][1]
    file["training_cache/segmentation"] = stages["segmentation"]
    file["training_cache/embeddings"] = {"embeddings": stages["embeddings"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = pipeline(file, **bounds)
    got = oasr_pipelines["config.yaml"].diarize([clips["synthetic"]], **bounds)[0]
    exp = _turns(expected.speaker_diarization)
    assert [t.speaker for t in got.turns] == [t[2] for t in exp]
    np.testing.assert_allclose([(t.start, t.end) for t in got.turns], [t[:2] for t in exp], rtol=0, atol=1e-9)


def test_rows_independent_and_edge_clips(oasr_pipelines, clips):
    pipeline = oasr_pipelines["config-ahc.yaml"]
    short = clips["synthetic"][: int(0.7 * SR)]  # shorter than one 2 s window
    batch = pipeline.diarize([clips["synthetic"], np.zeros(0), short])
    alone = [pipeline.diarize([x])[0] for x in (clips["synthetic"], short)]
    assert [batch[0].turns, batch[2].turns] == [d.turns for d in alone] and batch[0].turns and batch[2].turns
    assert all(isinstance(d, Diarization) for d in batch)
    assert batch[1].turns == [] and batch[1].duration == 0.0 and batch[2].duration == pytest.approx(0.7)
    # one speaker at a time (with min_duration_off 0: closing a speaker's gaps may overlap another's turn)
    exclusive = oasr_pipelines["config.yaml"].diarize([clips["synthetic"]], exclusive=True)[0]
    for a, b in zip(exclusive.turns, exclusive.turns[1:]):
        assert b.start >= a.end - 1e-9


def test_embed_one_vector_per_clip(oasr_pipelines, reference, clips):
    pipelines, _ = reference
    model = pipelines["config.yaml"]._embedding.model_
    audios = [clips["synthetic"][: 2 * SR], clips["synthetic"][SR : int(1.5 * SR)]]
    got = oasr_pipelines["config.yaml"].embed(audios)
    assert got.shape == (2, 256) and got.dtype == np.float32
    with torch.inference_mode():
        expected = np.stack([model(torch.from_numpy(a)[None, None])[0].numpy() for a in audios])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="at least 400"):
        oasr_pipelines["config.yaml"].embed([np.zeros(100)])


def test_bad_input_and_config(oasr_pipelines, pyannote_dir, tmp_path):
    import yaml

    from oasr.diarization.pyannote import load

    pipeline = oasr_pipelines["config.yaml"]
    with pytest.raises(ValueError, match="1-D float"):
        pipeline.diarize([np.zeros((2, 100), np.float32)])
    with pytest.raises(ValueError, match="min_speakers"):
        pipeline.diarize([np.zeros(SR)], min_speakers=3, max_speakers=2)
    with pytest.raises(ValueError, match="num_speakers"):
        pipeline.diarize([np.zeros(SR)], num_speakers=0)
    config = yaml.safe_load((pyannote_dir / "config.yaml").read_text())
    config["pipeline"]["params"]["clustering"] = "KMeansClustering"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match="KMeansClustering"):
        load(tmp_path)
    config["pipeline"]["params"]["clustering"] = "VBxClustering"
    config["pipeline"]["params"]["segmentation"] = "pyannote/segmentation-3.0"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(FileNotFoundError, match="downloaded"):
        load(tmp_path)


def test_checkpoint_reader_refuses_foreign_code(tmp_path):
    import pickle

    from oasr.diarization.pyannote.checkpoint import read_model_checkpoint

    torch.save({"state_dict": {}, "pyannote.audio": {"x": pickle.Unpickler}}, tmp_path / "pytorch_model.bin")
    with pytest.raises(pickle.UnpicklingError, match="should not name"):
        read_model_checkpoint(tmp_path)
