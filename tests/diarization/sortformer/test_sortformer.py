"""NeMo's Sortformer diarizer (``.nemo`` archives) through ``oasr.diarization.sortformer``, held to
NeMo itself.

Two tiny archives are built by NeMo's ``SortformerEncLabelModel`` and written by ``save_to``
(``nemo_reference``): an offline one (the v1 release's shape, ``normalize: per_feature``) and a
streaming one (the v2 release's, ``streaming_mode: true`` with a small speaker cache and FIFO so
that a few seconds compress the cache several times; ``normalize: NA`` so that a live stream can
equal it). Every stage is compared in float64 with NeMo's modules (features, FastConformer,
transformer, probabilities), the streaming forward with NeMo's ``forward`` chunk by chunk, the
segments with NeMo's ``diarize()`` post-processing, and the live stream with both. Skipped where
``nemo-toolkit`` is not installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import tarfile
import warnings

import numpy as np
import pytest
import torch

from oasr.diarization import Diarizer
from oasr.diarization.sortformer import PostProcessing, detect, load
from oasr.diarization.sortformer.postprocess import speech_segments

CLIPS = ("jfk.wav", "bambatse_15_haggard_0247.wav")


def _cos_err(a, b) -> tuple[float, float]:
    a, b = torch.as_tensor(a).double().flatten(), torch.as_tensor(b).double().flatten()
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0)), float((a - b).abs().max())


def _conversation(manifest) -> list[np.ndarray]:
    """A 6 s "conversation" (speech, 1.5 s of silence, another voice, the first again), a 0.5 s
    clip and 0.77 s of noise: unequal lengths, a single chunk and many."""
    from oasr.audio import load_audio

    by_name = {row["audio"]: row["path"] for row in manifest}
    a, b = (load_audio(by_name[c]) for c in CLIPS)
    talk = np.concatenate([a[16000 : 16000 * 3], np.zeros(24000, np.float32), b, a[16000 * 5 : 16000 * 7]])
    noise = (0.1 * np.random.default_rng(0).standard_normal(12345)).astype(np.float32)
    return [talk, b, noise]


def _nemo_lines(model, probs: torch.Tensor) -> list[str]:
    """NeMo's ``diarize()`` output lines of one row's probabilities (its ``_diarize_output_processing``
    with the default post-processing)."""
    from nemo.collections.asr.parts.mixins.diarization import DiarizeConfig
    from nemo.collections.asr.parts.utils.vad_utils import load_postprocessing_from_yaml

    model._diarize_audio_rttm_map = {"x": {"offset": 0.0}}
    cfg = DiarizeConfig(postprocessing_params=load_postprocessing_from_yaml(None))
    return model._diarize_output_processing(probs[None], ["x"], cfg)[0]


def _lines(segments) -> list[str]:
    return [f"{s:.3f} {e:.3f} speaker_{k}" for k, segs in enumerate(segments) for s, e in segs]


@pytest.fixture(scope="module")
def refs(tmp_path_factory, manifest):
    """name -> dict(path, audios, nemo_lines32 (NeMo's diarize() in float32), probs64 (NeMo's
    forward in float64, per row), lines64, stages (offline: NeMo's features, FastConformer and
    transformer outputs of the first row)). Built once for the module."""
    pytest.importorskip("nemo.collections.asr", reason="nemo-toolkit is not installed (the reference)")
    from tests.diarization.sortformer import nemo_reference
    from tests.models.parakeet.test_nemo_archive import _exact_filters

    audios = _conversation(manifest)
    root = tmp_path_factory.mktemp("sortformer")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, streaming, normalize in (("offline", False, "per_feature"),):
            path, model = nemo_reference.build(root, streaming, audios[0], normalize=normalize)
            lines32 = model.diarize(audios, sample_rate=16000, batch_size=1, num_workers=0, verbose=False)
            model = _exact_filters(model.double().eval().requires_grad_(False))
            model.preprocessor.forward = model.preprocessor.get_features  # NeMo casts to float32 there
            case = {"path": path, "audios": audios, "lines32": lines32, "probs64": [], "lines64": []}
            with torch.no_grad():
                for audio in audios:
                    x = torch.from_numpy(audio).double()[None]
                    probs = model(audio_signal=x, audio_signal_length=torch.tensor([x.shape[1]]))[0]
                    case["probs64"].append(probs.numpy())
                    case["lines64"].append(_nemo_lines(model, probs))
                if not streaming:
                    x = torch.from_numpy(audios[0]).double()[None]
                    feats, n = model.process_signal(audio_signal=x, audio_signal_length=torch.tensor([x.shape[1]]))
                    feats = feats[:, :, : int(n[0])]
                    emb, lens = model.frontend_encoder(processed_signal=feats, processed_signal_length=n)
                    mask = model.sortformer_modules.length_to_mask(lens, emb.shape[1])
                    hidden = model.transformer_encoder(encoder_states=emb, encoder_mask=mask)
                    case["stages"] = (feats[0].T, emb[0], hidden[0])
            out[name] = case
    return out


@pytest.fixture(scope="module")
def diarizers(refs):
    return {name: load(case["path"], dtype=torch.float64) for name, case in refs.items()}


def test_detect_reads_the_archive_and_its_unpacked_directory(refs, tmp_path):
    path = refs["offline"]["path"]
    assert detect(path)
    unpacked = tmp_path / "unpacked"
    with tarfile.open(path) as tar:
        tar.extractall(unpacked, filter="data")
    assert detect(unpacked)
    d = load(unpacked, dtype=torch.float64)
    a = refs["offline"]["audios"][1]
    assert np.array_equal(
        d.speaker_probabilities([a])[0], load(path, dtype=torch.float64).speaker_probabilities([a])[0]
    )
    # Another NeMo model's archive is not a Sortformer.
    other = tmp_path / "other"
    other.mkdir()
    (other / "model_config.yaml").write_text("target: nemo.collections.asr.models.EncDecCTCModelBPE\n")
    torch.save({}, other / "model_weights.ckpt")
    assert not detect(other) and not detect(tmp_path / "missing.nemo")


@torch.no_grad()
def test_offline_stages_match_nemo_in_float64(refs, diarizers):
    d, case = diarizers["offline"], refs["offline"]
    want_feats, want_emb, want_hidden = case["stages"]
    rows = d._rows(case["audios"][:1])
    feats, lens = d.frontend.compute_batch(rows)
    cos, err = _cos_err(feats[0], want_feats)
    assert cos > 1 - 1e-12 and err < 1e-6, ("features", cos, err)
    model = d.model
    embs, n = model.pre_encode(feats, lens)
    enc = model.encoder
    x = embs * enc.input_scale
    for layer in enc.layers:
        x = layer(x, *enc.block_inputs(x, n))
    x = model.sortformer_modules.encoder_proj(x)
    cos, err = _cos_err(x[0], want_emb)
    assert cos > 1 - 1e-12 and err < 1e-6, ("FastConformer + projection", cos, err)
    hidden = model.transformer_encoder(want_emb[None], n)  # the transformer alone, on NeMo's input
    cos, err = _cos_err(hidden[0], want_hidden)
    assert cos > 1 - 1e-12 and err < 1e-12, ("transformer", cos, err)


@pytest.mark.parametrize("name", ["offline"])
def test_probabilities_match_nemo_forward_and_rows_are_independent(refs, diarizers, name):
    """The offline forward, and the streaming one chunk by chunk with its speaker cache and FIFO,
    equal NeMo's ``forward`` in float64; a padded batch gives each row what it gets alone."""
    d, case = diarizers[name], refs[name]
    batched = d.speaker_probabilities(case["audios"])
    for audio, got, want in zip(case["audios"], batched, case["probs64"]):
        assert got.shape == want.shape
        cos, err = _cos_err(got, want)
        assert cos > 1 - 1e-12 and err < 1e-6, (name, len(audio), cos, err)
        alone = d.speaker_probabilities([audio])[0]
        assert np.abs(alone - got).max() < 1e-12


