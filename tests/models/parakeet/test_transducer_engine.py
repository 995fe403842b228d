"""Parakeet RNN-T and TDT through the engine's ``transducer`` strategy. The model layer is held
to transformers' ``generate`` in float64 (``test_transducer.py``); here ``ASREngine`` over the
same tiny checkpoints decodes a batch of unequal lengths, and each clip's labels must equal the
model's own greedy search over that clip's features alone (the engine's batching, windows and
label bookkeeping change nothing), with segment and word times from the emission frames; a beam
runs NeMo's malsd search (held to NeMo in ``test_nemo_beam.py``), batched as each clip alone."""

from __future__ import annotations

import torch

import oasr
from oasr.engine.decode.base import Request
from tests.models.parakeet.test_transducer import case  # noqa: F401 (fixture)


def test_engine_batch_equals_each_clip_alone(case, waveforms):  # noqa: F811
    kind, path, *_ = case
    engine = oasr.ASREngine(str(path), dtype="float32")
    assert engine.strategy.decode_type.value == "transducer"
    outs = engine.transcribe(list(waveforms), beam_size=1, word_timestamps=True)
    emitted = 0
    skip = engine.strategy.skip_ids  # the tokenizer's special ids (<pad>, <unk>) are not text
    for i, (wave, out) in enumerate(zip(waveforms, outs)):
        feats = engine.strategy.prepare(Request(f"r{i}", wave, engine.make_options())).features.windows[0].feats
        alone = engine.model.greedy_decode(feats[None].float(), torch.tensor([feats.shape[0]]))
        got = [t for seg in out.segments for t in seg.tokens]
        assert got == [t for t in alone.tokens[0] if t not in skip], (kind, i)
        emitted += len(got)
        for seg in out.segments:
            assert 0 <= seg.start <= seg.end <= out.duration + 0.1
            assert seg.words and all(0.0 < w.probability <= 1.0 for w in seg.words)
    assert emitted > 10, "the comparison is vacuous without labels"


def test_a_beam_runs_nemos_malsd_batched_as_each_clip_alone(case, waveforms):  # noqa: F811
    kind, path, *_ = case
    engine = oasr.ASREngine(str(path), dtype="float32")
    opts = engine.make_options(beam_size=4)
    assert (opts.search, opts.beam_size) == ("malsd", 4)  # a Hugging Face checkpoint names no search
    outs = engine.transcribe(list(waveforms), beam_size=4)
    skip = engine.strategy.skip_ids
    emitted = 0
    for i, (wave, out) in enumerate(zip(waveforms, outs)):
        feats = engine.strategy.prepare(Request(f"r{i}", wave, opts)).features.windows[0].feats
        enc, lens = engine.model.encode_offline(feats[None].float(), torch.tensor([feats.shape[0]]))
        alone = engine.model.transducer_search(
            enc, lens, search="malsd", beam_size=4, max_sym_per_frame=None, blank_penalty=0.0
        )
        got = [t for seg in out.segments for t in seg.tokens]
        assert got == [t for t in alone.tokens[0] if t not in skip], (kind, i)
        emitted += len(got)
    assert emitted > 10, "the comparison is vacuous without labels"
