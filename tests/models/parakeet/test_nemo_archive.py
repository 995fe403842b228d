"""NeMo's own ``.nemo`` archives through oasr's loader, held to NeMo itself.

Each fixture (``nemo_reference``: CTC, RNN-T, TDT, hybrid TDT + CTC) is built by NeMo's classes from
a release-shaped config and written by ``save_to``; oasr reads the archive (``ASREngine("x.nemo")``,
the unpacked directory, ``oasr transcribe --model x.nemo``) and every stage is compared in float64
against NeMo's modules: the mel front end, the encoder, the CTC log-probs / the joint's first-step
outputs; then greedy tokens and text against NeMo's ``transcribe()`` on real clips and short random
inputs. Skipped where ``nemo-toolkit`` is not installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import oasr
from oasr.models.base import LoadError
from oasr.models.loaders import load_pretrained
from oasr.models.parakeet.features import ParakeetFrontend
from tests.models.parakeet.conftest import ctc_collapse, parity

KINDS = ("ctc", "rnnt", "tdt", "hybrid_tdt_ctc")


def _nemo():
    return pytest.importorskip(
        "nemo.collections.asr", reason="nemo-toolkit is not installed (the reference of the .nemo parity tests)"
    )


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """kind -> (.nemo path, NeMo model in float64, eval). Built once for the module."""
    _nemo()
    from tests.models.parakeet import nemo_reference

    root = tmp_path_factory.mktemp("nemo_archives")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in KINDS:
            path, model = nemo_reference.build(kind, root)
            out[kind] = (path, _exact_filters(model.double().eval().requires_grad_(False)))
    return out


def _exact_filters(model):
    """NeMo's mel front end (``FilterbankFeatures``) in float64 throughout: its filterbank and window
    recomputed as NeMo computes them (librosa's Slaney mel filters, a symmetric Hann window; saved
    in float32), and its STFT without the cast of the window to float32 (NeMo's
    ``AudioPreprocessor`` runs the front end in float32 on purpose; the float32 path is compared
    on its own in ``test_float32_features_match_nemos_preprocessor``)."""
    import librosa

    fz = model.preprocessor.featurizer

    def stft(x: torch.Tensor) -> torch.Tensor:
        return torch.stft(
            x,
            n_fft=fz.n_fft,
            hop_length=fz.hop_length,
            win_length=fz.win_length,
            center=True,
            window=fz.window,
            return_complex=True,
            pad_mode="constant",
        )

    fz.stft = stft
    fb = librosa.filters.mel(
        sr=fz.sample_rate, n_fft=fz.n_fft, n_mels=fz.nfilt, fmin=0, fmax=None, norm="slaney", dtype=np.float64
    )
    fz.fb = torch.from_numpy(fb).double()[None]
    fz.window = torch.hann_window(fz.win_length, periodic=False, dtype=torch.float64)
    return model


@pytest.fixture(params=KINDS)
def case(request, archives):
    path, model = archives[request.param]
    return request.param, path, model


def _inputs(waveforms, short: bool = True) -> list[np.ndarray]:
    """Real clips (the shorter ones) and random signals; ``short=False`` keeps only those of a
    second or more (NeMo's ``transcribe()`` pads shorter audio with silence to one second on both
    sides, which oasr does not do)."""
    g = np.random.default_rng(0)
    noise = [(0.1 * g.standard_normal(n)).astype(np.float32) for n in (4000, 12345, 20000, 36000)]
    out = [w for w in waveforms if len(w) < 16000 * 6] + noise
    return out if short else [w for w in out if len(w) >= 16000]


def _nemo_features(model, wave: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """NeMo's front end in float64: (1, T, F) over its valid frames, and the length."""
    x = torch.from_numpy(wave).double()[None]
    feats, n = model.preprocessor.featurizer(x, torch.tensor([x.shape[1]]))
    return feats.transpose(1, 2)[:, : int(n[0])], n


