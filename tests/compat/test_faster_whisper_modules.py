"""The public names faster-whisper users import, checked against the real faster_whisper package."""

from __future__ import annotations

import numpy as np
import pytest

import oasr.compat.faster_whisper as compat
from oasr.audio import load_audio
from oasr.compat.faster_whisper import vad as cvad
from tests.conftest import AUDIO_DIR

fw = pytest.importorskip("faster_whisper", reason="faster-whisper (the reference) is not installed")
CLIPS = [AUDIO_DIR / "1272-141231-0002.flac", AUDIO_DIR / "mfa_michaelandsickmichael.wav"]


def test_top_level_names_match_faster_whisper():
    assert compat.available_models() == fw.available_models()
    assert compat.__version__ == fw.__version__
    for t in (0.0, 1.5, 61.0004, 3725.25):
        assert compat.format_timestamp(t) == fw.format_timestamp(t)
        assert compat.format_timestamp(t, True, ",") == fw.format_timestamp(t, True, ",")


def test_download_model_is_a_clear_offline_error():
    with pytest.raises(RuntimeError, match="no model hub access"):
        compat.download_model("tiny")


@pytest.mark.parametrize(
    "options",
    [{}, {"min_silence_duration_ms": 500, "speech_pad_ms": 200}, {"max_speech_duration_s": 5, "neg_threshold": 0.2}],
)
def test_span_rule_equals_faster_whisper_on_the_same_probabilities(options, monkeypatch):
    for clip in CLIPS:
        audio = load_audio(str(clip))
        probs = cvad.speech_probabilities(audio)
        monkeypatch.setattr(fw.vad, "get_vad_model", lambda p=probs: lambda x: p.reshape(-1, 1))
        want = fw.vad.get_speech_timestamps(audio, fw.vad.VadOptions(**options))
        assert cvad.spans_from_probabilities(probs, len(audio), cvad.VadOptions(**options)) == want


def test_vad_options_defaults_are_faster_whispers():
    assert cvad.VadOptions() == cvad.VadOptions(**vars(fw.vad.VadOptions()))
    audio = np.zeros(16000, np.float32)
    assert compat.vad.collect_chunks(audio, [])[1] == fw.vad.collect_chunks(audio, [])[1]
