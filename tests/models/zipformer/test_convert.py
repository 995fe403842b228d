"""IcefallConverter: the config read off the shapes, the checkpoint layouts it accepts,
``config.json`` overrides, which architecture a directory detects as, clear errors for what it
cannot read, the icefall front end, and ``oasr.ASREngine`` end to end on a real clip."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import oasr
from oasr.models.base import LoadError
from oasr.models.interfaces import CapabilityError
from tests.models.zipformer.conftest import AUDIO, TOKENS, icefall_input, pad, parity


def _copy(reference, tmp_path, name="ckpt"):
    return shutil.copytree(reference.path, tmp_path / name)


def _rewrite(directory, keep):
    """Re-save ``pretrained.pt`` with only the tensors ``keep(name)`` accepts."""
    sd = torch.load(directory / "pretrained.pt", weights_only=True)["model"]
    torch.save({"model": {k: v for k, v in sd.items() if keep(k)}}, directory / "pretrained.pt")
    return directory


def test_config_is_inferred_from_shapes(reference):
    loaded = oasr.load_pretrained(reference.path)
    enc = loaded.model.config.encoder
    assert enc.downsampling_factor == (1, 2, 4)
    assert enc.encoder_dim == (16, 32, 24) and enc.num_encoder_layers == (1, 2, 1)
    assert enc.num_heads == (2, 4, 2) and enc.query_head_dim == (8, 8, 8)
    assert enc.pos_head_dim == (4, 4, 4) and enc.value_head_dim == (4, 4, 4)
    assert enc.feedforward_dim == (32, 64, 48) and enc.cnn_module_kernel == (5, 7, 3)
    assert enc.pos_dim == 16 and enc.embed_channels == (8, 32, 128) and enc.num_mel_bins == 80
    assert enc.causal is reference.causal
    assert loaded.model.vocab_size == len(TOKENS) and loaded.model.blank_id == 0
    # <blk>, <sos/eos>, <unk> never reach text.
    assert loaded.tokenizer_spec.kind == "table" and loaded.tokenizer_spec.special_ids == (0, 1, 2)
    assert loaded.tokenizer.decode([3, 5, 4]) == "THES A"


def test_bare_state_dict_and_pt_path_load_the_same(reference, features, tmp_path):
    d = _copy(reference, tmp_path)
    sd = torch.load(d / "pretrained.pt", weights_only=True)["model"]
    torch.save(sd, d / "pretrained.pt")  # a bare state dict
    a = oasr.load_pretrained(d).model.double()
    b = oasr.load_pretrained(d / "pretrained.pt").model.double()  # the .pt file itself
    f = features[2]
    with torch.no_grad():
        ha, _ = a.encode_offline(f[None], torch.tensor([f.shape[0]]))
        hb, _ = b.encode_offline(f[None], torch.tensor([f.shape[0]]))
        fi = icefall_input(f, reference.causal)
        hr, _ = reference.model.forward_encoder(fi[None], torch.tensor([fi.shape[0]]))
    assert torch.equal(ha, hb)
    assert parity(ha[0], hr[0])[0] < 1e-9


def test_config_json_overrides_chunking(reference, features, tmp_path):
    if not reference.causal:
        pytest.skip("chunking applies to causal models")
    d = _copy(reference, tmp_path)
    (d / "config.json").write_text(json.dumps({"chunk_size": 8, "left_context_frames": 32}))
    model = oasr.load_pretrained(d).model.double()
    assert (model.config.encoder.chunk_size, model.config.encoder.left_context_chunks) == (8, 4)
    ref = reference.model.encoder
    saved = ref.chunk_size, ref.left_context_frames
    ref.chunk_size, ref.left_context_frames = [8], [32]
    try:
        feats, lens = pad(features[1:])
        with torch.no_grad():
            ours, ours_lens = model.encode_offline(feats, lens)
            for i in range(2):
                fi = icefall_input(features[1 + i], True)
                want, _ = reference.model.forward_encoder(fi[None], torch.tensor([fi.shape[0]]))
                max_abs, cos = parity(ours[i, : int(ours_lens[i])], want[0])
                assert max_abs < 1e-9 and cos >= 0.99999
            default, _ = oasr.load_pretrained(reference.path).model.double().encode_offline(feats, lens)
        assert not torch.allclose(default, ours), "chunk 8 / left 32 should change the output"
    finally:
        ref.chunk_size, ref.left_context_frames = saved
    (d / "config.json").write_text(json.dumps({"encoder_dim": [16, 16, 16]}))
    with pytest.raises(LoadError, match="contradicts"):
        oasr.load_pretrained(d)
    (d / "config.json").write_text(json.dumps({"chunk_sizes": 8}))
    with pytest.raises(LoadError, match="unknown key"):
        oasr.load_pretrained(d)


def test_detection_by_heads(reference, tmp_path):
    from oasr.models.registry import detect_architecture

    hybrid = reference.path
    transducer_only = _rewrite(_copy(reference, tmp_path, "rnnt"), lambda k: not k.startswith("ctc_output."))
    ctc_only = _rewrite(
        _copy(reference, tmp_path, "ctc"), lambda k: not k.startswith(("decoder.", "joiner.", "simple_"))
    )
    assert detect_architecture(hybrid)[0] == "zipformer"
    assert detect_architecture(ctc_only)[0] == "zipformer"
    assert detect_architecture(transducer_only)[0] == "transducer"

    loaded = oasr.load_pretrained(ctc_only)
    assert loaded.model.architecture == "zipformer" and not loaded.report.dropped

    rnnt = oasr.load_pretrained(transducer_only)
    assert rnnt.model.architecture == "transducer" and rnnt.model.ctc_output is None
    assert rnnt.model.capabilities == frozenset({oasr.models.DecodeType.TRANSDUCER})
    with pytest.raises(LoadError, match="transducer-only"):
        oasr.load_pretrained(transducer_only, architecture="zipformer")
    with pytest.raises(NotImplementedError, match="no CTC head"):
        rnnt.model.forward_offline(torch.zeros(1, 20, 80), torch.tensor([20]))
    with pytest.raises(CapabilityError, match="does not serve decode type 'ctc'"):
        oasr.ASREngine(transducer_only, decode_type="ctc")

    both = oasr.load_pretrained(hybrid, architecture="transducer").model
    assert both.capabilities == frozenset({oasr.models.DecodeType.TRANSDUCER, oasr.models.DecodeType.CTC})
    from oasr.models.interfaces import validate_capabilities

    validate_capabilities(both)
    with pytest.raises(LoadError, match="not a transducer checkpoint"):
        oasr.load_pretrained(ctc_only, architecture="transducer")


def test_bad_directories_get_clear_errors(reference, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    torch.save({"model": {"encoder.layers.0.linear.weight": torch.zeros(2, 2)}}, foreign / "pretrained.pt")
    shutil.copy(reference.path / "tokens.txt", foreign)
    with pytest.raises(LoadError, match="not an icefall Zipformer state dict"):
        oasr.load_pretrained(foreign)

    no_tokens = _copy(reference, tmp_path, "no_tokens")
    (no_tokens / "tokens.txt").unlink()
    with pytest.raises(LoadError, match=r"no tokens\.txt or bpe\.model"):
        oasr.load_pretrained(no_tokens)

    truncated = _copy(reference, tmp_path, "truncated")
    data = (truncated / "pretrained.pt").read_bytes()
    (truncated / "pretrained.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(LoadError, match="truncated or corrupt"):
        oasr.load_pretrained(truncated)

    short_table = _copy(reference, tmp_path, "short_table")
    (short_table / "tokens.txt").write_text("".join(f"{t} {i}\n" for i, t in enumerate(TOKENS[:-2])))
    with pytest.raises(LoadError, match="tokens but the model's output has"):
        oasr.load_pretrained(short_table)

    missing = _rewrite(_copy(reference, tmp_path, "missing"), lambda k: "feed_forward3" not in k)
    with pytest.raises(LoadError, match="feed_forward3"):
        oasr.load_pretrained(missing)

    training = _copy(reference, tmp_path, "training")
    sd = torch.load(training / "pretrained.pt", weights_only=True)["model"]
    torch.save({"model": sd, "exp_dir": tmp_path}, training / "epoch-3.pt")  # a Path: not a plain tensor file
    (training / "pretrained.pt").unlink()
    with pytest.raises(LoadError, match="holds Python objects besides tensors"):
        oasr.load_pretrained(training, architecture="zipformer")

    two = _copy(reference, tmp_path, "two")
    shutil.move(two / "pretrained.pt", two / "epoch-1.pt")
    shutil.copy(two / "epoch-1.pt", two / "epoch-2.pt")
    with pytest.raises(LoadError, match="several checkpoints"):
        oasr.load_pretrained(two, architecture="zipformer")


def test_too_short_input_is_refused(reference):
    model = oasr.load_pretrained(reference.path).model
    if reference.causal:  # icefall's 30-frame tail pad makes any length encodable
        assert model.config.encoder.tail_pad_frames == 30
        _, lens = model.forward_offline(torch.zeros(2, 20, 80), torch.tensor([20, 5]))
        assert lens.tolist() == [11, 7]
        return
    with pytest.raises(ValueError, match="at least 9 feature frames"):
        model.forward_offline(torch.zeros(2, 20, 80), torch.tensor([20, 5]))


def test_fbank_snip_edges_false_matches_kaldi(audio_dir):
    kaldi = pytest.importorskip("torchaudio.compliance.kaldi", reason="torchaudio (kaldi compliance) not installed")
    from oasr.audio import load_audio
    from oasr.audio.fbank import kaldi_fbank

    x = torch.from_numpy(load_audio(str(AUDIO / "speechbrain_spk1_snt1.wav")))
    for n in (x.shape[0], 16037, 400, 401):
        ours = kaldi_fbank(x[:n], snip_edges=False, waveform_scale=1.0, high_freq=-400.0)
        want = kaldi.fbank(
            x[None, :n], num_mel_bins=80, snip_edges=False, dither=0.0, energy_floor=0.0, high_freq=-400.0
        )
        assert ours.shape == want.shape == ((n + 80) // 160, 80)
        assert (ours - want).abs().max() < 1e-2  # torchaudio builds its filters in float32
    # Shorter than a window: frames mirror the signal (kaldi reflects repeatedly).
    assert kaldi_fbank(x[:100], snip_edges=False, waveform_scale=1.0).shape == (1, 80)
    assert kaldi_fbank(x[:79], snip_edges=False).shape == (0, 80)


@pytest.fixture(scope="module")
def engine(reference, audio_dir):
    return oasr.ASREngine(reference.path)


def test_engine_transcribes_like_batched_greedy(reference, engine):
    from oasr.audio import load_audio
    from oasr.audio.frontends import build_frontend

    clips = [str(AUDIO / "jfk.wav"), str(AUDIO / "speechbrain_spk1_snt1.wav")]
    outs = engine.transcribe(clips, beam_size=1)
    loaded = oasr.load_pretrained(reference.path)
    frontend = build_frontend(loaded.feature_spec)
    feats, lens = pad([frontend(load_audio(c)) for c in clips])
    with torch.no_grad():
        log_probs, out_lens = loaded.model.forward_offline(feats, lens)
    special = set(loaded.tokenizer_spec.special_ids)
    for i, out in enumerate(outs):
        ids = log_probs[i, : int(out_lens[i])].argmax(-1).unique_consecutive().tolist()
        expected = [t for t in ids if t not in special]
        assert len(expected) >= 3
        assert [t for seg in out.segments for t in seg.tokens] == expected
        assert out.text.strip() == loaded.tokenizer.decode(expected).strip()


def test_engine_prefix_beam_search(reference, engine):
    from oasr.audio import load_audio
    from oasr.audio.frontends import build_frontend
    from oasr.engine.decode.ctc.search import ctc_prefix_beam_search

    clip = str(AUDIO / "jfk.wav")
    out = engine.transcribe(clip, beam_size=4)
    loaded = oasr.load_pretrained(reference.path)
    feats = build_frontend(loaded.feature_spec)(load_audio(clip))
    with torch.no_grad():
        log_probs, lens = loaded.model.forward_offline(feats[None], torch.tensor([feats.shape[0]]))
    special = [i for i in loaded.tokenizer_spec.special_ids if i != 0]
    best = ctc_prefix_beam_search(log_probs[0, : int(lens[0])], 4, 0, special)[0]
    assert [t for seg in out.segments for t in seg.tokens] == list(best.tokens)
    assert len(best.tokens) >= 3


def _train_bpe(path, vocab_size: int) -> None:
    import io

    spm = pytest.importorskip("sentencepiece")
    text = ["the cat sat on the mat", "a bad cab", "the bat ate a date", "set the tea at ten"] * 20
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type="bpe",
        unk_id=2,
        bos_id=-1,
        eos_id=-1,
        user_defined_symbols=["<blk>", "<sos/eos>"],
        minloglevel=2,
    )
    path.write_bytes(buf.getvalue())


def test_bpe_model_instead_of_tokens_txt(reference, tmp_path):
    d = _copy(reference, tmp_path)
    (d / "tokens.txt").unlink()
    _train_bpe(d / "bpe.model", len(TOKENS))
    loaded = oasr.load_pretrained(d)
    assert loaded.tokenizer_spec.kind == "sentencepiece" and loaded.model.blank_id == 0
    assert 0 in loaded.tokenizer_spec.special_ids and 2 in loaded.tokenizer_spec.special_ids
    assert loaded.tokenizer.decode(loaded.tokenizer.encode_text("the cat")) == "the cat"
    _train_bpe(d / "bpe.model", len(TOKENS) - 3)
    with pytest.raises(LoadError, match="pieces but the model's output has"):
        oasr.load_pretrained(d)


def test_legacy_torch_save_format_loads(reference, tmp_path):
    d = _copy(reference, tmp_path)
    sd = torch.load(d / "pretrained.pt", weights_only=True)
    torch.save(sd, d / "pretrained.pt", _use_new_zipfile_serialization=False)  # cannot be memory-mapped
    assert oasr.load_pretrained(d).model.architecture == "zipformer"
