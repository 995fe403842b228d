"""oasr.compat.faster_whisper against the checks of faster-whisper's own tests/test_transcribe.py.

whisper-base (bundled) stands in for faster-whisper's Hub "tiny", tiny.en for "tiny.en"; the
transcripts are compared with the real ``faster_whisper`` package on the same weights where
both are installed. Checks of faster-whisper's suite that need its own recordings
(stereo_diarization.wav, multilingual.mp3, hotwords.mp3, physicsworks.wav) are made on
jfk.wav where the property carries over, and otherwise not here (see each test).
"""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import numpy as np
import pytest

from oasr.audio import load_audio
from oasr.compat import faster_whisper as fw_compat
from oasr.compat.faster_whisper import BatchedInferencePipeline, WhisperModel
from oasr.models.bundled import bundled_path
from tests.conftest import AUDIO_DIR

AUDIO = AUDIO_DIR
JFK = str(AUDIO / "jfk.wav")
JFK_TEXT = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."

needs_base = pytest.mark.skipif(
    bundled_path("whisper-base") is None,
    reason="whisper-base (oasr's whisper-base extra) is not installed",
)
needs_tiny_en = pytest.mark.skipif(
    bundled_path("whisper-tiny.en") is None,
    reason="tiny.en is not installed (oasr's whisper-tiny-en extra)",
)


def _norm(text: str) -> str:
    return " ".join(text.replace(",", "").replace(".", "").lower().split())


@pytest.fixture(scope="module")
def model():
    return WhisperModel("base", device="cpu", compute_type="float32", cpu_threads=2)


@pytest.fixture(scope="module")
def jfk_words(model):
    """faster-whisper's test_transcribe call (word timestamps), greedy: its default beam of 5 costs 5x the
    time on a loaded 2-core machine and checks nothing more here (beam search: tests/engine)."""
    segments, info = model.transcribe(JFK, word_timestamps=True, beam_size=1)
    return list(segments), info


@pytest.fixture(scope="module")
def jfk_batched(model):
    """faster-whisper's batched call (VAD chunks, no timestamps), with word timestamps, greedy."""
    segments, info = BatchedInferencePipeline(model=model).transcribe(
        JFK, batch_size=16, word_timestamps=True, beam_size=1
    )
    return list(segments), info


@pytest.fixture(scope="module")
def fw_base_dir(tmp_path_factory) -> str:
    """The bundled whisper-base as a CTranslate2 directory faster-whisper loads (its split model.bin joined)."""
    from oasr.models.formats.ctranslate2 import find_model_parts

    src = bundled_path("whisper-base")
    parts = find_model_parts(src)
    dst = src
    if len(parts) > 1:
        dst = tmp_path_factory.mktemp("fw") / "whisper-base"
        dst.mkdir()
        for f in ("config.json", "tokenizer.json", "vocabulary.txt"):
            if (src / f).exists():
                shutil.copy(src / f, dst / f)
        with open(dst / "model.bin", "wb") as out:
            for p in parts:
                out.write(p.read_bytes())
    return str(dst)


@pytest.fixture(scope="module")
def real_fw(fw_base_dir):
    """The real faster-whisper on the same whisper-base weights."""
    faster_whisper = pytest.importorskip("faster_whisper", reason="faster-whisper is not installed")
    return faster_whisper.WhisperModel(fw_base_dir, device="cpu", compute_type="float32", cpu_threads=2)


# -- signatures: every faster-whisper argument, with its default --------------------------------


def _params(fn) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values() if p.name != "self"]


def test_transcribe_signature():
    # faster-whisper's own check: the batched pipeline takes the same arguments plus batch_size.
    seq = [n for n, _ in _params(WhisperModel.transcribe)]
    batched = [n for n, _ in _params(BatchedInferencePipeline.transcribe)]
    assert [n for n in batched if n != "batch_size"] == seq


def test_signatures_equal_faster_whispers():
    faster_whisper = pytest.importorskip("faster_whisper", reason="faster-whisper is not installed")
    pairs = [
        (WhisperModel.__init__, faster_whisper.WhisperModel.__init__),
        (WhisperModel.transcribe, faster_whisper.WhisperModel.transcribe),
        (WhisperModel.detect_language, faster_whisper.WhisperModel.detect_language),
        (BatchedInferencePipeline.transcribe, faster_whisper.BatchedInferencePipeline.transcribe),
    ]
    for ours, theirs in pairs:
        assert _params(ours) == _params(theirs), ours.__qualname__


