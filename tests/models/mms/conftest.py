"""Fixtures of the MMS tests: one tiny random MMS checkpoint saved by transformers' classes
(``_reference.build_mms``), transformers' model and processor over it, and short real clips."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import AUDIO_DIR
from tests.models.mms._reference import build_mms

# Unequal lengths, one per language of a mixed batch (French, English, German, no language).
CLIPS = ("jaufry_03_lafon_0298.wav", "jfk.wav", "roots_38_morris_0130.wav", "bambatse_02_haggard_0323.wav")
CLIP_S = (1.0, 1.6, 1.2, 0.8)


@pytest.fixture(scope="package", autouse=True)
def _one_thread():
    """Tiny models: intra-op threads buy nothing on a small shared machine. Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="package")
def mms_dir(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    return build_mms(tmp_path_factory.mktemp("mms") / "mms", seed=5)


@pytest.fixture(scope="package")
def processor(mms_dir):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(mms_dir)


@pytest.fixture(scope="package")
def hf_model(mms_dir):
    """transformers' model as ``from_pretrained`` gives it: the checkpoint's own (eng) weights."""
    from transformers import Wav2Vec2ForCTC

    return Wav2Vec2ForCTC.from_pretrained(mms_dir).to(torch.float64).eval()


@pytest.fixture(scope="package")
def loaded(mms_dir):
    """``oasr.load_pretrained`` of the directory, cast to float64."""
    import oasr

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a clean checkpoint loads without dropped tensors
        lm = oasr.load_pretrained(mms_dir)
    lm.model.to(torch.float64)
    return lm


@pytest.fixture(scope="session")
def clips() -> list:
    from oasr.audio import load_audio

    if not all((AUDIO_DIR / name).is_file() for name in CLIPS):
        pytest.skip(f"data/audio not found at {AUDIO_DIR}")
    return [load_audio(str(AUDIO_DIR / name))[: int(s * 16000)] for name, s in zip(CLIPS, CLIP_S)]


@pytest.fixture(scope="package")
def decode_together():
    """``decode_together(engine, clips, languages, **options)``: the clips admitted as requests of
    their own language, then stepped until all finish (one batch where they fit); returns the
    outputs in order."""
    from oasr.engine.decode.base import Request

    def run(engine, clips, languages, **options) -> list:
        rids = []
        for wav, language in zip(clips, languages):
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
