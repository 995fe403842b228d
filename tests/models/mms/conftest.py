"""Fixtures of the MMS tests: one tiny random MMS checkpoint saved by transformers' classes
(``_reference.build_mms``) as ``hf_dir``, so that the wav2vec2 family's fixtures serve it too
(``loaded``: oasr's float64 load; ``processor``; the clips; one intra-op thread), and
transformers' model over it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.models.mms._reference import build_mms
from tests.models.wav2vec2.conftest import _one_thread, clips, loaded, processor  # noqa: F401 (fixtures)


@pytest.fixture(scope="package")
def hf_dir(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    return build_mms(tmp_path_factory.mktemp("mms") / "mms", seed=5)


@pytest.fixture(scope="package")
def mms_dir(hf_dir) -> Path:
    return hf_dir


@pytest.fixture(scope="package")
def hf_model(hf_dir):
    """transformers' model as ``from_pretrained`` gives it: the checkpoint's own (eng) weights."""
    from transformers import Wav2Vec2ForCTC

    return Wav2Vec2ForCTC.from_pretrained(hf_dir).to(torch.float64).eval()


@pytest.fixture(scope="package")
def rows(clips) -> list:  # noqa: F811 (the imported fixture, requested)
    """Four clips of unequal lengths, one per language of a mixed batch: the family's three and
    the first one's first half."""
    return [*clips, clips[0][: len(clips[0]) // 2]]


@pytest.fixture(scope="package")
def decode_together():
    """``decode_together(engine, waves, languages, **options)``: the waves admitted as requests of
    their own language, then stepped until all finish (one batch where they fit); returns the
    outputs in order."""
    from oasr.engine.decode.base import Request

    def run(engine, waves, languages, **options) -> list:
        rids = []
        for wav, language in zip(waves, languages):
            request = Request(engine.new_request_id(), wav.copy(), engine.make_options(language=language, **options))
            engine.add_request(engine.splitter.prepare(request))
            rids.append(request.request_id)
        outs = {}
        while len(outs) < len(rids):
            for event in engine.splitter.step():
                assert event.kind != "error", event.error
                if event.kind == "finished":
                    outs[event.request_id] = event.output
        return [outs[rid] for rid in rids]

    return run