def test_dataclass_fields_equal_faster_whispers():
    import dataclasses

    fwt = pytest.importorskip("faster_whisper.transcribe", reason="faster-whisper is not installed")
    for name in ("Word", "Segment", "TranscriptionOptions", "TranscriptionInfo"):
        ours = [f.name for f in dataclasses.fields(getattr(fw_compat, name))]
        assert ours == [f.name for f in dataclasses.fields(getattr(fwt, name))], name


# -- refusals: clear errors naming the argument --------------------------------------------------


def test_unknown_size_and_bad_constructor_arguments_are_named():
    with pytest.raises(ValueError, match="'large-v3'.*local checkpoint directory"):
        WhisperModel("large-v3")
    with pytest.raises(ValueError, match="compute_type='int16'"):
        WhisperModel("base", compute_type="int16")
    with pytest.raises(ValueError, match="revision='main'"):
        WhisperModel("base", revision="main")
    with pytest.raises(ValueError, match="flash_attention=True"):
        WhisperModel("base", flash_attention=True)
    with pytest.raises(ValueError, match="device_index=\\[0, 1\\]"):
        WhisperModel("base", device="cuda", device_index=[0, 1])


@needs_base
def test_refused_transcribe_options_are_named(model):
    with pytest.raises(ValueError, match="chunk_length=10"):
        model.transcribe(JFK, chunk_length=10)
    with pytest.raises(ValueError, match="features="):
        model.detect_language(features=np.zeros((80, 3000), np.float32))
    with pytest.raises(RuntimeError, match="No clip timestamps found"):
        BatchedInferencePipeline(model).transcribe(np.zeros(31 * 16000, np.float32), vad_filter=False)


# -- faster-whisper's checks -----------------------------------------------------------------------


@needs_tiny_en
@needs_base
def test_supported_languages(model):
    assert WhisperModel("tiny.en", device="cpu").supported_languages == ["en"]
    langs = model.supported_languages
    assert len(langs) == 99 and langs[0] == "en" and {"de", "zh", "ja"} <= set(langs)


@needs_base
def test_transcribe(jfk_words):
    segments, info = jfk_words
    assert info.all_language_probs is not None
    top_lang, top_p = info.all_language_probs[0]
    assert info.language == "en" == top_lang
    assert info.language_probability > 0.9 and abs(info.language_probability - top_p) < 1e-16
    assert info.duration == 11 and info.duration_after_vad == 11
    opts = info.transcription_options
    assert opts.word_timestamps and opts.beam_size == 1 and opts.best_of == 5
    assert opts.temperatures == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0] and opts.suppress_tokens == [-1]
    # faster-whisper's tiny gives one segment; whisper-base splits the same words in two.
    assert _norm("".join(s.text for s in segments)) == _norm(JFK_TEXT)
    for segment in segments:
        assert segment.text == "".join(word.word for word in segment.words)
        assert segment.start == segment.words[0].start
        assert segment.end == segment.words[-1].end
    assert [s.id for s in segments] == list(range(1, len(segments) + 1))


@needs_base
def test_transcribe_equals_real_faster_whisper(jfk_words, real_fw):
    ours, _ = jfk_words
    theirs, info = real_fw.transcribe(JFK, word_timestamps=True, beam_size=1)
    theirs = list(theirs)
    assert info.language == "en"
    assert [s.text for s in ours] == [s.text for s in theirs]
    assert [s.tokens for s in ours] == [s.tokens for s in theirs]
    ours_w = [(w.word, w.start, w.end) for s in ours for w in s.words]
    theirs_w = [(w.word, w.start, w.end) for s in theirs for w in s.words]
    assert [w[0] for w in ours_w] == [w[0] for w in theirs_w]
    assert max(abs(a[i] - b[i]) for a, b in zip(ours_w, theirs_w) for i in (1, 2)) <= 0.02


@needs_base
def test_monotonic_timestamps(jfk_words, jfk_batched):
    # faster-whisper checks this on physicsworks.wav (not shared here); jfk.wav with both pipelines.
    for segments, info in (jfk_words, jfk_batched):
        for i, segment in enumerate(segments):
            assert segment.start <= segment.end
            if i + 1 < len(segments):
                assert segment.end <= segments[i + 1].start
            for word in segment.words:
                assert segment.start <= word.start <= word.end <= segment.end
        assert segments[-1].end <= info.duration


@needs_base
def test_batched_transcribe_decodes_each_chunk_once(jfk_batched):
    segments, info = jfk_batched
    assert info.language == "en" and info.language_probability > 0.7
    assert 10 < info.duration_after_vad <= 11
    # one VAD chunk, decoded once: no second pass over the silence after the last word
    # (where the sequential seek rule made Whisper add " Thank you.").
    assert len(segments) == 1
    assert _norm(segments[0].text) == _norm(JFK_TEXT)
    assert segments[0].words is not None and segments[0].words[-1].word.strip() == "country."