@torch.no_grad()
def test_every_stage_matches_nemo_in_float64(case, waveforms):
    kind, path, ref = case
    lm = load_pretrained(path)
    model = lm.model.double()
    frontend = ParakeetFrontend.from_spec(lm.feature_spec, dtype=torch.float64)
    for wave in _inputs(waveforms):
        want_feats, n = _nemo_features(ref, wave)
        feats, lens = frontend.features(torch.from_numpy(wave)[None], torch.tensor([len(wave)]))
        assert int(lens[0]) == int(n[0])
        cos, err = parity(feats, want_feats)
        assert cos > 1 - 1e-12 and err < 1e-6, (kind, "features", cos, err)

        want_enc, want_len = ref.encoder(audio_signal=want_feats.transpose(1, 2), length=n)
        enc, enc_len = model.encode_offline(want_feats, n)
        assert int(enc_len[0]) == int(want_len[0])
        cos, err = parity(enc, want_enc.transpose(1, 2))
        assert cos > 1 - 1e-12 and err < 1e-6, (kind, "encoder", cos, err)

        if kind in ("ctc", "hybrid_tdt_ctc"):
            head = ref.decoder if kind == "ctc" else ref.ctc_decoder
            want = head(encoder_output=want_enc)
            cos, err = parity(model.ctc_log_probs(enc), want)  # oasr's CTC head returns float32 log-probs
            assert cos > 1 - 1e-12 and err < 1e-4, (kind, "ctc log-probs", cos, err)
        if kind != "ctc":
            # The joint over every frame for the predictor's start state (blank-primed).
            g, _ = ref.decoder.predict(None, state=None, add_sos=False, batch_size=1)
            want = ref.joint.joint(want_enc.transpose(1, 2), g)[:, :, 0]  # (1, T', V + durations)
            pred = model.predictor.predict(model.predictor.init_state(1))
            # On a CPU NeMo's joint ends in a log-softmax over all its outputs (``log_softmax: null``).
            got = model.joiner(enc, pred[:, None]).log_softmax(dim=-1)
            cos, err = parity(got, want)
            assert cos > 1 - 1e-12 and err < 1e-6, (kind, "joint", cos, err)


def _nemo_greedy(ref, kind: str, enc: torch.Tensor, enc_len: torch.Tensor, head: str) -> tuple[list[int], str]:
    """NeMo's greedy decoding (the decoding objects ``transcribe()`` runs) over encoder output."""
    if head == "ctc":
        decoding = ref.decoding if kind == "ctc" else ref.ctc_decoding
        log_probs = (ref.decoder if kind == "ctc" else ref.ctc_decoder)(encoder_output=enc)
        hyps = decoding.ctc_decoder_predictions_tensor(log_probs, decoder_lengths=enc_len, return_hypotheses=True)
    else:
        hyps = ref.decoding.rnnt_decoder_predictions_tensor(
            encoder_output=enc, encoded_lengths=enc_len, return_hypotheses=True
        )
    hyp = hyps[0]
    tokens = [int(t) for t in hyp.y_sequence]
    # A CTC hypothesis carries the frame-wise labels (the text is their collapse).
    return (ctc_collapse(tokens, ref.tokenizer.vocab_size) if head == "ctc" else tokens), hyp.text


@torch.no_grad()
def test_greedy_tokens_and_text_equal_nemos_decoding_in_float64(case, waveforms):
    """Every input, the sub-second ones included: oasr's greedy search over its own float64
    features against NeMo's greedy decoding over NeMo's."""
    kind, path, ref = case
    lm = load_pretrained(path)
    model = lm.model.double()
    frontend = ParakeetFrontend.from_spec(lm.feature_spec, dtype=torch.float64)
    heads = {"ctc": ("ctc",), "rnnt": ("transducer",), "tdt": ("transducer",)}.get(kind, ("transducer", "ctc"))
    emitted = 0
    for wave in _inputs(waveforms):
        want_feats, n = _nemo_features(ref, wave)
        want_enc, want_len = ref.encoder(audio_signal=want_feats.transpose(1, 2), length=n)
        feats, lens = frontend.features(torch.from_numpy(wave)[None], torch.tensor([len(wave)]))
        for head in heads:
            want_tokens, want_text = _nemo_greedy(ref, kind, want_enc, want_len, head)
            if head == "ctc":
                _, best, out_len = model.forward_offline_best_path(feats, lens)
                tokens = ctc_collapse(best[0, : int(out_len[0])], model.blank_id)
            else:
                tokens = list(model.greedy_decode(feats, lens).tokens[0])
            assert tokens == want_tokens, (kind, head)
            assert lm.tokenizer.decode(tokens) == want_text, (kind, head)
            emitted += len(tokens)
    assert emitted > 10, "the comparison is vacuous without labels"


@torch.no_grad()
def test_float32_features_match_nemos_preprocessor(archives, waveforms):
    """NeMo's preprocessor as it runs (float32) against oasr's float32 front end."""
    path, ref = archives["tdt"]
    lm = load_pretrained(path)
    frontend = ParakeetFrontend.from_spec(lm.feature_spec)
    worst = 0.0
    for wave in _inputs(waveforms):
        x = torch.from_numpy(wave)[None]
        want, n = ref.preprocessor.float()(input_signal=x, length=torch.tensor([x.shape[1]]))
        feats, lens = frontend.features(x, torch.tensor([len(wave)]))
        assert torch.equal(lens, n)
        cos, err = parity(feats, want.transpose(1, 2)[:, : int(n[0])])
        assert cos > 1 - 1e-9, cos
        worst = max(worst, err)
    ref.double()
    assert worst < 5e-3, worst


