"""oasr.compat.faster_whisper.vad against faster-whisper 1.2.1's own VAD on real audio.

faster-whisper runs Silero VAD v6.0 (its bundled ``silero_vad_v6.onnx``, through onnxruntime);
the drop-in runs the same weights (bundled as safetensors) in oasr's batched Silero. Both are
given the same raw 16 kHz samples: the probabilities must agree to float rounding and the
spans exactly, for faster-whisper's sequential and batched defaults and for options that cut
more (``neg_threshold``, short silences, a small ``max_speech_duration_s``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from oasr.audio import load_audio
from oasr.compat.faster_whisper import vad as cvad

fw = pytest.importorskip("faster_whisper", reason="faster-whisper (the reference) is not installed")
pytest.importorskip("onnxruntime", reason="onnxruntime (faster-whisper's VAD runtime) is not installed")

DATA = Path(__file__).resolve().parents[2] / "data" / "audio"
# speech with pauses (the mfa and moonshine readings), a last window under 64 samples of padding
# (bambatse_15: 8160 samples; picovoice_test, roots_06), and plain sentences
CLIPS = [
    "jfk.wav",
    "1272-141231-0002.flac",
    "mfa_michaelandsickmichael.wav",
    "mfa_cold_corpus.wav",
    "moonshine_two_cities_16k.wav",
    "bambatse_15_haggard_0247.wav",
    "picovoice_test.wav",
    "roots_06_morris_0244.wav",
]
OPTIONS = [
    {},  # the sequential vad_filter's defaults
    {"min_silence_duration_ms": 160, "max_speech_duration_s": 30},  # the batched pipeline's
    {"min_silence_duration_ms": 500, "speech_pad_ms": 200},  # faster-whisper's test_vad
    {"neg_threshold": 0.45, "min_silence_duration_ms": 100, "max_speech_duration_s": 5, "min_speech_duration_ms": 250},
    {"threshold": 0.3, "neg_threshold": 0.1, "min_silence_duration_ms": 160, "max_speech_duration_s": 12},
]


@pytest.fixture(scope="module")
def clips() -> dict[str, np.ndarray]:
    return {name: load_audio(str(DATA / name)) for name in CLIPS}


@pytest.fixture(scope="module")
def long_recording(clips) -> np.ndarray:
    """Every clip and an 86-s reading, end to end: 4 minutes of speech with pauses."""
    return np.concatenate([*clips.values(), load_audio(str(DATA / "moonshine_a_tale_of_two_cities.wav"))])


def _their_probabilities(audio: np.ndarray) -> np.ndarray:
    """faster-whisper's probabilities of ``audio``, padded as its get_speech_timestamps pads it."""
    padded = np.pad(audio, (0, 512 - audio.shape[0] % 512))
    return fw.vad.get_vad_model()(padded).reshape(-1)


def test_probabilities_equal_faster_whispers_silero_v6(clips, long_recording):
    for name, audio in [*clips.items(), ("long", long_recording)]:
        ours, theirs = cvad.speech_probabilities(audio), _their_probabilities(audio)
        assert ours.shape == theirs.shape, name
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=5e-5, err_msg=name)


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "defaults")
def test_speech_timestamps_equal_faster_whispers(clips, options):
    for name, audio in clips.items():
        want = fw.vad.get_speech_timestamps(audio, fw.vad.VadOptions(**options))
        assert cvad.get_speech_timestamps(audio, cvad.VadOptions(**options)) == want, name


@pytest.mark.parametrize("options", OPTIONS[:2], ids=["defaults", "batched"])
def test_speech_timestamps_of_a_long_recording_equal_faster_whispers(long_recording, options):
    want = fw.vad.get_speech_timestamps(long_recording, **options)  # faster-whisper's keyword form
    assert len(want) > 5
    assert cvad.get_speech_timestamps(long_recording, **options) == want


def test_collect_chunks_and_timestamp_map_equal_faster_whispers(long_recording):
    audio = long_recording
    spans = fw.vad.get_speech_timestamps(
        audio, fw.vad.VadOptions(min_silence_duration_ms=160, max_speech_duration_s=30)
    )
    assert len(spans) > 20
    ours, our_meta = cvad.collect_chunks(audio, spans, max_duration=30)
    theirs, their_meta = fw.vad.collect_chunks(audio, spans, max_duration=30)
    assert len(ours) == len(theirs) > 3
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)
    # faster-whisper 1.2.1 leaves the first span of each later piece out of its "segments"
    assert [(m["offset"], m["duration"]) for m in our_meta] == [(m["offset"], m["duration"]) for m in their_meta]
    ours_map, theirs_map = cvad.SpeechTimestampsMap(spans, 16000), fw.vad.SpeechTimestampsMap(spans, 16000)
    for t in np.linspace(0, sum(s["end"] - s["start"] for s in spans) / 16000, 997):
        for is_end in (False, True):
            assert ours_map.get_original_time(t, is_end=is_end) == theirs_map.get_original_time(t, is_end=is_end)
    for s in np.cumsum([s["end"] - s["start"] for s in spans]) / 16000:  # ends exactly on a seam
        assert ours_map.get_chunk_index(s, is_end=True) == theirs_map.get_chunk_index(s, is_end=True)


@pytest.mark.parametrize(
    "bad",
    [
        {"threshold": "0.5"},
        {"neg_threshold": float("nan")},
        {"min_silence_duration_ms": -1},
        {"speech_pad_ms": True},
        {"max_speech_duration_s": 0},
    ],
)
def test_bad_vad_options_are_named(bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=f"vad {name} must be"):
        cvad.VadOptions(**bad)


def test_the_bundled_weights_are_checked(tmp_path, monkeypatch):
    broken = tmp_path / "silero_vad_v6.safetensors"
    data = bytearray(cvad.SILERO_V6.read_bytes())
    data[-1] ^= 1
    broken.write_bytes(bytes(data))
    monkeypatch.setattr(cvad, "_net", None)
    monkeypatch.setattr(cvad, "SILERO_V6", broken)
    with pytest.raises(RuntimeError, match="reinstall oasr"):
        cvad.get_vad_model()
    monkeypatch.setattr(cvad, "SILERO_V6", tmp_path / "missing.safetensors")
    with pytest.raises(RuntimeError, match="missing"):
        cvad.get_vad_model()