@needs_base
def test_empty_audio(model, real_fw):
    audio = np.array([], dtype=np.float32)
    pipeline = BatchedInferencePipeline(model=model)
    assert list(model.transcribe(audio)[0]) == []
    assert list(pipeline.transcribe(audio)[0]) == []
    info = model.transcribe(audio)[1]
    # faster-whisper detects a language even here: on the features of nothing (one silent frame)
    theirs = real_fw.transcribe(audio)[1]
    assert info.duration == 0 and info.language == theirs.language
    assert info.language_probability == pytest.approx(theirs.language_probability, abs=1e-4)
    assert model.detect_language(audio)[0] == real_fw.detect_language(audio)[0]


@needs_base
def test_prefix_with_timestamps(model):
    segments, _ = model.transcribe(JFK, prefix="And so my fellow Americans", beam_size=1)
    segments = list(segments)
    assert segments[0].text.startswith(" And so my fellow Americans")
    assert _norm("".join(s.text for s in segments)) == _norm(JFK_TEXT)
    assert segments[0].start == 0
    assert 10 < segments[-1].end <= 11


@needs_base
def test_vad(model):
    segments, info = model.transcribe(
        JFK, vad_filter=True, vad_parameters=dict(min_silence_duration_ms=500, speech_pad_ms=200), beam_size=1
    )
    segments = list(segments)
    assert _norm("".join(s.text for s in segments)) == _norm(JFK_TEXT)
    assert 0 < segments[0].start < 1
    assert 10 < segments[-1].end < 11
    assert info.vad_options.min_silence_duration_ms == 500
    assert info.vad_options.speech_pad_ms == 200
    assert info.duration_after_vad < info.duration


@needs_base
def test_cliptimestamps_segments(model):
    pipeline = BatchedInferencePipeline(model=model)
    audio = load_audio(JFK)
    audio = np.concatenate([audio, audio])
    clips = [{"start": 0.0, "end": 11.0}, {"start": 11.0, "end": 22.0}]
    segments, info = pipeline.transcribe(audio, clip_timestamps=clips, beam_size=1, hotwords="Americans")
    segments = list(segments)
    assert len(segments) == 2
    for segment, clip in zip(segments, clips):
        assert segment.start == clip["start"] and segment.end == clip["end"]
        assert _norm(segment.text) == _norm(JFK_TEXT)
    assert info.transcription_options.hotwords == "Americans"


@needs_base
def test_generator_is_lazy_and_log_progress_is_accepted(model, monkeypatch, capsys):
    calls = []
    real = model.engine.transcribe_stream  # segments as their windows are decoded
    monkeypatch.setattr(model.engine, "transcribe_stream", lambda *a, **k: calls.append(k) or real(*a, **k))
    segments, info = model.transcribe(JFK, language="en", beam_size=1, log_progress=True, chunk_length=30)
    assert calls == [] and info.language == "en" and info.all_language_probs is None
    texts = [s.text for s in segments]
    assert len(calls) == 1 and calls[0]["language"] == "en" and texts
    assert "seconds" in capsys.readouterr().err  # the tqdm bar, in audio seconds


@needs_base
def test_a_given_language_is_reported_as_its_code(model):
    """faster-whisper takes codes only; oasr's one resolver also takes names and locales, and
    reports the code it decodes in (the engine's ``out.language``)."""
    _, info = model.transcribe(JFK, language="English", beam_size=1)
    assert (info.language, info.language_probability) == ("en", 1.0)
    assert model.transcribe(JFK, language="en_US", beam_size=1)[1].language == "en"
    with pytest.raises(ValueError, match="'xx' is not a language of WhisperModel"):
        model.transcribe(JFK, language="xx")


@needs_base
def test_detect_language(model):
    language, probability, probs = model.detect_language(load_audio(JFK))
    assert language == "en" and probability > 0.9
    assert probs[0] == (language, probability) and len(probs) == 99


