"""Phrase boosting in the greedy RNN-T / TDT search (``oasr.models.nemotron.search.greedy_search``
with a ``BoostingTree``), held to NeMo 3.0.0's ``greedy_batch`` decoding with a boosting tree of the
same phrases, on the tiny NeMo-saved fixtures (``nemo_reference``) and NeMo's own encoder output of
inputs of different lengths in one batch. Skipped where ``nemo-toolkit`` is not installed.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

from oasr.engine.decode.boosting import BoostingTree
from oasr.models.loaders import load_pretrained
from oasr.models.nemotron.search import greedy_search
from tests.models.parakeet.test_nemo_ctc_beam import ALPHA, PHRASES, _inputs, build_fixtures

KINDS = ("rnnt", "tdt")


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    """The RNN-T and TDT fixtures, built once for the module."""
    return build_fixtures(tmp_path_factory, KINDS)


@torch.no_grad()
def _nemo_greedy(model, enc: torch.Tensor, lens: torch.Tensor, phrases) -> list[list[int]]:
    """NeMo's greedy_batch (label looping) over encoder output (B, D, T), boosting ``phrases``."""
    from omegaconf import OmegaConf, open_dict

    cfg = copy.deepcopy(model.cfg.decoding)
    with open_dict(cfg):
        cfg.strategy = "greedy_batch"
        cfg.greedy = OmegaConf.create({"max_symbols": 10, "loop_labels": True, "use_cuda_graph_decoder": False})
        if phrases:
            cfg.greedy.boosting_tree = {"key_phrases_list": list(phrases), "use_triton": False}
            cfg.greedy.boosting_tree_alpha = ALPHA
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.change_decoding_strategy(cfg, verbose=False)
        hyps = model.decoding.rnnt_decoder_predictions_tensor(
            encoder_output=enc, encoded_lengths=lens, return_hypotheses=True
        )
    return [[int(t) for t in h.y_sequence] for h in hyps]


@pytest.mark.parametrize("kind", KINDS)
@torch.no_grad()
def test_boosted_greedy_tokens_equal_nemos_greedy_batch(fixtures, waveforms, kind):
    path, ref = fixtures[kind]
    waves = _inputs(waveforms)
    n = torch.tensor([len(w) for w in waves])
    x = torch.from_numpy(np.stack([np.pad(w, (0, int(n.max()) - len(w))) for w in waves]))
    enc, lens = ref.forward(input_signal=x, input_signal_length=n)  # (B, D, T), (B,)
    lm = load_pretrained(path)
    model = lm.model.float()
    tree = BoostingTree.from_phrases(PHRASES, lm.tokenizer.encode_text, model.blank_id)

    def search(boosting):
        out = greedy_search(
            model.joiner,
            model.predictor,
            enc.transpose(1, 2),
            lens,
            blank_id=model.blank_id,
            max_symbols_per_step=10,
            durations=model.durations or None,
            boosting=boosting,
            boosting_alpha=ALPHA,
        )
        return out.tokens

    boosted = search(tree)
    assert boosted == _nemo_greedy(ref, enc, lens, PHRASES)
    plain = search(None)
    assert plain == _nemo_greedy(ref, enc, lens, None)
    assert boosted != plain, "boosting should change the greedy tokens of these inputs"
    assert sum(map(len, boosted)) > 10, "the comparison is vacuous without labels"


@torch.no_grad()
def test_engine_boosts_hotwords_in_greedy_search_as_the_search_does(fixtures, waveforms):
    """Through ``ASREngine``: hotwords on a NeMo transducer's greedy default reach the boosted greedy
    search (they were refused at decode time before); the text is the boosted search's."""
    import oasr
    from oasr.audio.frontends import build_frontend

    path, _ = fixtures["rnnt"]
    engine = oasr.ASREngine(str(path), device="cpu")
    model = engine.model
    tree = BoostingTree.from_phrases(PHRASES, engine.loaded.tokenizer.encode_text, model.blank_id)
    clips = _inputs(waveforms)[2:]  # the random signals: their greedy tokens move under boosting (above)
    moved = 0
    for clip in clips:
        feats, lens = build_frontend(engine.loaded.feature_spec).compute_batch([clip])
        enc, enc_lens = model.encode_offline(feats, lens)[:2]
        kwargs = dict(blank_id=model.blank_id, max_symbols_per_step=model.config.max_symbols_per_step)
        boosted = greedy_search(
            model.joiner, model.predictor, enc, enc_lens, boosting=tree, boosting_alpha=ALPHA, **kwargs
        )
        plain = greedy_search(model.joiner, model.predictor, enc, enc_lens, **kwargs)
        out = engine.transcribe(clip, hotwords=", ".join(PHRASES), hotword_weight=ALPHA)
        assert out.text == engine.loaded.tokenizer.decode(boosted.tokens[0]).strip()
        moved += boosted.tokens != plain.tokens
    assert moved, "boosting should change the greedy tokens of one of these inputs"
    with pytest.raises(ValueError, match="not for search='maes'"):
        engine.transcribe(clips[0], hotwords="country", search="maes", beam_size=2)
