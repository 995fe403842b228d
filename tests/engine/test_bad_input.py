"""Bad input gets a clear ValueError naming the problem, and the engine keeps working."""

from __future__ import annotations

import numpy as np
import pytest

import oasr
from oasr.audio import AudioDecodeError

pytestmark = pytest.mark.real_weights


@pytest.fixture(scope="module")
def engine():
    if oasr.models.bundled.bundled_path("whisper-tiny.en") is None:
        pytest.skip("tiny.en weights not installed")
    return oasr.ASREngine("whisper-tiny.en", max_batch_size=2)


@pytest.fixture(scope="module")
def good(audio_dir):
    return oasr.audio.load_audio(audio_dir / "jfk.wav")[: 16000 * 3]


def _expect(engine, good, source, phrase):
    with pytest.raises(ValueError, match=phrase) as info:
        engine.transcribe(source, beam_size=1)
    assert isinstance(info.value, AudioDecodeError)
    # The engine still serves the next request.
    assert "fellow americans" in engine.transcribe(good, beam_size=1).text.lower()


def test_empty_file(engine, good, tmp_path):
    p = tmp_path / "empty.wav"
    p.write_bytes(b"")
    _expect(engine, good, str(p), "empty")


def test_truncated_file(engine, good, tmp_path, audio_dir):
    data = (audio_dir / "1272-141231-0002.flac").read_bytes()
    p = tmp_path / "cut.flac"
    p.write_bytes(data[: len(data) * 6 // 10])
    _expect(engine, good, str(p), "truncated")


def test_text_file_named_wav(engine, good, tmp_path):
    p = tmp_path / "notes.wav"
    p.write_text("this is not audio at all\n" * 20)
    _expect(engine, good, str(p), "not an audio file")


def test_zero_length_array(engine, good):
    _expect(engine, good, np.zeros(0, dtype=np.float32), "empty audio")


def test_nan_samples(engine, good):
    x = good.copy()
    x[100] = np.nan
    _expect(engine, good, x, "NaN")


@pytest.mark.parametrize(
    "case", ["constant_1e19", "constant_1e30", "float32_max", "speech_with_one_1e19_sample", "int16_speech_as_floats"]
)
def test_samples_far_outside_full_scale(engine, good, case):
    """Float samples of 1e19-3.4e38 gave NaN log-mel features and a failed batch (500 after
    quarantine on the server); anything past +-100 is now refused before the front end runs."""
    x = {
        "constant_1e19": lambda: np.full(good.size, 1e19, np.float32),
        "constant_1e30": lambda: np.full(good.size, 1e30, np.float32),
        "float32_max": lambda: np.full(good.size, np.finfo(np.float32).max, np.float32),
        "speech_with_one_1e19_sample": lambda: np.where(np.arange(good.size) == 9000, np.float32(1e19), good),
        "int16_speech_as_floats": lambda: np.round(good * 32767),
    }[case]()
    _expect(engine, good, x, r"far outside the \[-1, 1\] of float audio")


def test_huge_samples_cost_no_decode_work_in_the_async_engine(good):
    """The server's engine refuses such audio while preparing it: no step runs, nothing is
    decoded again in quarantine, and the next request decodes as usual."""
    import asyncio

    from oasr.engine.async_engine import AsyncEngine

    engine = AsyncEngine("whisper-tiny.en")

    async def scenario():
        opts = engine.make_options(beam_size=1)
        bad = await asyncio.gather(
            engine.transcribe(np.full(good.size, 1e19, np.float32), opts),
            engine.transcribe(np.where(np.arange(good.size) == 9000, np.float32(1e30), good), opts),
            return_exceptions=True,
        )
        stats = engine.stats()
        return bad, (stats.steps, stats.quarantined), await engine.transcribe(good, opts)

    try:
        bad, counts, after = asyncio.run(asyncio.wait_for(scenario(), 240))
    finally:
        engine.shutdown()
    assert all(isinstance(e, AudioDecodeError) and "far outside" in str(e) for e in bad), bad
    assert counts == (0, 0), counts
    assert "fellow americans" in after.text.lower()


def test_unknown_option_and_bad_values(engine, good):
    with pytest.raises(TypeError, match="unknown transcribe option.*beam_sise"):
        engine.transcribe(good, beam_sise=2)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        engine.transcribe(good, temperature=-0.5)
    with pytest.raises(ValueError, match=r"'fr' \(French\) is not a language of WhisperModel; it has: en \(English\)"):
        engine.transcribe(good, language="fr")
    with pytest.raises(ValueError, match="'klingon' is not an ISO 639 code, an English name or a locale"):
        engine.transcribe(good, language="klingon")
    with pytest.raises(ValueError, match="beam_size must be >= 1"):
        engine.transcribe(good, beam_size=0)


def test_one_bad_input_does_not_sink_a_batch(engine, good, tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_text("not audio")
    results = dict(engine.transcribe_iter([good, str(bad), good], return_exceptions=True, beam_size=1))
    assert sorted(results) == [0, 1, 2]
    assert isinstance(results[1], AudioDecodeError) and "not an audio file" in str(results[1])
    assert results[0].text == results[2].text and "fellow americans" in results[0].text.lower()
    # Without return_exceptions the call raises, and nothing is left running.
    with pytest.raises(AudioDecodeError):
        engine.transcribe([good, str(bad)], beam_size=1)
    assert engine.strategy.num_unfinished() == 0


def test_language_auto_means_detect_for_python_and_cli(engine, good, audio_dir):
    """``language="auto"`` (the README's spelling; the server's too) is "detect": the same text
    as no language, from Python and from ``oasr transcribe -l auto``; a real unknown code is
    still refused."""
    from oasr.cli.main import main

    assert engine.make_options(language="auto") == engine.make_options() == engine.make_options(language=" AUTO ")
    want = engine.transcribe(good, beam_size=1).text
    assert engine.transcribe(good, beam_size=1, language="auto").text == want
    with pytest.raises(ValueError, match="'klingon' is not an ISO 639 code"):
        engine.make_options(language="klingon")
    out = audio_dir / "jfk.wav"
    assert main(["transcribe", str(out), "--model", "whisper-tiny.en", "-l", "auto", "--beam-size", "1"]) in (
        0,
        None,
    )
