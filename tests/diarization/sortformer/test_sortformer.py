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

import io
import tarfile
import warnings

import numpy as np
import pytest
import torch

from oasr.diarization import Diarizer
from oasr.diarization.sortformer import PostProcessing, detect, load
from oasr.diarization.sortformer.postprocess import speech_segments
from oasr.models.base import LoadError

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
        for name, streaming, normalize in (("offline", False, "per_feature"), ("streaming", True, "NA")):
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
        # NeMo's asynchronous streaming update holds its buffers in float32: compared in float32.
        path, model = nemo_reference.build(root, True, audios[0], normalize="NA", async_streaming=True)
        with torch.no_grad():
            probs = [
                model(audio_signal=torch.from_numpy(a)[None], audio_signal_length=torch.tensor([len(a)]))[0]
                for a in audios
            ]
        out["async"] = {"path": path, "audios": audios, "probs32": [p.numpy() for p in probs]}
    return out


@pytest.fixture(scope="module")
def diarizers(refs):
    return {name: load(case["path"], dtype=torch.float64) for name, case in refs.items() if name != "async"}


def test_detect_reads_the_archive_and_its_unpacked_directory(refs, tmp_path):
    path = refs["offline"]["path"]
    assert detect(path) and detect(refs["streaming"]["path"])
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


@pytest.mark.parametrize("name", ["offline", "streaming"])
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


def test_async_streaming_archive_matches_nemo_in_float32(refs):
    """``async_streaming: true``: the speaker cache keeps each frame's probabilities from the step
    that moved it in (the synchronous update's would differ here by far more than float32 noise)."""
    case = refs["async"]
    d = load(case["path"])
    assert d.config.async_streaming
    for got, want in zip(d.speaker_probabilities(case["audios"]), case["probs32"]):
        assert got.shape == want.shape and np.abs(got - want).max() < 1e-5
    stream = d.stream()
    for piece in np.array_split(case["audios"][0], 4):
        stream.push(piece)
    stream.finish()
    assert np.abs(stream.speaker_probabilities() - case["probs32"][0]).max() < 1e-5


