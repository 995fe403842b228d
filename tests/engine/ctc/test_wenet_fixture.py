"""The ctc and ctc_aed_rescoring strategies reproduce WeNet's own decodes of the shared
U2++ fixture end to end: audio file in, ASREngine, tokens and text out."""

from __future__ import annotations

import json

import pytest

from tests.conftest import AUDIO_DIR, FIXTURES_DIR

WENET_DIR = FIXTURES_DIR / "wenet-u2pp-tiny"
CLIP = AUDIO_DIR / "sense_and_sensibility_01_austen_64kb-0870.wav"


@pytest.fixture(scope="module")
def expected() -> dict:
    if not (WENET_DIR / "expected.json").is_file() or not CLIP.is_file():
        pytest.skip(f"shared WeNet fixture not found at {WENET_DIR} (set OASR_SHARED_DIR)")
    pytest.importorskip("oasr.models.conformer")
    from oasr.models.registry import list_models

    if "conformer" not in list_models():
        from oasr.models.conformer import register

        register()
    return json.loads((WENET_DIR / "expected.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("decode_type", "method", "beam_size"),
    [
        ("ctc", "ctc_greedy_search", 1),
        ("ctc", "ctc_prefix_beam_search", 4),
        ("ctc_aed_rescoring", "attention_rescoring", 4),  # ctc_weight 0.3, reverse_weight 0.3 from train.yaml
    ],
)
def test_engine_reproduces_wenet(expected, decode_type, method, beam_size):
    from oasr.engine import ASREngine

    engine = ASREngine(str(WENET_DIR), decode_type=decode_type)
    out = engine.transcribe(str(CLIP), beam_size=beam_size, word_timestamps=True)
    assert [t for s in out.segments for t in s.tokens] == expected[method]
    assert out.text == expected["text"][method]
    words = [w for s in out.segments for w in s.words]
    assert words and 0.0 <= words[0].start < words[-1].end <= out.duration
