"""oasr.audio.io against independent references: the manifest's durations, the stdlib
``wave`` reader, faster-whisper's PyAV/swresample decoder, and analytic signals."""

from __future__ import annotations

import io
import os
import tracemalloc
import wave
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from oasr.audio import SAMPLE_RATE, AudioDecodeError, iter_audio, load_audio

# --------------------------------------------------------------------------- helpers


def _row(manifest: list[dict], name: str) -> dict:
    return next(r for r in manifest if r["audio"] == name)


def _read_wav_int16(path: str | Path) -> tuple[np.ndarray, int]:
    """(frames, channels) int16 and the rate, read with the stdlib (no FFmpeg)."""
    with wave.open(str(path), "rb") as w:
        assert w.getsampwidth() == 2
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        return data.reshape(-1, w.getnchannels()), w.getframerate()


def _write_wav_int16(path: Path, frames: np.ndarray, rate: int) -> None:
    """Write (frames, channels) int16 with the stdlib."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(frames.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.ascontiguousarray(frames, dtype="<i2").tobytes())


def _encode(path: Path, codec: str, samples: np.ndarray, rate: int) -> None:
    """Encode float32 mono samples with PyAV; the container is chosen by the suffix."""
    try:
        av.codec.Codec(codec, "w")
    except av.error.FFmpegError:  # UnknownCodecError
        pytest.skip(f"this PyAV build has no {codec} encoder")
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(samples[None, :], format="fltp", layout="mono")
        frame.sample_rate = rate
        fmt = stream.codec_context.format.name
        resampler = av.AudioResampler(format=fmt, layout="mono", rate=rate)
        for f in [*resampler.resample(frame), *resampler.resample(None), None]:
            for packet in stream.encode(f):
                out.mux(packet)


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    n = min(a.size, b.size)
    return float(np.corrcoef(a[:n], b[:n])[0, 1])


# --------------------------------------------------------------------------- real files


def test_every_manifest_file_loads(manifest, audio_dir):
    listed = {row["audio"] for row in manifest}
    assert listed == {p.name for p in audio_dir.iterdir() if p.name != "manifest.jsonl"}
    for row in manifest:
        audio = load_audio(row["path"])
        assert audio.dtype == np.float32 and audio.ndim == 1, row["audio"]
        duration = audio.size / SAMPLE_RATE
        tolerance = max(0.01 * row["duration_s"], 0.05)
        assert abs(duration - row["duration_s"]) <= tolerance, (row["audio"], duration)
        assert np.isfinite(audio).all(), row["audio"]
        assert 0.01 < np.abs(audio).max() <= 1.5, row["audio"]  # speech, sensibly scaled


def test_16k_mono_wav_is_the_pcm_itself(manifest):
    path = _row(manifest, "jfk.wav")["path"]
    pcm, rate = _read_wav_int16(path)
    assert rate == SAMPLE_RATE and pcm.shape[1] == 1
    np.testing.assert_array_equal(load_audio(path), pcm[:, 0] / np.float32(32768.0))


def test_real_stereo_wav_is_averaged(manifest):
    path = _row(manifest, "mfa_michaelandsickmichael.wav")["path"]
    pcm, rate = _read_wav_int16(path)
    assert rate == SAMPLE_RATE and pcm.shape[1] == 2
    expected = pcm.astype(np.float64).mean(axis=1) / 32768.0
    np.testing.assert_allclose(load_audio(path), expected, rtol=0, atol=1e-7)


def test_synthetic_stereo_downmix_is_channel_mean(tmp_path):
    rng = np.random.default_rng(0)
    left = rng.integers(-20000, 20000, 16000, dtype=np.int16)
    right = (np.sin(np.arange(16000) * 0.05) * 12000).astype(np.int16)
    path = tmp_path / "stereo.wav"
    _write_wav_int16(path, np.stack([left, right], axis=1), SAMPLE_RATE)
    expected = (left.astype(np.float64) + right) / 2 / 32768.0
    np.testing.assert_allclose(load_audio(path), expected, rtol=0, atol=1e-7)


@pytest.mark.parametrize(
    "name",
    [
        "1272-128104-0004-8k.wav",  # 8 kHz
        "jfk_openai.flac",  # 44.1 kHz stereo
        "cosyvoice_zero_shot_prompt.wav",  # 24 kHz float
        "mfa_common_voice_ja_24511055.mp3",  # 32 kHz mp3
    ],
)
def test_resampling_agrees_with_faster_whisper(manifest, name):
    from faster_whisper.audio import decode_audio

    row = _row(manifest, name)
    ours = load_audio(row["path"])
    # faster-whisper resamples with libswresample and quantises to int16, so the two
    # are close but not equal: compare the waveform shape and the length.
    ref = decode_audio(row["path"], sampling_rate=SAMPLE_RATE)
    assert abs(ours.size - ref.size) <= max(1, round(row["duration_s"]))
    assert _correlation(ours, ref) > 0.99


def test_array_input_is_resampled_to_the_analytic_signal():
    rate_in, freq = 44100, 1000.0
    n_in = rate_in * 2
    tone = np.sin(2 * np.pi * freq * np.arange(n_in) / rate_in).astype(np.float32)
    out = load_audio(tone, input_sampling_rate=rate_in)
    assert abs(out.size - n_in * SAMPLE_RATE / rate_in) <= 1
    expected = np.sin(2 * np.pi * freq * np.arange(out.size) / SAMPLE_RATE)
    interior = slice(200, out.size - 200)  # the resampler's edges ramp in and out
    np.testing.assert_allclose(out[interior], expected[interior], atol=1e-3)
    # same rate in and out: the samples come back unchanged
    np.testing.assert_array_equal(load_audio(tone, rate_in, input_sampling_rate=rate_in), tone)


def test_resampler_keeps_the_band_and_rejects_aliases():
    # soxr "HQ": a 7 kHz tone (inside the 16 kHz output's band) comes through intact,
    # a 12 kHz tone (above its 8 kHz Nyquist) is filtered out rather than aliased to 4 kHz.
    rate_in = 44100
    t = np.arange(2 * rate_in) / rate_in
    interior = slice(400, -400)
    in_band = load_audio(np.sin(2 * np.pi * 7000 * t), input_sampling_rate=rate_in)
    expected = np.sin(2 * np.pi * 7000 * np.arange(in_band.size) / SAMPLE_RATE)
    np.testing.assert_allclose(in_band[interior], expected[interior], atol=2e-3)
    above = load_audio(np.sin(2 * np.pi * 12000 * t), input_sampling_rate=rate_in)
    assert np.abs(above[interior]).max() < 1e-4


def test_array_dtypes_and_layouts():
    rng = np.random.default_rng(1)
    pcm = rng.integers(-32768, 32767, (2, 8000), dtype=np.int16)
    mean = pcm.astype(np.float64).mean(axis=0) / 32768.0
    for source in (pcm, pcm.T, torch.from_numpy(pcm), torch.from_numpy(pcm.T.copy())):
        np.testing.assert_allclose(load_audio(source), mean, rtol=0, atol=1e-7)
    pcm32 = pcm[0].astype(np.int32) << 16
    np.testing.assert_array_equal(load_audio(pcm32), pcm[0] / np.float32(32768.0))
    floats = pcm[0] / np.float64(32768.0)
    np.testing.assert_allclose(load_audio(floats), floats, rtol=0, atol=1e-7)
    np.testing.assert_allclose(load_audio(torch.from_numpy(floats).to(torch.bfloat16)), floats, rtol=0, atol=4e-3)
    assert load_audio(floats[None, :]).shape == (8000,)  # (1, samples): mono


@pytest.mark.parametrize("name", ["jfk_openai.flac", "mfa_common_voice_ja_24511055.mp3"])
def test_bytes_and_file_objects_equal_the_path(manifest, name):
    path = _row(manifest, name)["path"]
    expected = load_audio(path)
    data = Path(path).read_bytes()
    for source in (data, bytearray(data), memoryview(data), io.BytesIO(data), Path(path)):
        np.testing.assert_array_equal(load_audio(source), expected)
    with open(path, "rb") as f:
        np.testing.assert_array_equal(load_audio(f), expected)


def test_iter_audio_chunks_concatenate_to_load_audio(manifest):
    path = _row(manifest, "jfk_openai.flac")["path"]
    chunks = list(iter_audio(path, chunk_s=1.0))
    assert all(c.dtype == np.float32 and c.ndim == 1 for c in chunks)
    assert {c.size for c in chunks[:-1]} == {SAMPLE_RATE} and 0 < chunks[-1].size <= SAMPLE_RATE
    np.testing.assert_array_equal(np.concatenate(chunks), load_audio(path))
    # and for an array source at another rate
    tone = np.sin(np.arange(50000) * 0.01).astype(np.float32)
    chunks = list(iter_audio(tone, chunk_s=0.25, input_sampling_rate=22050))
    assert {c.size for c in chunks[:-1]} == {4000}
    np.testing.assert_array_equal(np.concatenate(chunks), load_audio(tone, input_sampling_rate=22050))


def test_wav_with_streaming_placeholder_size_is_not_called_truncated(tmp_path, manifest):
    # Writers that stream (e.g. live capture) leave 0xFFFFFFFF in the data-chunk size.
    path = _row(manifest, "jfk.wav")["path"]
    data = bytearray(Path(path).read_bytes())
    pos = data.index(b"data")
    data[pos + 4 : pos + 8] = (0xFFFFFFFF).to_bytes(4, "little")
    (tmp_path / "streamed.wav").write_bytes(data)
    np.testing.assert_array_equal(load_audio(tmp_path / "streamed.wav"), load_audio(path))


def test_array_result_does_not_alias_the_input():
    samples = np.zeros(1000, np.float32)
    for source in (samples, torch.from_numpy(samples)):
        out = load_audio(source)
        out[0] = 1.0
        assert samples[0] == 0.0


def test_concatenated_mp3s_load_whole(tmp_path, caplog):
    # `cat a.mp3 b.mp3`: the second file's header frame is an invalid packet mid-stream,
    # which FFmpeg's CLI skips; here the two also differ in rate (44.1 vs 22.05 kHz).
    first = (0.3 * np.sin(np.arange(44100 * 2) * 0.05)).astype(np.float32)
    second = (0.3 * np.sin(np.arange(22050 * 2) * 0.2)).astype(np.float32)
    _encode(tmp_path / "a.mp3", "libmp3lame", first, 44100)
    _encode(tmp_path / "b.mp3", "libmp3lame", second, 22050)
    a, b = load_audio(tmp_path / "a.mp3"), load_audio(tmp_path / "b.mp3")
    joined = (tmp_path / "a.mp3").read_bytes() + (tmp_path / "b.mp3").read_bytes()
    with caplog.at_level("WARNING", logger="oasr.audio.io"):
        both = load_audio(joined)
    assert "skipped 1 of" in caplog.text  # the second file's header packet
    # each part keeps its encoder delay and padding (~60 ms) once joined: allow 0.1 s
    assert abs(both.size - (a.size + b.size)) <= 0.1 * SAMPLE_RATE
    assert _correlation(both[: a.size], a) > 0.99
    # the second part starts after the first's padding: find it within +-0.1 s
    tail = b[2000:-2000]
    start = both.size - b.size + 2000
    best = max(_correlation(both[start + lag : start + lag + tail.size], tail) for lag in range(-1600, 1601, 4))
    assert best > 0.99


def test_isolated_damage_is_skipped_but_garbage_is_not(manifest):
    data = bytearray(Path(_row(manifest, "jfk_openai.flac")["path"]).read_bytes())
    middle = len(data) // 2
    glitched = data.copy()
    glitched[middle : middle + 2000] = bytes(2000)  # one FLAC frame lost
    assert abs(load_audio(bytes(glitched)).size / SAMPLE_RATE - 11.0) < 0.2
    garbage = bytes(data[:8192]) + np.random.default_rng(4).bytes(len(data) - 8192)
    with pytest.raises(AudioDecodeError, match="truncated or corrupt audio"):
        load_audio(garbage)


# --------------------------------------------------------------------------- bad input


def _truncated(manifest: list[dict], name: str, tmp_path: Path) -> Path:
    data = Path(_row(manifest, name)["path"]).read_bytes()
    out = tmp_path / f"truncated_{name}"
    out.write_bytes(data[: int(len(data) * 0.6)])
    return out


def _video_only(tmp_path: Path) -> Path:
    path = tmp_path / "video.mkv"
    with av.open(str(path), "w") as out:
        stream = out.add_stream("ffv1", rate=1)
        stream.width, stream.height, stream.pix_fmt = 16, 16, "yuv420p"
        image = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), np.uint8), format="rgb24")
        for f in (image.reformat(format="yuv420p"), None):
            for packet in stream.encode(f):
                out.mux(packet)
    return path


def _mp3_with_info_header(tmp_path: Path) -> Path:
    tone = (0.3 * np.sin(np.arange(44100 * 6) * 0.06)).astype(np.float32)
    full = tmp_path / "tone.mp3"
    _encode(full, "libmp3lame", tone, 44100)  # FFmpeg's muxer writes a Xing/Info header
    data = full.read_bytes()
    out = tmp_path / "truncated_tone.mp3"
    out.write_bytes(data[: int(len(data) * 0.6)])
    return out


def _empty_wav(tmp_path: Path) -> Path:
    path = tmp_path / "no_frames.wav"
    _write_wav_int16(path, np.zeros((0, 1), np.int16), SAMPLE_RATE)
    return path


@pytest.mark.parametrize(
    ("case", "phrase"),
    [
        ("empty_file", r"empty file: .*empty\.wav \(0 bytes\)"),
        ("empty_bytes", "empty input"),
        ("empty_file_object", "empty input"),
        ("truncated_flac", r"truncated or corrupt audio: .*decoded \d+\.\d s before error"),
        ("truncated_wav", "truncated or corrupt audio: .*declares 11.00 s but only 6.60 s"),
        ("truncated_mp3_with_info_header", "truncated or corrupt audio"),
        ("random_bytes", r"not an audio file \(unrecognised or corrupt data\)"),
        ("text_renamed_wav", r"not an audio file .*notes\.wav"),
        ("video_only", r"not an audio file \(no audio stream; streams: video\)"),
        ("wav_without_frames", "empty audio: 0 samples decoded"),
        ("empty_array", "empty audio: 0 samples"),
        ("nan_samples", "audio contains NaN or infinite samples"),
        ("inf_samples", "audio contains NaN or infinite samples"),
        ("ambiguous_2d", r"ambiguous 2-D audio shape \(4, 4\)"),
        ("too_many_channels", r"ambiguous 2-D audio shape \(16, 16000\)"),
        ("uint8_array", "unsupported sample dtype uint8"),
        ("too_long_declared", r"audio is 86\.2 s, longer than max_duration_s=60"),
        ("too_long_while_decoding", r"audio is longer than max_duration_s=3 \(stopped decoding"),
        ("too_long_array", r"audio is 2\.0 s, longer than max_duration_s=1"),
    ],
)
def test_bad_input_raises_audio_decode_error(case, phrase, manifest, tmp_path):
    rng = np.random.default_rng(2)
    kwargs: dict = {}
    if case == "empty_file":
        source = tmp_path / "empty.wav"
        source.write_bytes(b"")
    elif case == "empty_bytes":
        source = b""
    elif case == "empty_file_object":
        source = io.BytesIO()
    elif case == "truncated_flac":
        source = _truncated(manifest, "jfk_openai.flac", tmp_path)
    elif case == "truncated_wav":
        source = _truncated(manifest, "jfk.wav", tmp_path)
    elif case == "truncated_mp3_with_info_header":
        source = _mp3_with_info_header(tmp_path)
    elif case == "random_bytes":
        source = rng.integers(0, 256, 20000, dtype=np.uint8).tobytes()
    elif case == "text_renamed_wav":
        source = tmp_path / "notes.wav"
        source.write_text("These are meeting notes, not audio.\n" * 50)
    elif case == "video_only":
        source = _video_only(tmp_path)
    elif case == "wav_without_frames":
        source = _empty_wav(tmp_path)
    elif case == "empty_array":
        source = np.zeros(0, np.float32)
    elif case == "nan_samples":
        source = np.array([0.0, 0.5, np.nan, 0.1], np.float32)
    elif case == "inf_samples":
        source = torch.tensor([0.0, float("inf")])
    elif case == "ambiguous_2d":
        source = np.zeros((4, 4), np.float32)
    elif case == "too_many_channels":
        source = np.zeros((16, 16000), np.float32)
    elif case == "uint8_array":
        source = np.full(1000, 128, np.uint8)
    elif case == "too_long_declared":
        source = _row(manifest, "moonshine_a_tale_of_two_cities.wav")["path"]
        kwargs = {"max_duration_s": 60}
    elif case == "too_long_while_decoding":
        # An MP3 without a Xing header only has a bitrate estimate: caught while decoding.
        source = _row(manifest, "mfa_common_voice_ja_24511055.mp3")["path"]
        kwargs = {"max_duration_s": 3}
    elif case == "too_long_array":
        source = np.zeros(32000, np.float32)
        kwargs = {"max_duration_s": 1}
    else:
        raise AssertionError(case)

    with pytest.raises(AudioDecodeError, match=phrase) as info:
        load_audio(source, **kwargs)
    assert isinstance(info.value, ValueError)


def _float_wav(samples: np.ndarray, dtype: str = "<f4", rate: int = SAMPLE_RATE) -> bytes:
    """A mono IEEE-float WAV (format tag 3) of ``samples`` stored as ``dtype`` (<f4 / <f8)."""
    import struct

    data = np.asarray(samples, dtype=dtype).tobytes()
    width = np.dtype(dtype).itemsize
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * width, width, 8 * width)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _speech_2s(manifest) -> np.ndarray:
    return load_audio(_row(manifest, "jfk.wav")["path"])[: 2 * SAMPLE_RATE]


@pytest.mark.parametrize("container", ["float32_array", "float64_array", "tensor", "float32_wav", "float64_wav"])
@pytest.mark.parametrize(
    ("case", "peak"),
    [
        ("constant_1e19", r"1e\+19"),
        ("constant_1e30", r"1e\+30"),
        ("float32_max", r"3\.40282e\+38"),
        ("speech_with_one_1e19_sample", r"1e\+19"),
        ("int16_speech_as_floats", r"\d{3,5}"),  # a WAV is checked frame by frame
        ("just_past_the_bound", r"100\.01"),
    ],
)
def test_float_samples_far_outside_full_scale_are_refused(container, case, peak, manifest):
    """The samples that gave NaN features (and a 500 after 40 s on the server) are refused by the
    decoder, naming the peak, whatever carries them; a float64 1e300 is too large, not "inf"."""
    speech = _speech_2s(manifest)
    x = {
        "constant_1e19": np.full(8000, 1e19),
        "constant_1e30": np.full(8000, 1e30),
        "float32_max": np.full(8000, np.finfo(np.float32).max),
        "speech_with_one_1e19_sample": np.where(np.arange(speech.size) == 5000, 1e19, speech),
        "int16_speech_as_floats": np.round(speech.astype(np.float64) * 32767),
        "just_past_the_bound": np.where(np.arange(speech.size) == 5000, 100.01, speech),
    }[case]
    source = {
        "float32_array": lambda: x.astype(np.float32),
        "float64_array": lambda: x.astype(np.float64),
        "tensor": lambda: torch.from_numpy(x.astype(np.float32)),
        "float32_wav": lambda: _float_wav(x, "<f4"),
        "float64_wav": lambda: _float_wav(x, "<f8"),
    }[container]()
    with pytest.raises(AudioDecodeError, match=rf"audio samples reach {peak}, far outside the \[-1, 1\]"):
        load_audio(source)
    if container == "float64_array":
        with pytest.raises(AudioDecodeError, match=r"reach 1e\+300"):
            load_audio(np.full(100, 1e300))


@pytest.mark.parametrize("container", ["array", "float32_wav"])
@pytest.mark.parametrize("case", ["all_zero", "denormals", "dc_offset", "speech_past_full_scale", "peak_at_the_bound"])
def test_odd_but_valid_float_samples_decode_as_they_are(container, case, manifest):
    """Silence, denormals, a DC offset and a float mix past full scale (up to the 100 bound) are
    audio: decoded unchanged (a 16-kHz float WAV is its samples), never clipped or refused."""
    speech = _speech_2s(manifest)
    x = {
        "all_zero": np.zeros(8000),
        "denormals": np.full(8000, 1e-40),
        "dc_offset": speech + 0.5,
        "speech_past_full_scale": speech * (1.6 / np.abs(speech).max()),
        "peak_at_the_bound": speech * (100.0 / np.abs(speech).max()),
    }[case].astype(np.float32)
    got = load_audio(x if container == "array" else _float_wav(x))
    assert got.dtype == np.float32 and np.array_equal(got, x)


def test_integer_pcm_at_full_scale_is_never_refused(tmp_path):
    frames = np.where(np.arange(16000) % 2 == 0, 32767, -32768).astype(np.int16)
    _write_wav_int16(tmp_path / "full.wav", frames[:, None], SAMPLE_RATE)
    assert np.abs(load_audio(tmp_path / "full.wav")).max() == 1.0
    assert np.abs(load_audio(frames)).max() == 1.0


def test_decode_errors_keep_their_cause(manifest, tmp_path):
    with pytest.raises(AudioDecodeError) as info:
        load_audio(_truncated(manifest, "jfk_openai.flac", tmp_path))
    assert isinstance(info.value.__cause__, av.error.FFmpegError)


def test_argument_errors_are_not_decode_errors(manifest):
    path = _row(manifest, "jfk.wav")["path"]
    with pytest.raises(ValueError, match="input_sampling_rate applies only to array"):
        load_audio(path, input_sampling_rate=8000)
    with pytest.raises(ValueError, match="sampling_rate must be a positive integer"):
        load_audio(path, 0)
    with pytest.raises(TypeError, match="audio source must be"):
        load_audio(12345)
    with pytest.raises(FileNotFoundError):
        load_audio("/nonexistent/clip.wav")


# --------------------------------------------------------------------------- long input


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


@pytest.mark.slow
def test_hour_long_file_streams_in_bounded_memory(tmp_path):
    rate, seconds = 48000, 3600
    # One second of a stereo tone/noise block, written 3600 times: a 690 MB WAV whose
    # full decode at the source rate would be 3600 * 48000 * 2 * 4 B = 1.38 GB of float32.
    t = np.arange(rate) / rate
    rng = np.random.default_rng(3)
    block = np.stack([np.sin(2 * np.pi * 440 * t) * 8000, rng.normal(0, 3000, rate)], axis=1).astype("<i2")
    path = tmp_path / "hour.wav"
    try:
        with wave.open(str(path), "wb") as w:
            w.setnchannels(2)
            w.setsampwidth(2)
            w.setframerate(rate)
            raw = block.tobytes()
            for _ in range(seconds):
                w.writeframesraw(raw)

        rss_before, rss_peak = _rss_bytes(), 0
        tracemalloc.start()
        try:
            n_out = 0
            for chunk in iter_audio(path, chunk_s=30.0):
                n_out += chunk.size
                rss_peak = max(rss_peak, _rss_bytes() or 0)
            _, traced_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        path.unlink(missing_ok=True)

    assert abs(n_out - seconds * SAMPLE_RATE) <= 1
    assert traced_peak < 100e6, f"peak traced memory {traced_peak / 1e6:.1f} MB"
    if rss_before is not None:
        assert rss_peak - rss_before < 100e6, f"RSS grew {(rss_peak - rss_before) / 1e6:.0f} MB"