def _nemo_transcribe(model, waves, decoder: str | None = None):
    if decoder is not None:
        model.change_decoding_strategy(decoder_type=decoder, verbose=False)
    with torch.no_grad():
        out = model.float().transcribe([w.astype(np.float32) for w in waves], batch_size=1, verbose=False)
    model.double()
    out = out[0] if isinstance(out, tuple) else out
    return [(h.text, [int(t) for t in h.y_sequence]) for h in out]


def test_greedy_tokens_and_text_equal_nemo_transcribe(case, waveforms):
    kind, path, ref = case
    waves = _inputs(waveforms, short=False)
    engine = oasr.ASREngine(str(path), dtype="float32")
    outs = engine.transcribe(waves)
    want = _nemo_transcribe(ref, waves, "rnnt" if kind == "hybrid_tdt_ctc" else None)
    emitted = 0
    for out, (text, tokens) in zip(outs, want):
        got = [t for seg in out.segments for t in seg.tokens]
        if kind == "ctc":  # a CTC hypothesis carries the frame-wise labels
            tokens = ctc_collapse(tokens, engine.model.blank_id)
        assert got == tokens, kind
        assert out.text.strip() == text.strip(), kind
        emitted += len(got)
    assert emitted > 10, "the comparison is vacuous without labels"


def test_hybrid_ctc_head_equals_nemo_ctc_decoding(archives, waveforms):
    path, ref = archives["hybrid_tdt_ctc"]
    waves = _inputs(waveforms, short=False)
    engine = oasr.ASREngine(str(path), dtype="float32", decode_type="ctc")
    outs = engine.transcribe(waves)
    want = _nemo_transcribe(ref, waves, "ctc")
    ref.change_decoding_strategy(decoder_type="rnnt", verbose=False)
    assert [o.text.strip() for o in outs] == [t.strip() for t, _ in want]
    assert sum(len(t) for t, _ in want) > 10


def test_unpacked_directory_and_gzip_archive_load_the_same(archives, tmp_path):
    path, _ = archives["tdt"]
    unpacked = tmp_path / "unpacked"
    with tarfile.open(path) as tar:
        tar.extractall(unpacked, filter="data")
    gz = tmp_path / "tdt_gz.nemo"
    with tarfile.open(gz, "w:gz") as out, tarfile.open(path) as tar:
        for info in tar.getmembers():
            out.addfile(info, tar.extractfile(info) if info.isfile() else None)
    base = load_pretrained(path)
    for other in (unpacked, gz):
        lm = load_pretrained(other)
        assert lm.architecture == base.architecture == "parakeet_transducer"
        assert lm.format == "nemo"
        for (k, a), (_, b) in zip(base.model.state_dict().items(), lm.model.state_dict().items()):
            assert torch.equal(a, b), k


def _repack(src: Path, dst: Path, edit) -> Path:
    """``src`` with its model_config.yaml changed by ``edit(config)``, written as a .nemo at ``dst``."""
    import yaml

    with tarfile.open(src) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    name = next(n for n in members if n.endswith("model_config.yaml"))
    cfg = yaml.safe_load(members[name])
    edit(cfg)
    members[name] = yaml.safe_dump(cfg).encode()
    return _archive(dst, members)


@torch.no_grad()
def test_the_archives_decoding_defaults_are_nemos(archives, waveforms, tmp_path):
    """``decoding.greedy.max_symbols`` from the archive bounds labels per frame as in NeMo (the
    random RNN-T emits at the bound on every frame), and ``preprocessor.pad_to`` is accepted (NeMo
    masks past each row's length, so the padding changes nothing)."""
    path, ref10 = archives["rnnt"]

    def edit(cfg):
        cfg["decoding"]["greedy"]["max_symbols"] = 2
        cfg["preprocessor"]["pad_to"] = 16

    edited = _repack(path, tmp_path / "rnnt_max2.nemo", edit)
    from tests.models.parakeet import nemo_reference

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = nemo_reference.model_class("rnnt").restore_from(str(edited), map_location="cpu")
    ref = _exact_filters(ref.double().eval())
    lm = load_pretrained(edited)
    assert lm.decoding_spec.params["max_symbols_per_step"] == 2
    model = lm.model.double()
    changed = False
    for wave in _inputs(waveforms):
        feats, n = _nemo_features(ref, wave)
        enc, enc_len = ref.encoder(audio_signal=feats.transpose(1, 2), length=n)
        want, _ = _nemo_greedy(ref, "rnnt", enc, enc_len, "transducer")
        assert list(model.greedy_decode(feats, n).tokens[0]) == want
        was, _ = _nemo_greedy(ref10, "rnnt", enc, enc_len, "transducer")
        changed |= was != want
    assert changed, "max_symbols=2 should change the labels of this fixture"
    engine = oasr.ASREngine(str(edited), dtype="float32")
    wave = _inputs(waveforms, short=False)[0]
    ((text, tokens),) = _nemo_transcribe(ref, [wave])
    out = engine.transcribe(wave)
    assert [t for seg in out.segments for t in seg.tokens] == tokens and out.text.strip() == text.strip()