@pytest.mark.parametrize(
    ("compute_type", "dtype", "quantize"),
    [
        ("default", None, None),
        ("float32", "float32", None),
        ("float16", "float16", None),
        ("bfloat16", "bfloat16", None),
        ("int8", "float32", "int8"),
        ("int8_float32", "float32", "int8"),
        ("int8_bfloat16", "bfloat16", "int8"),
    ],
)
def test_constructor_maps_onto_the_engine(monkeypatch, compute_type, dtype, quantize):
    import types

    import oasr.engine

    seen = {}

    class FakeEngine:
        def __init__(self, model, **kwargs):
            seen.update(model=model, **kwargs)
            special = types.SimpleNamespace(is_multilingual=False)
            self.strategy = types.SimpleNamespace(tok=types.SimpleNamespace(special=special))

    monkeypatch.setattr(oasr.engine, "ASREngine", FakeEngine)
    model = WhisperModel("tiny.en", device="cpu", compute_type=compute_type, cpu_threads=3, num_workers=12)
    assert seen == {
        "model": "tiny.en",
        "architecture": "whisper",
        "device": "cpu",
        "dtype": dtype,
        "quantize": quantize,
        "num_threads": 3,
        "max_batch_size": 12,
    }
    assert model.supported_languages == ["en"]
    WhisperModel("/some/ct2/dir", device="cuda", device_index=[1])
    assert seen["model"] == "/some/ct2/dir" and seen["device"] == "cuda:1"


@needs_base
def test_audio_from_a_binary_file_object():
    with open(JFK, "rb") as f:
        wave = fw_compat.decode_audio(f)
    np.testing.assert_array_equal(wave, load_audio(JFK))


@needs_base
def test_vad_filter_joins_the_speech_and_decodes_it_as_faster_whisper_does(fw_base_dir):
    """faster-whisper's sequential vad_filter on the raw audio: its spans (Silero v6.0 on both
    sides), the speech joined into one recording, decoded as one (seek in the joined audio), times
    mapped back through the cut silences (2 decimals)."""
    faster_whisper = pytest.importorskip("faster_whisper", reason="faster-whisper is not installed")
    pytest.importorskip("onnxruntime", reason="onnxruntime (faster-whisper's VAD runtime) is not installed")

    # one thread on both sides: the greedy decode of this input is close enough to a tie that the
    # thread count's summation order can flip a token
    model = WhisperModel("base", device="cpu", compute_type="float32", cpu_threads=1)
    reference = faster_whisper.WhisperModel(fw_base_dir, device="cpu", compute_type="float32", cpu_threads=1)
    audio = load_audio(JFK)
    vad = dict(min_silence_duration_ms=500, speech_pad_ms=200)  # faster-whisper's test_vad: JFK's pauses cut
    theirs, their_info = reference.transcribe(audio, vad_filter=True, vad_parameters=vad, beam_size=1)
    ours, our_info = model.transcribe(audio, vad_filter=True, vad_parameters=vad, beam_size=1)
    theirs, ours = list(theirs), list(ours)
    assert our_info.duration_after_vad == their_info.duration_after_vad < their_info.duration
    assert [s.text for s in ours] == [s.text for s in theirs]
    assert [s.seek for s in ours] == [s.seek for s in theirs]
    for a, b in zip(ours, theirs):
        assert (a.start, a.end) == (b.start, b.end)


@needs_base
def test_batched_vad_parameters_take_neg_threshold_as_faster_whisper_does(fw_base_dir):
    """BatchedInferencePipeline's vad_parameters with neg_threshold (faster-whisper passes it to its
    VAD, over VadOptions' defaults, max_speech_duration_s set to 30): the same chunks and segments
    as faster-whisper's on the same whisper-base weights, on a reading with pauses."""
    faster_whisper = pytest.importorskip("faster_whisper", reason="faster-whisper is not installed")
    pytest.importorskip("onnxruntime", reason="onnxruntime (faster-whisper's VAD runtime) is not installed")
    audio = load_audio(str(Path(__file__).resolve().parents[2] / "data/audio/mfa_michaelandsickmichael.wav"))
    vad = {"neg_threshold": 0.1, "min_silence_duration_ms": 160}
    # the option matters here: a low neg_threshold lets speech run on through the quieter pauses
    spans = faster_whisper.vad.get_speech_timestamps
    default = spans(audio, min_silence_duration_ms=160, max_speech_duration_s=30)
    assert spans(audio, **vad, max_speech_duration_s=30) != default

    model = WhisperModel("base", device="cpu", compute_type="float32", cpu_threads=2)
    reference = faster_whisper.WhisperModel(fw_base_dir, device="cpu", compute_type="float32", cpu_threads=2)
    theirs, their_info = faster_whisper.BatchedInferencePipeline(reference).transcribe(
        audio, vad_parameters=dict(vad), beam_size=1
    )
    ours, our_info = BatchedInferencePipeline(model).transcribe(audio, vad_parameters=dict(vad), beam_size=1)
    theirs, ours = list(theirs), list(ours)
    assert vars(our_info.vad_options) == vars(their_info.vad_options)
    assert our_info.duration_after_vad == their_info.duration_after_vad < their_info.duration
    assert [(s.seek, s.start, s.end) for s in ours] == [(s.seek, s.start, s.end) for s in theirs]
    assert [s.text for s in ours] == [s.text for s in theirs]
