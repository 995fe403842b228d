"""The ``transducer`` decode strategy end to end on the tiny icefall hybrid: ``ASREngine`` with
``architecture="transducer"`` gives, for every clip of a batch of unequal lengths, the tokens
and emission frames of icefall's own ``greedy_search`` / ``modified_beam_search`` on that clip
alone, with word and segment times from the emission frames; the same checkpoint loaded as
``zipformer`` decodes its CTC head instead. Options a transducer cannot honour are refused."""

from __future__ import annotations

import pytest
import torch

import oasr
from tests.models.zipformer.conftest import icefall_input

zipformer = pytest.importorskip("zipformer", reason="the zipformer package (icefall's modules) is not installed")

CLIPS = ("jfk.wav", "sense_and_sensibility_01_austen_64kb-0880.wav")  # 11 s and 3 s


@pytest.fixture(scope="module")
def paths(audio_dir):
    return [str(audio_dir / name) for name in CLIPS]


@pytest.fixture(scope="module")
def engine(reference):
    return oasr.ASREngine(str(reference.path), architecture="transducer", dtype="float32")


def _icefall_tokens(reference, engine, path, beam: int) -> list[int]:
    """icefall's search over icefall's encoder, on oasr's features of the clip."""
    from zipformer.decode import search  # icefall's own search module in the package

    request = engine.strategy.prepare(oasr.engine.decode.base.Request("x", path, engine.make_options()))
    feats = icefall_input(request.features.windows[0].feats.double(), reference.causal)
    with torch.no_grad():
        enc, enc_lens = reference.model.forward_encoder(feats[None], torch.tensor([feats.shape[0]]))
        if beam == 1:
            return search.greedy_search(reference.model, enc, enc_lens)[0]
        return search.modified_beam_search(reference.model, enc, enc_lens, beam=beam)[0]


@pytest.mark.parametrize("beam", [1, 4])
def test_engine_equals_icefall_search_per_clip(reference, engine, paths, beam):
    outs = engine.transcribe(paths, beam_size=beam, word_timestamps=True)
    # A causal model encodes icefall's 30-frame tail pad too: tokens emitted there still end
    # with the audio (the shared frame-synchronous timing clamps them to the window). The
    # checkpoint's special ids (<sos/eos>, <unk>) are not text: dropped, as a stream drops them.
    skip = engine.strategy.skip_ids
    for path, out in zip(paths, outs):
        want = [t for t in _icefall_tokens(reference, engine, path, beam) if t not in skip]
        got = [t for seg in out.segments for t in seg.tokens]
        assert want and got == want, path
        for seg in out.segments:
            assert 0 <= seg.start <= seg.end <= out.duration + 1e-3
            assert seg.words and all(w.start <= w.end <= out.duration + 1e-3 for w in seg.words)
            assert all(0.0 < w.probability <= 1.0 for w in seg.words)


def test_hybrid_serves_both_decode_types(reference, paths):
    ctc = oasr.ASREngine(str(reference.path), dtype="float32")
    assert ctc.strategy.decode_type.value == "ctc"
    trans = oasr.ASREngine(str(reference.path), architecture="transducer", dtype="float32")
    assert trans.strategy.decode_type.value == "transducer"
    assert isinstance(ctc.transcribe(paths[1]).text, str)


def test_options_a_transducer_refuses(engine):
    with pytest.raises(ValueError, match="max_sym_per_frame"):
        engine.make_options(max_sym_per_frame=0)
    with pytest.raises(ValueError, match="greedy search"):
        engine.make_options(beam_size=4, max_sym_per_frame=2)
    with pytest.raises(
        ValueError, match="phrase boosting is implemented for icefall's modified beam .* not for search='greedy'"
    ):
        engine.make_options(hotwords="hello", beam_size=1)
    with pytest.raises(ValueError, match="initial_prompt"):
        engine.make_options(initial_prompt="x")