@torch.no_grad()
def test_a_joint_without_dropout_loads_its_head(tmp_path, waveforms):
    """``jointnet.dropout: 0`` leaves the Dropout out of NeMo's joint network: its output layer is
    ``joint_net.1``, not ``joint_net.2``; the joint still equals NeMo's."""
    _nemo()
    from tests.models.parakeet import nemo_reference

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path, ref = nemo_reference.build("rnnt", tmp_path, joint_dropout=0.0)
    ref = _exact_filters(ref.double().eval())
    assert "joint.joint_net.1.weight" in ref.state_dict()
    model = load_pretrained(path).model.double()
    feats, n = _nemo_features(ref, _inputs(waveforms)[0])
    enc, _ = ref.encoder(audio_signal=feats.transpose(1, 2), length=n)
    g, _ = ref.decoder.predict(None, state=None, add_sos=False, batch_size=1)
    want = ref.joint.joint(enc.transpose(1, 2), g)[:, :, 0]
    got = model.joiner(enc.transpose(1, 2), model.predictor.predict(model.predictor.init_state(1))[:, None])
    cos, err = parity(got.log_softmax(dim=-1), want)
    assert cos > 1 - 1e-12 and err < 1e-6, (cos, err)


def test_cli_transcribe_model_nemo_prints_nemos_text(archives, manifest, tmp_path):
    path, ref = archives["ctc"]
    clip = next(row["path"] for row in manifest if row["audio"] == "speechbrain_spk1_snt1.wav")
    from oasr.audio import load_audio

    ((want, _),) = _nemo_transcribe(ref, [load_audio(clip)])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path.cwd()), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-m", "oasr.cli.main", "transcribe", "--model", str(path), str(clip)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert want.strip() and want.strip() in proc.stdout


# -- refusals (no NeMo needed: the archives are written here) -------------------------------------


def _archive(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_member_outside_the_archive_root_is_refused(tmp_path):
    evil = _archive(
        tmp_path / "evil.nemo",
        {"./model_config.yaml": b"target: x\n", "./model_weights.ckpt": b"", "../../escape.txt": b"pwned"},
    )
    with pytest.raises(LoadError, match="outside the archive"):
        load_pretrained(evil)
    assert not (tmp_path.parent / "escape.txt").exists()
    linked = tmp_path / "linked.nemo"
    with tarfile.open(linked, "w") as tar:
        info = tarfile.TarInfo("./model_config.yaml")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(LoadError, match="is a link"):
        load_pretrained(linked)


def test_a_damaged_archive_is_named(tmp_path):
    bad = tmp_path / "bad.nemo"
    bad.write_bytes(b"not a tar at all" * 100)
    with pytest.raises(LoadError, match=r"bad\.nemo: not a readable \.nemo archive"):
        load_pretrained(bad)
    half = _archive(tmp_path / "half.nemo", {"./model_config.yaml": b"target: x\n"})
    with pytest.raises(LoadError, match="no model_weights.ckpt in the archive"):
        load_pretrained(half)


def test_an_unimplemented_config_value_is_refused_by_key_and_value(archives, tmp_path):
    import yaml

    path, _ = archives["rnnt"]
    unpacked = tmp_path / "unpacked"
    with tarfile.open(path) as tar:
        tar.extractall(unpacked, filter="data")
    cfg = yaml.safe_load((unpacked / "model_config.yaml").read_text())
    cfg["encoder"]["self_attention_model"] = "rel_pos_local_attn"
    (unpacked / "model_config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(LoadError, match=r"encoder\.self_attention_model='rel_pos_local_attn'"):
        load_pretrained(unpacked)
    cfg["encoder"]["self_attention_model"] = "rel_pos"
    cfg["preprocessor"]["window"] = "hamming"
    (unpacked / "model_config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(LoadError, match=r"preprocessor\.window='hamming'"):
        load_pretrained(unpacked)
    cfg["preprocessor"]["window"] = "hann"
    cfg["decoding"]["strategy"] = "tsd"
    (unpacked / "model_config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(LoadError, match=r"decoding\.strategy='tsd'"):
        load_pretrained(unpacked)
