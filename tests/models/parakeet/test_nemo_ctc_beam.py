"""NeMo's CTC ``beam_batch`` search and phrase boosting (GPU-PB), held to NeMo 3.0.0 itself.

The tiny CTC and hybrid TDT + CTC fixtures (``nemo_reference``, saved by NeMo's ``save_to``) give
log-probabilities of random inputs of different lengths in one batch; NeMo's own ``CTCBPEDecoding``
(``beam_batch`` / ``greedy_batch``, with a boosting tree from ``key_phrases_list``) and oasr's
searches decode the same tensor, and must agree token for token. Then through the engine: an
archive whose ``decoding`` says ``beam_batch`` decodes as NeMo's restored model does, with and
without hotwords, and what oasr does not implement is refused by key and value. Skipped where
``nemo-toolkit`` is not installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import tarfile
import warnings

import numpy as np
import pytest
import torch

import oasr
from oasr.engine.decode.boosting import BoostingConfig, BoostingTree
from oasr.engine.decode.ctc.batched_beam import BeamSettings, ctc_batched_beam_search, ctc_greedy_fused_search
from oasr.models.base import LoadError
from oasr.models.loaders import load_pretrained
from tests.models.parakeet.conftest import ctc_collapse

KINDS = ("ctc", "hybrid_tdt_ctc")
PHRASES = ["country", "sea shells", "the lazy dog"]
ALPHA = 3.0  # boosting_tree_alpha: strong enough to move the random fixtures' greedy and beam tokens


def _nemo():
    return pytest.importorskip(
        "nemo.collections.asr", reason="nemo-toolkit is not installed (the reference of the NeMo CTC beam tests)"
    )


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    """kind -> (.nemo path, NeMo model in float32, eval), built once for the module."""
    _nemo()
    from tests.models.parakeet import nemo_reference

    root = tmp_path_factory.mktemp("nemo_ctc_beam")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {kind: nemo_reference.build(kind, root) for kind in KINDS}


def _inputs(waveforms) -> list[np.ndarray]:
    """Two real clips and random signals: different lengths, one batch."""
    g = np.random.default_rng(1)
    noise = [(0.1 * g.standard_normal(n)).astype(np.float32) for n in (6000, 17000, 30000)]
    return [w for w in waveforms if len(w) < 16000 * 6][:2] + noise


@torch.no_grad()
def _nemo_log_probs(model, kind: str, waves) -> tuple[torch.Tensor, torch.Tensor]:
    """NeMo's CTC log-probs (B, T, V) float32 of a padded batch, and each row's frames."""
    n = torch.tensor([len(w) for w in waves])
    x = torch.zeros(len(waves), int(n.max()))
    for i, w in enumerate(waves):
        x[i, : len(w)] = torch.from_numpy(w)
    if kind == "ctc":
        log_probs, lens, _ = model.forward(input_signal=x, input_signal_length=n)
    else:
        enc, lens = model.forward(input_signal=x, input_signal_length=n)
        log_probs = model.ctc_decoder(encoder_output=enc)
    return log_probs.float(), lens


def _nemo_decoding(model, strategy: str, beam_size: int = 1, beam_beta: float = 0.0, phrases=None):
    """NeMo's ``CTCBPEDecoding`` for ``strategy``, boosting ``phrases`` when given."""
    from nemo.collections.asr.parts.submodules.ctc_decoding import CTCBPEDecoding, CTCBPEDecodingConfig
    from omegaconf import OmegaConf

    boost = {"key_phrases_list": phrases, "use_triton": False} if phrases else {}
    search = {"allow_cuda_graphs": False, "boosting_tree": boost, "boosting_tree_alpha": ALPHA if phrases else 0.0}
    cfg = {"strategy": strategy, "greedy": dict(search)}
    cfg["beam"] = {**search, "beam_size": beam_size, "beam_beta": beam_beta, "beam_threshold": 20.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = OmegaConf.merge(OmegaConf.structured(CTCBPEDecodingConfig), cfg)
        return CTCBPEDecoding(cfg, tokenizer=model.tokenizer)


def _nemo_tokens(decoding, log_probs, lens, greedy: bool) -> list[list[int]]:
    with torch.inference_mode():
        hyps = decoding.ctc_decoder_predictions_tensor(log_probs, lens, return_hypotheses=True)
    seqs = [[int(t) for t in h.y_sequence] for h in hyps]
    blank = log_probs.shape[-1] - 1
    return [ctc_collapse(s, blank) if greedy else s for s in seqs]  # greedy hypotheses are frame-wise


def _blank_padded(log_probs: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """``log_probs`` with every frame past a row's length certain blank: NeMo's batch then carries a
    row's hypotheses through its padding unchanged (see ``oasr.engine.decode.ctc.batched_beam``)."""
    out = log_probs.clone()
    pad = torch.arange(out.shape[1])[None, :] >= lens[:, None]
    out[pad] = float("-inf")
    out[..., -1][pad] = 0.0
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_beam_batch_tokens_equal_nemos_for_beams_2_4_8(fixtures, waveforms, kind):
    path, model = fixtures[kind]
    log_probs, lens = _nemo_log_probs(model, kind, _inputs(waveforms))
    assert len(set(lens.tolist())) == len(lens), "rows of different lengths"
    blank = log_probs.shape[-1] - 1
    padded = _blank_padded(log_probs, lens)
    emitted = 0
    for beam in (2, 4, 8):
        for beta in (0.0, 1.0):
            got = ctc_batched_beam_search(log_probs, lens, blank, BeamSettings(beam, beta, 20.0))
            tokens = [list(rows[0].tokens) for rows in got]
            nemo = _nemo_decoding(model, "beam_batch", beam, beta)
            alone = [
                _nemo_tokens(nemo, log_probs[i : i + 1, :n], lens[i : i + 1], False)[0] for i, n in enumerate(lens)
            ]
            assert tokens == alone, (kind, beam, beta)
            assert tokens == _nemo_tokens(nemo, padded, lens, False), (kind, beam, beta)
            emitted += sum(map(len, tokens))
    assert emitted > 20, "the comparison is vacuous without labels"


@pytest.mark.parametrize("kind", KINDS)
def test_boosted_beam_and_greedy_equal_nemos_boosting_tree(fixtures, waveforms, kind):
    """The boosting tree of the same phrase list (tokenized by oasr's tokenizer, NeMo's by its own),
    fused with the same alpha into beam_batch (beam 4) and greedy_batch; boosting changes tokens."""
    path, model = fixtures[kind]
    log_probs, lens = _nemo_log_probs(model, kind, _inputs(waveforms))
    blank = log_probs.shape[-1] - 1
    tree = BoostingTree.from_phrases(PHRASES, load_pretrained(path).tokenizer.encode_text, blank, BoostingConfig())
    settings = BeamSettings(4, 0.0, 20.0)
    beam = [list(r[0].tokens) for r in ctc_batched_beam_search(log_probs, lens, blank, settings, tree, ALPHA)]
    nemo = _nemo_decoding(model, "beam_batch", 4, 0.0, PHRASES)
    assert beam == _nemo_tokens(nemo, _blank_padded(log_probs, lens), lens, False)
    plain = [list(r[0].tokens) for r in ctc_batched_beam_search(log_probs, lens, blank, settings)]
    assert beam != plain, "boosting should change the beam's tokens of these inputs"
    greedy = [list(h.tokens) for h in ctc_greedy_fused_search(log_probs, lens, blank, tree, ALPHA)]
    assert greedy == _nemo_tokens(_nemo_decoding(model, "greedy_batch", phrases=PHRASES), log_probs, lens, True)
    unboosted = [ctc_collapse(row[:n].argmax(-1), blank) for row, n in zip(log_probs, lens)]
    assert greedy != unboosted, "boosting should change the greedy tokens of these inputs"


def _with_decoding(src, dst, kind: str, decoding: dict):
    """The archive ``src`` with its CTC ``decoding`` section replaced, written at ``dst``."""
    from tests.models.parakeet.test_nemo_archive import _repack

    def edit(cfg):
        (cfg["aux_ctc"] if kind == "hybrid_tdt_ctc" else cfg)["decoding"] = decoding

    return _repack(src, dst, edit)


def _transcribe_nemo(model, kind, waves):
    if kind == "hybrid_tdt_ctc":
        model.change_decoding_strategy(decoder_type="ctc", verbose=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.transcribe([w.astype(np.float32) for w in waves], batch_size=1, verbose=False)
    out = out[0] if isinstance(out, tuple) else out
    return [[int(t) for t in h.y_sequence] for h in out]


@pytest.mark.parametrize("kind", KINDS)
def test_the_archives_beam_batch_is_the_engines_default_and_equals_nemo(fixtures, waveforms, kind, tmp_path):
    """``strategy: beam_batch`` with its ``beam`` section: ``ASREngine`` decodes with it when no
    option is given, as NeMo's restored model transcribes; with hotwords as NeMo boosts them."""
    from tests.models.parakeet import nemo_reference

    path, _ = fixtures[kind]
    beam = {"beam_size": 3, "beam_beta": 0.5, "beam_threshold": 15.0, "beam_alpha": None, "kenlm_path": None}
    edited = _with_decoding(path, tmp_path / f"{kind}_beam.nemo", kind, {"strategy": "beam_batch", "beam": beam})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = nemo_reference.model_class(kind).restore_from(str(edited), map_location="cpu").eval()
    waves = [w for w in _inputs(waveforms) if len(w) >= 16000]  # transcribe() pads shorter audio
    engine = oasr.ASREngine(str(edited), dtype="float32", **({"decode_type": "ctc"} if kind != "ctc" else {}))
    want = _transcribe_nemo(ref, kind, waves)
    got = [[t for s in o.segments for t in s.tokens] for o in engine.transcribe(waves)]
    assert got == want and sum(map(len, want)) > 5
    greedy = [[t for s in o.segments for t in s.tokens] for o in engine.transcribe(waves, beam_size=1)]
    assert greedy != got, "the archive's beam should decode these inputs otherwise than greedy"
    # the same search with hotwords, as NeMo's boosting tree of the same phrases
    from omegaconf import OmegaConf

    cfg = {"strategy": "beam_batch", "beam": {**beam, "boosting_tree_alpha": ALPHA}}
    cfg["beam"]["boosting_tree"] = {"key_phrases_list": PHRASES, "use_triton": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.change_decoding_strategy(OmegaConf.create(cfg), **({"decoder_type": "ctc"} if kind != "ctc" else {}))
    want = _transcribe_nemo(ref, "ctc", waves)
    outs = engine.transcribe(waves, hotwords=", ".join(PHRASES), hotword_weight=ALPHA)
    assert [[t for s in o.segments for t in s.tokens] for o in outs] == want


def test_a_ctc_decoding_oasr_does_not_implement_is_refused_by_key_and_value(fixtures, tmp_path):
    import yaml

    path, _ = fixtures["ctc"]
    unpacked = tmp_path / "unpacked"
    with tarfile.open(path) as tar:
        tar.extractall(unpacked, filter="data")
    config = unpacked / "model_config.yaml"
    cfg = yaml.safe_load(config.read_text())
    cases = [
        ({"strategy": "beam"}, r"decoding\.strategy='beam' .*KenLM"),
        ({"strategy": "pyctcdecode"}, r"decoding\.strategy='pyctcdecode'"),
        (
            {"strategy": "beam_batch", "beam": {"ngram_lm_model": "lm.nemo"}},
            r"decoding\.beam\.ngram_lm_model='lm\.nemo'",
        ),
        (
            {"strategy": "greedy_batch", "greedy": {"boosting_tree": {"key_phrases_file": "p.txt"}}},
            r"decoding\.greedy\.boosting_tree\.key_phrases_file='p\.txt'",
        ),
        ({"strategy": "beam_batch", "beam": {"return_best_hypothesis": False}}, r"return_best_hypothesis=False"),
        ({"strategy": "greedy", "temperature": 0.5}, r"decoding\.temperature=0\.5"),
        ({"strategy": "beam_batch", "beam": {"beam_size": 0}}, r"decoding\.beam\.beam_size=0"),
    ]
    for decoding, message in cases:
        cfg["decoding"] = decoding
        config.write_text(yaml.safe_dump(cfg))
        with pytest.raises(LoadError, match=message):
            load_pretrained(unpacked)
    cfg["decoding"] = {"strategy": "beam_batch", "beam": {"beam_size": 2}}
    config.write_text(yaml.safe_dump(cfg))
    assert load_pretrained(unpacked).decoding_spec.params["ctc_decoding"]["beam_size"] == 2
    with pytest.raises(ValueError, match="lm_path: .*NGPU-LM"):
        oasr.ASREngine(str(unpacked), lm_path=str(tmp_path / "lm.arpa"))


def test_the_archives_beam_batch_is_the_default_through_cli_and_http(fixtures, waveforms, audio_dir, tmp_path, capsys):
    """No surface has decoding defaults of its own: ``oasr transcribe`` and the server decode a
    ``beam_batch`` archive with its beam, as ``ASREngine`` does (held to NeMo above)."""
    import json

    pytest.importorskip("fastapi")
    from starlette.testclient import TestClient

    from oasr.cli.main import main
    from oasr.server.app import create_app
    from oasr.server.settings import ServerSettings

    path, _ = fixtures["ctc"]
    beam = {"beam_size": 3, "beam_beta": 0.5, "beam_threshold": 15.0}
    edited = _with_decoding(path, tmp_path / "ctc_beam.nemo", "ctc", {"strategy": "beam_batch", "beam": beam})
    clip = audio_dir / "sense_and_sensibility_01_austen_64kb-0890.wav"
    engine = oasr.ASREngine(str(edited), dtype="float32")
    want = [t for s in engine.transcribe(str(clip)).segments for t in s.tokens]
    greedy = [t for s in engine.transcribe(str(clip), beam_size=1).segments for t in s.tokens]
    assert want != greedy, "the archive's beam should decode this clip otherwise than greedy"
    capsys.readouterr()
    assert main(["transcribe", str(clip), "--model", str(edited), "-f", "verbose_json", "--no-progress"]) == 0
    assert [t for s in json.loads(capsys.readouterr().out)["segments"] for t in s["tokens"]] == want
    with TestClient(create_app(ServerSettings(model=str(edited)))) as http:
        r = http.post(
            "/v1/audio/transcriptions",
            files={"file": (clip.name, clip.read_bytes())},
            data={"model": str(edited), "response_format": "verbose_json"},
        )
    assert r.status_code == 200, r.text
    assert [t for s in r.json()["segments"] for t in s["tokens"]] == want