def test_streaming_archive_compresses_its_speaker_cache(refs, diarizers):
    """The fixture exercises what it claims: the 6 s clip overflows the FIFO and the cache, and
    some frames count as silence."""
    from oasr.diarization.sortformer.streaming import chunk_bounds

    d = diarizers["streaming"]
    p = d.config.streaming
    frames = len(refs["streaming"]["audios"][0]) // 160 // 8
    assert frames > 3 * (p.spkcache_len + p.fifo_len)
    assert len(list(chunk_bounds(len(refs["streaming"]["audios"][0]) // 160, p, 8))) > 10
    probs = refs["streaming"]["probs64"][0]
    assert (probs.sum(axis=1) < p.sil_threshold).any() and (probs > 0.5).any()


@pytest.mark.parametrize("name", ["offline", "streaming"])
def test_segments_match_nemo_diarize(refs, diarizers, name):
    """NeMo's default post-processing (onset 0.5, offset 0.5, no padding, no minimum durations):
    the float64 segments equal NeMo's on NeMo's float64 probabilities, and float32 end to end
    equals NeMo's own ``diarize()``."""
    case = refs[name]
    d64 = diarizers[name]
    for audio, want in zip(case["audios"], case["lines64"]):
        assert _lines(d64.segments(d64.speaker_probabilities([audio])[0])) == want
    d32 = load(case["path"])
    got = [_lines(d32.segments(p)) for p in d32.speaker_probabilities(case["audios"])]
    assert got == case["lines32"]
    assert any(case["lines32"])


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


def _check_events(events, turns) -> None:
    """Every closed turn was opened first, at its start, and nothing stays open."""
    open_at: dict[str, float] = {}
    closed = []
    for e in events:
        if e.type == "turn_opened":
            assert e.speaker not in open_at and e.time == e.start
            open_at[e.speaker] = e.start
        else:
            assert open_at.pop(e.speaker) == e.start
            closed.append(e.turn)
    assert not open_at
    assert sorted(closed, key=lambda t: (t.start, t.end, t.speaker)) == turns


def test_stream_equals_the_streaming_forward_and_nemo(refs, diarizers):
    """Audio fed in uneven pieces: each chunk's probabilities are NeMo's (the archive does not
    normalise its features, so the live front end is the offline one), and the turns closed are
    those ``diarize`` gives, each opened first."""
    d, case = diarizers["streaming"], refs["streaming"]
    audio, want = case["audios"][0], case["probs64"][0]
    stream = d.stream()
    updates = []
    for piece in np.array_split(audio, [1000, 1001, 7000, 30000, 30123, 61000]):
        updates += stream.push(piece)
    assert len(updates) > 5  # chunks ran while audio was still arriving
    updates += stream.finish()
    probs = np.concatenate([u.probs for u in updates])
    cos, err = _cos_err(probs, want)
    assert probs.shape == want.shape and cos > 1 - 1e-12 and err < 1e-6, (cos, err)
    assert [u.start for u in updates] == pytest.approx([i * 6 * 0.08 for i in range(len(updates))])
    offline = d.diarize([audio])[0]
    assert stream.diarization().turns == offline.turns and len(offline.turns) > 3
    _check_events([e for u in updates for e in u.events], stream.diarization().turns)
    live = [e for u in updates[: len(updates) // 2] for e in u.events]  # events come while the audio does
    assert {"turn_opened", "turn_closed"} <= {e.type for e in live}
    with pytest.raises(RuntimeError):
        stream.push(audio[:100])


def test_stream_modes_settings_and_padding(refs, diarizers):
    """The surfaces' interface (``stream(mode)``, ``feed`` / ``close`` -> events); settings changed
    per stream (as the model cards set them per latency) run as an archive saved with them; with
    padding and minimum durations a stream's turns are still ``diarize``'s."""
    d = diarizers["streaming"]
    audio = refs["streaming"]["audios"][0]
    changes = dict(chunk_len=4, chunk_right_context=1, fifo_len=5, spkcache_update_period=3)
    post = {"pad_onset": 0.1, "pad_offset": 0.2, "min_duration_on": 0.3, "min_duration_off": 0.25}
    other = load(refs["streaming"]["path"], dtype=torch.float64, streaming=changes, postprocessing=post)
    stream = d.open_stream(**changes)
    for piece in np.array_split(audio, 9):
        stream.push(piece)
    stream.finish()
    assert np.abs(stream.speaker_probabilities() - other.speaker_probabilities([audio])[0]).max() < 1e-12
    padded = other.stream()
    assert padded.latency_s == pytest.approx(5 * 0.08)
    events = [e for piece in np.array_split(audio, 5) for e in padded.feed(piece)] + padded.close()
    turns = other.diarize([audio])[0].turns
    assert turns and padded.diarization().turns == turns
    _check_events(events, turns)
    assert all(set(e.to_dict()) == {"type", "speaker", "time", "start"} for e in events)
    assert d.stream("voice_agent").params.chunk_right_context == 7
    with pytest.raises(ValueError, match="unknown streaming mode"):
        d.stream("fast")
    with pytest.raises(ValueError, match="spkcache_len"):
        d.open_stream(spkcache_len=3)
    with pytest.raises(ValueError, match="unknown streaming"):
        d.open_stream(chunk_size=3)


def test_running_normalisation_is_the_whole_recordings_once_all_frames_are_in(diarizers, refs):
    """A live stream of a ``per_feature`` archive normalises with the frames so far: a recording of
    one chunk, whose only step sees every frame, gets exactly what ``diarize`` gives it."""
    from dataclasses import replace

    from oasr.diarization.sortformer import SortformerDiarizer
    from oasr.diarization.sortformer.stream import _RunningNorm

    d = diarizers["streaming"]
    spec = d.feature_spec
    normalising = SortformerDiarizer(
        d.model, replace(spec, params={**spec.params, "normalize": True}), d.postprocessing, dtype=torch.float64
    )
    audio = refs["streaming"]["audios"][0]
    short = audio[16000 : 16000 + 6400]  # 40 mel frames: 5 encoder frames, one chunk
    stream = normalising.stream()
    stream.push(short[:3000])
    stream.push(short[3000:])
    stream.finish()
    assert np.abs(stream.speaker_probabilities() - normalising.speaker_probabilities([short])[0]).max() < 1e-12

    raw = d.frontend  # the archive's front end does not normalise
    frames = raw(torch.from_numpy(audio))
    norm = _RunningNorm(raw.n_features)
    for part in torch.split(frames, 37):
        norm.update(part)
    assert (norm(frames) - normalising.frontend(torch.from_numpy(audio))).abs().max() < 1e-9


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
    assert d.diarize([audio], max_speakers=6)[0].turns == full.turns  # above its 4 slots: met as it stands
    for bad in (dict(num_speakers=5), dict(min_speakers=5), dict(num_speakers=0), dict(min_speakers=3, max_speakers=2)):
        with pytest.raises(ValueError):
            d.diarize([audio], **bad)
    with pytest.raises(ValueError, match="NaN"):
        d.diarize([np.full(1600, np.nan, np.float32)])
    with pytest.raises(ValueError, match="empty"):
        d.diarize([np.zeros(0, np.float32)])
    assert d.stream is None  # an offline archive does not stream
    with pytest.raises(ValueError, match="offline archive"):
        d.open_stream()
    assert d.diarize([]) == []


def test_unimplemented_configs_are_refused(refs, tmp_path):
    """A config value oasr does not implement is named, not run differently."""
    import yaml

    with tarfile.open(refs["streaming"]["path"]) as tar:
        cfg = yaml.safe_load(tar.extractfile("./model_config.yaml").read())
        weights = tar.extractfile("./model_weights.ckpt").read()
    for key, value, message in (
        ("sortformer_modules", {**cfg["sortformer_modules"], "fifo_len": -1}, "fifo_len"),
        ("transformer_encoder", {**cfg["transformer_encoder"], "mask_future": True}, "mask_future"),
    ):
        bad = tmp_path / key
        bad.mkdir()
        (bad / "model_config.yaml").write_text(yaml.safe_dump({**cfg, key: value}))
        (bad / "model_weights.ckpt").write_bytes(weights)
        with pytest.raises(LoadError, match=message):
            load(bad)
    state = torch.load(io.BytesIO(weights))
    del state["sortformer_modules.first_hidden_to_hidden.bias"]
    short = tmp_path / "short"
    short.mkdir()
    (short / "model_config.yaml").write_text(yaml.safe_dump(cfg))
    torch.save(state, short / "model_weights.ckpt")
    with pytest.raises(LoadError, match="first_hidden_to_hidden"):
        load(short)