def test_postprocessing_parameters_match_nemo():
    """Thresholds, padding and minimum durations as NeMo's ``ts_vad_post_processing`` applies them,
    speech running to the end included."""
    pytest.importorskip("nemo.collections.asr", reason="nemo-toolkit is not installed (the reference)")
    from nemo.collections.asr.parts.utils.speaker_utils import merge_float_intervals
    from nemo.collections.asr.parts.utils.vad_utils import PostProcessingParams, ts_vad_post_processing
    from omegaconf import OmegaConf

    g = np.random.default_rng(1)
    walk = 1 / (1 + np.exp(-np.cumsum(g.normal(0, 0.8, size=(6, 300)), axis=1)))
    walk[0, -5:] = 0.9  # speech at the end
    for params in (
        PostProcessing(),
        PostProcessing(
            onset=0.6, offset=0.4, pad_onset=0.05, pad_offset=0.1, min_duration_on=0.2, min_duration_off=0.3
        ),
        PostProcessing(onset=0.7, offset=0.3, pad_onset=0.2, pad_offset=0.0, min_duration_on=0.0, min_duration_off=0.5),
    ):
        cfg = OmegaConf.structured(PostProcessingParams(**vars(params)))
        for probs in walk:
            ts = ts_vad_post_processing(torch.from_numpy(probs), cfg, unit_10ms_frame_count=8)
            want = merge_float_intervals([[round(s, 2), round(e, 2)] for s, e in ts.tolist()])
            got = [x for seg in speech_segments(probs, 8, params) for x in seg]
            # NeMo's interval merge hands its times back through float32
            assert got == pytest.approx([x for seg in want for x in seg], abs=1e-6), params


def test_the_diarizer_contract(refs, diarizers):
    d = diarizers["offline"]
    assert isinstance(d, Diarizer) and d.sampling_rate == 16000 and d.max_speakers == 4
    audio = refs["offline"]["audios"][0]
    full = d.diarize([audio])[0]
    assert full.speakers == [f"SPEAKER_{i:02d}" for i in range(len(full.speakers))]
    firsts = [min(t.start for t in full.turns if t.speaker == s) for s in full.speakers]
    assert firsts == sorted(firsts) and full.duration == pytest.approx(len(audio) / 16000)
    assert len(full.speakers) >= 2
    one = d.diarize([audio], num_speakers=1)[0]
    talk = {s: sum(t.duration for t in full.turns if t.speaker == s) for s in full.speakers}
    longest = max(talk, key=talk.get)
    assert one.speakers == ["SPEAKER_00"] and [(t.start, t.end) for t in one.turns] == [
        (t.start, t.end) for t in full.turns if t.speaker == longest
    ]
    assert d.diarize([audio], max_speakers=4)[0].turns == full.turns
    for bad in (dict(num_speakers=5), dict(num_speakers=0), dict(min_speakers=3, max_speakers=2)):
        with pytest.raises(ValueError):
            d.diarize([audio], **bad)
    with pytest.raises(ValueError, match="NaN"):
        d.diarize([np.full(1600, np.nan, np.float32)])
    with pytest.raises(ValueError, match="empty"):
        d.diarize([np.zeros(0, np.float32)])
    assert d.diarize([]) == []
