"""NeMo's transducer beam searches, held token for token to NeMo's own decoding classes.

The tiny RNN-T, TDT and hybrid TDT + CTC archives of ``nemo_reference`` (NeMo's classes, NeMo's
``save_to``) are loaded through oasr's loader; NeMo's decoding (``change_decoding_strategy`` with
the strategy and its ``beam`` section, then the decoding object ``transcribe()`` runs) and oasr's
``transducer_search`` search the same encoder output in float64: a batch of rows of different
lengths (NeMo's encoder over noise, and random frames that drive many labels per frame, so that
the labels-per-frame bound forces blanks). Then the archive's ``decoding`` section as the
default through ``ASREngine`` against NeMo's ``transcribe()``. Skipped where ``nemo-toolkit`` is
not installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

KINDS = ("rnnt", "tdt", "hybrid_tdt_ctc")
SEEDS = {"rnnt": 0, "tdt": 0, "hybrid_tdt_ctc": 1}  # the hybrid's transducer other than the TDT's


def _nemo():
    return pytest.importorskip(
        "nemo.collections.asr", reason="nemo-toolkit is not installed (the reference of the beam parity tests)"
    )


@pytest.fixture(scope="module")
def transducers(tmp_path_factory):
    """kind -> (.nemo path, NeMo model in float64, eval, oasr's model in float64)."""
    _nemo()
    import logging

    from oasr.models.loaders import load_pretrained
    from tests.models.parakeet import nemo_reference

    logging.getLogger("nemo_logger").setLevel(logging.ERROR)
    root = tmp_path_factory.mktemp("nemo_beam")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in KINDS:
            path, ref = nemo_reference.build(kind, root, seed=SEEDS[kind])
            out[kind] = (path, ref.double().eval(), load_pretrained(path).model.double())
    return out


def _encoder_batch(ref, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """NeMo's encoder over noise clips of different lengths in one batch: (B, D, T), (B,)."""
    g = np.random.default_rng(seed)
    waves = [0.1 * g.standard_normal(n) for n in (7000, 21000, 36000, 12500)]
    x = torch.zeros(len(waves), max(len(w) for w in waves), dtype=torch.float64)
    for i, w in enumerate(waves):
        x[i, : len(w)] = torch.from_numpy(w)
    with torch.no_grad():
        feats, n = ref.preprocessor(input_signal=x, length=torch.tensor([len(w) for w in waves]))
        return ref.encoder(audio_signal=feats, length=n)


def _random_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random encoder frames (B, D, T): many labels per frame, the labels-per-frame bound reached."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 32, 30, generator=g, dtype=torch.float64), torch.tensor([30, 9, 22, 1])


def nemo_search(ref, kind: str, strategy: str, enc, lens, **beam) -> list[list[int]]:
    """NeMo's decoding of ``strategy`` with the ``beam`` section ``beam`` over encoder output (B, D, T)."""
    from omegaconf import open_dict

    cfg = copy.deepcopy(ref.cfg.decoding)
    with open_dict(cfg):
        cfg.strategy = strategy
        cfg.beam = beam
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "hybrid_tdt_ctc":
            ref.change_decoding_strategy(cfg, decoder_type="rnnt", verbose=False)
        else:
            ref.change_decoding_strategy(cfg, verbose=False)
        with torch.no_grad():
            hyps = ref.decoding.rnnt_decoder_predictions_tensor(
                encoder_output=enc, encoded_lengths=lens, return_hypotheses=True
            )
    return [[int(t) for t in h.y_sequence] for h in hyps]


def oasr_search(model, search: str, enc, lens, beam_size: int, **params) -> list[list[int]]:
    res = model.transducer_search(
        enc.transpose(1, 2),
        lens,
        search=search,
        beam_size=beam_size,
        max_sym_per_frame=None,
        blank_penalty=0.0,
        params=params,
    )
    return [list(t) for t in res.tokens]


@pytest.mark.parametrize("kind", KINDS)
def test_malsd_tokens_equal_nemos_malsd_batch(transducers, kind):
    _, ref, model = transducers[kind]
    emitted = 0
    for enc, lens in (_encoder_batch(ref, 0), _random_batch(1)):
        for beam in (2, 4):
            want = nemo_search(ref, kind, "malsd_batch", enc, lens, beam_size=beam)
            assert oasr_search(model, "malsd", enc, lens, beam) == want, (kind, beam)
            emitted += sum(map(len, want))
    # NeMo's other switches: no length normalisation, a tighter labels-per-frame bound.
    enc, lens = _random_batch(2)
    want = nemo_search(ref, kind, "malsd_batch", enc, lens, beam_size=3, score_norm=False, max_symbols=2)
    assert oasr_search(model, "malsd", enc, lens, 3, score_norm=False, max_symbols=2) == want, kind
    assert emitted > 40, "the comparison is vacuous without labels"


# -- the archive's decoding as the default, and the option that picks another ---------------------


def _noise(seconds: tuple[float, ...], seed: int = 3) -> list[np.ndarray]:
    """Clips of a second or more (NeMo's ``transcribe()`` pads shorter audio with silence)."""
    g = np.random.default_rng(seed)
    return [(0.1 * g.standard_normal(int(16000 * s))).astype(np.float32) for s in seconds]


def _nemo_transcribe(ref, kind: str, waves, strategy: str, **beam) -> list[list[int]]:
    from omegaconf import open_dict

    cfg = copy.deepcopy(ref.cfg.decoding)
    with open_dict(cfg):
        cfg.strategy = strategy
        cfg.beam = beam
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.change_decoding_strategy(cfg, verbose=False, **({"decoder_type": "rnnt"} if kind != "tdt" else {}))
        with torch.no_grad():
            out = ref.float().transcribe(list(waves), batch_size=len(waves), verbose=False)
    ref.double()
    out = out[0] if isinstance(out, tuple) else out
    return [[int(t) for t in h.y_sequence] for h in out]


@pytest.fixture(scope="module")
def malsd_archive(transducers, tmp_path_factory):
    """The TDT archive with ``decoding.strategy: malsd_batch`` and ``beam.beam_size: 2``."""
    from tests.models.parakeet.test_nemo_archive import _repack

    path, _, _ = transducers["tdt"]

    def edit(cfg):
        cfg["decoding"]["strategy"] = "malsd_batch"
        cfg["decoding"]["beam"] = {"beam_size": 2, "score_norm": True, "return_best_hypothesis": False}

    return _repack(path, tmp_path_factory.mktemp("malsd") / "tdt_malsd.nemo", edit)


def _tokens(out) -> list[int]:
    return [t for seg in out.segments for t in seg.tokens]


def test_the_archives_beam_decoding_is_the_engines_default(transducers, malsd_archive):
    import oasr

    _, ref, _ = transducers["tdt"]
    engine = oasr.ASREngine(str(malsd_archive), dtype="float32")
    opts = engine.make_options()
    assert (opts.search, opts.beam_size) == ("malsd", 2)
    waves = _noise((1.2, 2.6, 1.9))
    want = _nemo_transcribe(ref, "tdt", waves, "malsd_batch", beam_size=2)
    got = [_tokens(o) for o in engine.transcribe(waves)]
    assert got == want and sum(map(len, want)) > 5
    # Another search by option: greedy as NeMo's greedy_batch, a wider malsd as NeMo's.
    assert [_tokens(o) for o in engine.transcribe(waves, search="greedy")] == _nemo_transcribe(
        ref, "tdt", waves, "greedy_batch"
    )
    assert [_tokens(o) for o in engine.transcribe(waves, beam_size=4)] == _nemo_transcribe(
        ref, "tdt", waves, "malsd_batch", beam_size=4
    )
    for search in ("maes", "beam"):  # NeMo's strategies of the same names
        got = [_tokens(o) for o in engine.transcribe(waves, search=search, beam_size=2)]
        assert got == _nemo_transcribe(ref, "tdt", waves, search, beam_size=2), search


def test_search_options_are_checked(transducers, malsd_archive):
    import oasr

    engine = oasr.ASREngine(str(transducers["rnnt"][0]), dtype="float32")  # greedy_batch archive
    assert (engine.make_options().search, engine.make_options().beam_size) == ("greedy", 1)
    assert (engine.make_options(beam_size=3).search, engine.make_options(search="malsd").beam_size) == ("malsd", 4)
    with pytest.raises(ValueError, match=r"search must be one of .*'malsd'.*got 'alsd'"):
        engine.make_options(search="alsd")
    with pytest.raises(ValueError, match=r"search='modified_beam': .* runs the searches \['greedy', 'malsd'"):
        engine.make_options(search="modified_beam")
    with pytest.raises(ValueError, match=r"beam_size=2 with search='greedy'"):
        engine.make_options(search="greedy", beam_size=2)
    with pytest.raises(ValueError, match=r"hotwords: phrase boosting .* not for search='malsd'"):
        engine.make_options(beam_size=2, hotwords="hello")
    beam_default = oasr.ASREngine(str(malsd_archive), dtype="float32")
    assert beam_default.make_options(beam_size=1).search == "greedy"


def test_cli_search_option_reaches_the_search(transducers, monkeypatch, capsys):
    import oasr.models.nemotron.search as nemo_search_module
    from oasr.cli.main import main

    path = transducers["tdt"][0]
    calls = []
    real = nemo_search_module.malsd_search

    def spy(*args, **kwargs):
        calls.append(kwargs["beam_size"])
        return real(*args, **kwargs)

    monkeypatch.setattr(nemo_search_module, "malsd_search", spy)
    import soundfile as sf

    clip = transducers["tdt"][0].parent / "noise.wav"
    sf.write(clip, _noise((2.0,))[0], 16000)
    assert main(["transcribe", str(clip), "--model", str(path), "--search", "malsd", "--beam-size", "3"]) == 0
    assert calls == [3]
    ((want,),) = [_nemo_transcribe(transducers["tdt"][1], "tdt", [_noise((2.0,))[0]], "malsd_batch", beam_size=3)]
    from oasr.models.loaders import load_pretrained

    text = load_pretrained(path).tokenizer.decode(want)
    assert capsys.readouterr().out.strip() == text.strip()


def test_http_decodes_with_the_archives_beam_search(transducers, malsd_archive, tmp_path):
    """``oasr serve`` on the malsd archive answers NeMo's malsd_batch transcript (no option sent)."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    import io

    import soundfile as sf

    from tests.server.conftest import ServerProcess

    wave = _noise((2.4,), seed=5)[0]
    (want,) = _nemo_transcribe(transducers["tdt"][1], "tdt", [wave], "malsd_batch", beam_size=2)
    assert want != _nemo_transcribe(transducers["tdt"][1], "tdt", [wave], "greedy_batch")[0], "beam = greedy here"
    buf = io.BytesIO()
    sf.write(buf, wave, 16000, format="WAV")
    server = ServerProcess(["--model", str(malsd_archive), "--served-model-name", "tdt"], tmp_path / "serve.log")
    try:
        r = server.post_audio(files={"file": ("noise.wav", buf.getvalue())}, data={"model": "tdt"})
    finally:
        server.stop()
    assert r.status_code == 200, r.text
    from oasr.models.loaders import load_pretrained

    assert r.json()["text"].strip() == load_pretrained(malsd_archive).tokenizer.decode(want).strip()


@pytest.mark.parametrize(
    ("decoding", "message"),
    [
        ({"strategy": "tsd"}, r"decoding\.strategy='tsd' is not implemented by oasr \(supported: \['greedy'"),
        (
            {"strategy": "malsd_batch", "beam": {"beam_size": 2, "ngram_lm_model": "lm.arpa"}},
            r"decoding\.beam\.ngram_lm_model='lm\.arpa' is not implemented by oasr",
        ),
        (
            {"strategy": "malsd_batch", "beam": {"boosting_tree": {"key_phrases_list": ["hello"]}}},
            r"decoding\.beam\.boosting_tree\.key_phrases_list=\['hello'\] is not implemented by oasr",
        ),
        ({"strategy": "malsd_batch", "beam": {"beam_size": 0}}, r"decoding\.beam\.beam_size=0 is not implemented"),
    ],
)
def test_a_decoding_oasr_lacks_is_refused_by_key_and_value(transducers, tmp_path, decoding, message):
    from oasr.models.base import LoadError
    from oasr.models.loaders import load_pretrained
    from tests.models.parakeet.test_nemo_archive import _repack

    edited = _repack(transducers["rnnt"][0], tmp_path / "edited.nemo", lambda cfg: cfg["decoding"].update(decoding))
    with pytest.raises(LoadError, match=message):
        load_pretrained(edited)


@pytest.mark.parametrize("kind", KINDS)
def test_default_beam_tokens_equal_nemos_beam(transducers, kind):
    _, ref, model = transducers[kind]
    emitted = 0
    for enc, lens in (_encoder_batch(ref, 0), _random_batch(1)):
        for beam in (2, 4):
            want = nemo_search(ref, kind, "beam", enc, lens, beam_size=beam)
            assert oasr_search(model, "beam", enc, lens, beam) == want, (kind, beam)
            emitted += sum(map(len, want))
    enc, lens = _encoder_batch(ref, 4)
    want = nemo_search(ref, kind, "beam", enc, lens, beam_size=3, score_norm=False)
    assert oasr_search(model, "beam", enc, lens, 3, score_norm=False) == want, kind
    assert emitted > 10, "the comparison is vacuous without labels"


@pytest.mark.parametrize("kind", KINDS)
def test_maes_tokens_equal_nemos_maes(transducers, kind):
    _, ref, model = transducers[kind]
    emitted = 0
    for enc, lens in (_encoder_batch(ref, 0), _random_batch(1)):
        for beam in (2, 4):
            want = nemo_search(ref, kind, "maes", enc, lens, beam_size=beam)
            assert oasr_search(model, "maes", enc, lens, beam) == want, (kind, beam)
            emitted += sum(map(len, want))
    # NeMo's maes_* switches, read as the archive names them.
    settings = dict(maes_num_steps=3, maes_prefix_alpha=2, maes_expansion_gamma=3.0, maes_expansion_beta=1)
    enc, lens = _encoder_batch(ref, 4)
    want = nemo_search(ref, kind, "maes", enc, lens, beam_size=2, score_norm=False, **settings)
    assert oasr_search(model, "maes", enc, lens, 2, score_norm=False, **settings) == want, kind
    assert emitted > 10, "the comparison is vacuous without labels"
