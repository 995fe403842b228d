"""oasr.audio.stream: windows of the streamed / spooled feature matrix against
``log_mel_spectrogram(load_audio(src), n_mels, padding=160)`` of the fully decoded audio,
spool-file lifetime, and bounded memory on an hour-long file."""

from __future__ import annotations

import gc
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from oasr.audio import (
    AudioDecodeError,
    FeatureSource,
    InMemoryMel,
    SpooledMel,
    features_from,
    load_audio,
    log_mel_spectrogram,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

# 116821 samples: not a multiple of the 160-sample hop, so chunk boundaries fall inside
# frames (7.3 s itself would be exactly 730 hops).
CHUNK_S = 7.3013

CLIPS = [
    "moonshine_a_tale_of_two_cities.wav",  # 86 s, 16 kHz: 12 chunks
    "1272-128104-0004-8k.wav",  # 8 kHz wav, resampled
    "mfa_13697_11991_000000.opus",  # 48 kHz opus in ogg
    "mfa_common_voice_ja_24511055.mp3",  # 32 kHz mp3, 6.5 s: shorter than one chunk
    "jfk_openai.flac",  # 44.1 kHz stereo flac
]


def _reference(audio: np.ndarray, n_mels: int) -> torch.Tensor:
    return log_mel_spectrogram(audio, n_mels, padding=160)


def _window_starts(n_frames: int) -> list[int]:
    starts = {0, 1, 1234, 2999, 3000, n_frames // 2 + 7, n_frames - 3000, n_frames - 1500}
    starts |= {n_frames - 161, n_frames - 2, n_frames - 1, n_frames, n_frames + 10}
    return sorted(s for s in starts if s >= 0)


def _assert_windows_equal(src: FeatureSource, ref: torch.Tensor) -> None:
    n_mels, n_frames = ref.shape
    assert src.n_mels == n_mels and src.n_frames == n_frames
    whole = src.window(0, n_frames + 5000)
    assert whole.dtype == torch.float32 and whole.device.type == "cpu"
    assert torch.equal(whole, ref), f"max abs diff {(whole - ref).abs().max().item():.3g}"
    for start in _window_starts(n_frames):
        for size in (3000, 1, 17):
            got = src.window(start, size)
            want = ref[:, start : start + size]
            assert got.shape == (n_mels, max(0, min(size, n_frames - start))), (start, size)
            assert torch.equal(got, want), (start, size, (got - want).abs().max().item())


def _spool_files(directory: Path) -> list[str]:
    return sorted(p.name for p in Path(directory).iterdir())


@pytest.fixture(scope="module")
def paths(manifest) -> dict[str, str]:
    return {row["audio"]: row["path"] for row in manifest}


@pytest.fixture(scope="module")
def decoded(paths) -> dict[str, np.ndarray]:
    return {name: load_audio(paths[name]) for name in CLIPS}


@pytest.fixture(scope="module")
def speech(paths) -> np.ndarray:
    return load_audio(paths["jfk.wav"])


@pytest.fixture
def spool_dir(tmp_path) -> Path:
    d = tmp_path / "spool"
    d.mkdir()
    return d


# --------------------------------------------------------------------------- real clips


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("name", CLIPS)
def test_spooled_windows_equal_the_full_matrix(paths, decoded, spool_dir, name, n_mels):
    audio = decoded[name]
    ref = _reference(audio, n_mels)
    assert ref.shape[1] == audio.size // 160 + 1
    with SpooledMel.from_source(paths[name], n_mels, spool_dir=spool_dir, chunk_s=CHUNK_S) as src:
        assert src.duration == audio.size / 16000
        assert _spool_files(spool_dir) == [Path(src.path).name]
        assert os.path.getsize(src.path) == ref.shape[1] * n_mels * 4
        _assert_windows_equal(src, ref)
    assert _spool_files(spool_dir) == []


def test_default_chunk_and_every_input_kind(paths, decoded, spool_dir):
    name = "moonshine_a_tale_of_two_cities.wav"
    ref = _reference(decoded[name], 80)
    data = Path(paths[name]).read_bytes()
    sources = [paths[name], Path(paths[name]), data, io.BytesIO(data)]
    for source in sources:
        with SpooledMel.from_source(source, 80, spool_dir=spool_dir) as src:
            _assert_windows_equal(src, ref)
    # an array, and an array at another rate, resampled the way load_audio resamples it
    audio = decoded["1272-128104-0004-8k.wav"]
    with SpooledMel.from_source(audio, 80, spool_dir=spool_dir, chunk_s=3.1) as src:
        _assert_windows_equal(src, _reference(audio, 80))
    audio_8k = audio[::2].copy()
    with SpooledMel.from_source(audio_8k, 80, spool_dir=spool_dir, input_sampling_rate=8000, chunk_s=3.1) as src:
        _assert_windows_equal(src, _reference(load_audio(audio_8k, input_sampling_rate=8000), 80))


# --------------------------------------------------------------------------- edge lengths


@pytest.mark.parametrize(
    "n_samples",
    [
        41,  # the shortest the reference accepts: 41 + 160 > n_fft / 2
        199,
        200,
        201,
        800,  # 0.05 s, shorter than n_fft after the padding
        1600,  # 0.1 s: 11 frames, where the reference's GEMM takes its narrow kernel
        1919,
        1920,
        10080,  # 63 frames
        16000 * 3,  # a multiple of 160
        16000 * 3 + 1,
        16000 * 3 + 159,
    ],
)
@pytest.mark.parametrize("chunk", [1, 97, 1000, 16000])
def test_short_and_odd_lengths(speech, spool_dir, n_samples, chunk):
    audio = speech[8000 : 8000 + n_samples]
    if chunk == 1 and n_samples > 2000:
        pytest.skip("one-sample chunks only on the short lengths")
    ref = _reference(audio, 80)
    with SpooledMel.from_source(audio, 80, spool_dir=spool_dir, chunk_s=chunk / 16000) as src:
        assert src.n_frames == n_samples // 160 + 1
        assert src.duration == n_samples / 16000
        _assert_windows_equal(src, ref)


@pytest.mark.parametrize("tail", [1, 39, 40, 41, 159, 160, 161, 199, 200, 201, 399, 400, 401, 10239, 10241])
def test_tiny_final_chunk(speech, spool_dir, tail):
    """Chunks of 7.3013 s then a last chunk of ``tail`` samples: the right reflection and
    the short last batch of frames depend on samples of the previous chunk."""
    chunk = round(CHUNK_S * 16000)
    audio = np.concatenate([speech, speech])[: 2 * chunk + tail]
    ref = _reference(audio, 128)
    with SpooledMel.from_source(audio, 128, spool_dir=spool_dir, chunk_s=CHUNK_S) as src:
        _assert_windows_equal(src, ref)


def test_near_silence_and_silence(speech, spool_dir):
    """Where the 1e-10 floor and the max - 8 clamp decide most values."""
    for audio in (speech[:50000] * np.float32(1e-4), np.zeros(33333, np.float32)):
        with SpooledMel.from_source(audio, 80, spool_dir=spool_dir, chunk_s=0.77) as src:
            _assert_windows_equal(src, _reference(audio, 80))


def test_too_short_raises_like_the_reference(speech, spool_dir):
    audio = speech[:40]
    with pytest.raises(ValueError, match="too short"):
        _reference(audio, 80)
    with pytest.raises(ValueError, match="too short"):
        SpooledMel.from_source(audio, 80, spool_dir=spool_dir)
    assert _spool_files(spool_dir) == []


# --------------------------------------------------------------------------- features_from


def test_features_from_storage_does_not_change_values(paths, decoded, spool_dir):
    name = "moonshine_a_tale_of_two_cities.wav"
    ref = _reference(decoded[name], 80)
    kept = features_from(paths[name], 80, spool_dir=spool_dir)  # 86 s <= 600 s
    spilled = features_from(paths[name], 80, in_memory_limit_s=40.0, spool_dir=spool_dir, chunk_s=CHUNK_S)
    always = features_from(paths[name], 80, in_memory_limit_s=0, spool_dir=spool_dir)
    assert isinstance(kept, InMemoryMel)
    assert isinstance(spilled, SpooledMel) and isinstance(always, SpooledMel)
    assert len(_spool_files(spool_dir)) == 2
    for src in (kept, spilled, always):
        assert src.duration == decoded[name].size / 16000
        _assert_windows_equal(src, ref)
        src.close()
    assert _spool_files(spool_dir) == []


def test_features_from_limit_is_the_duration(speech, spool_dir, tmp_path):
    path = tmp_path / "speech.wav"
    _write_wav(path, speech)
    duration = speech.size / 16000
    assert isinstance(features_from(path, 80, in_memory_limit_s=duration, spool_dir=spool_dir), InMemoryMel)
    over = features_from(path, 80, in_memory_limit_s=duration - 0.02, spool_dir=spool_dir)
    assert isinstance(over, SpooledMel)
    over.close()
    assert isinstance(features_from(path, 80, in_memory_limit_s=None), InMemoryMel)


def test_features_from_arrays(decoded, spool_dir):
    audio = decoded["moonshine_a_tale_of_two_cities.wav"]
    ref = _reference(audio, 128)
    for source in (audio, torch.from_numpy(audio)):
        src = features_from(source, 128, in_memory_limit_s=0, spool_dir=spool_dir)
        assert isinstance(src, InMemoryMel) and src.duration == audio.size / 16000
        _assert_windows_equal(src, ref)
    assert _spool_files(spool_dir) == []
    # another input rate: the same resampling as load_audio
    audio_8k = decoded["1272-128104-0004-8k.wav"][::2].copy()
    src = features_from(audio_8k, 80, input_sampling_rate=8000)
    _assert_windows_equal(src, _reference(load_audio(audio_8k, input_sampling_rate=8000), 80))


def test_in_memory_from_waveform(decoded):
    audio = decoded["mfa_common_voice_ja_24511055.mp3"]
    src = InMemoryMel.from_waveform(audio, 80)
    assert src.duration == audio.size / 16000
    _assert_windows_equal(src, _reference(audio, 80))
    w = src.window(0, 10)
    w.zero_()  # windows are copies
    assert torch.equal(src.window(0, 10), _reference(audio, 80)[:, :10])


# --------------------------------------------------------------------------- API


def test_window_arguments_and_close(speech, spool_dir):
    for src in (
        SpooledMel.from_source(speech, 80, spool_dir=spool_dir),
        InMemoryMel.from_waveform(speech, 80),
    ):
        assert src.window(src.n_frames, 3000).shape == (80, 0)
        assert src.window(src.n_frames + 100, 3000).shape == (80, 0)
        assert src.window(5, 0).shape == (80, 0)
        with pytest.raises(ValueError):
            src.window(-1, 10)
        with pytest.raises(ValueError):
            src.window(0, -1)
        src.close()
        src.close()  # idempotent
        with pytest.raises(ValueError, match="closed"):
            src.window(0, 10)
    assert _spool_files(spool_dir) == []


# --------------------------------------------------------------------------- spool lifetime


def test_spool_removed_on_close_and_exit_of_with(speech, spool_dir):
    src = SpooledMel.from_source(speech, 80, spool_dir=spool_dir)
    path = src.path
    assert os.path.exists(path) and Path(path).parent == spool_dir
    src.close()
    assert not os.path.exists(path) and src.path is None
    with SpooledMel.from_source(speech, 80, spool_dir=spool_dir) as src:
        assert len(_spool_files(spool_dir)) == 1
    assert _spool_files(spool_dir) == []


def test_spool_removed_on_garbage_collection(speech, spool_dir):
    src = SpooledMel.from_source(speech, 80, spool_dir=spool_dir)
    path = src.path
    assert os.path.exists(path)
    del src
    gc.collect()
    assert not os.path.exists(path)
    assert _spool_files(spool_dir) == []


def test_spool_removed_at_interpreter_exit(paths, spool_dir):
    script = textwrap.dedent(
        f"""
        import sys
        from oasr.audio import SpooledMel
        src = SpooledMel.from_source({paths["jfk.wav"]!r}, 80, spool_dir={str(spool_dir)!r})
        print(src.path)
        sys.stdout.flush()
        _keep = [src]  # alive until the interpreter exits
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=REPO_ROOT, timeout=120
    )
    assert out.stdout.strip().startswith(str(spool_dir))
    assert _spool_files(spool_dir) == []


@pytest.mark.parametrize("name", ["1272-141231-0002.flac", "jfk_openai.flac"])
def test_spool_removed_when_decoding_fails_midway(paths, spool_dir, tmp_path, monkeypatch, name):
    data = Path(paths[name]).read_bytes()
    cut = tmp_path / f"cut-{name}"
    cut.write_bytes(data[: int(len(data) * 0.6)])
    created: list[str] = []
    real_mkstemp = tempfile.mkstemp

    def spy(*args, **kwargs):
        fd, path = real_mkstemp(*args, **kwargs)
        created.append(path)
        return fd, path

    monkeypatch.setattr(tempfile, "mkstemp", spy)
    # excinfo keeps the traceback, and with it the builder's frame, alive: the file must
    # be removed explicitly, not merely when the partial spool is garbage-collected.
    with pytest.raises(AudioDecodeError, match="truncated or corrupt") as excinfo:
        SpooledMel.from_source(cut, 80, spool_dir=spool_dir, chunk_s=1.0)
    assert len(created) == 1, "the spool file should have been started before the error"
    assert _spool_files(spool_dir) == []
    with pytest.raises(AudioDecodeError, match="truncated or corrupt") as excinfo2:
        features_from(cut, 80, in_memory_limit_s=2.0, spool_dir=spool_dir, chunk_s=1.0)
    assert len(created) == 2
    assert _spool_files(spool_dir) == []
    assert excinfo.type is excinfo2.type is AudioDecodeError


def test_decode_errors_propagate_unchanged(paths, spool_dir):
    with pytest.raises(AudioDecodeError, match="max_duration_s"):
        SpooledMel.from_source(paths["moonshine_a_tale_of_two_cities.wav"], 80, spool_dir=spool_dir, max_duration_s=30)
    with pytest.raises(AudioDecodeError, match="not an audio file"):
        SpooledMel.from_source(b"this is not audio at all" * 100, 80, spool_dir=spool_dir)
    with pytest.raises(FileNotFoundError):
        features_from(spool_dir / "missing.wav", 80, spool_dir=spool_dir)
    assert _spool_files(spool_dir) == []


# --------------------------------------------------------------------------- one hour


def _write_wav(path: Path, audio: np.ndarray) -> None:
    pcm = np.clip(np.round(audio * 32768.0), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())


_HOUR_SCRIPT = """
import json, resource, sys, tracemalloc
import numpy as np
from oasr.audio import SpooledMel

path, warmup, spool_dir, out_npz, starts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
SpooledMel.from_source(warmup, 80, spool_dir=spool_dir).close()  # kernels, allocator arenas
base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
src = SpooledMel.from_source(path, 80, spool_dir=spool_dir)
traced = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_kb
windows = {s: src.window(int(s), 3000).numpy() for s in starts.split(",")}
np.savez(out_npz, **windows)
print(json.dumps({"rss_growth": grown_kb * 1024, "traced_peak": traced, "n_frames": src.n_frames,
                  "duration": src.duration, "spool_bytes": __import__("os").path.getsize(src.path)}))
src.close()
"""


@pytest.mark.slow
def test_one_hour_file_bounded_memory(paths, tmp_path):
    """A 1-hour 16 kHz WAV made of a repeating period: a real 86-s clip then 1 s of a
    loud 1 kHz tone. The tone's frames are the loudest anywhere, and identical in every
    period (1 kHz is 10 cycles per hop, the period is a whole number of hops), so any
    stretch of the file that holds a whole tone burst has the recording's global max:
    ``log_mel_spectrogram`` of such a stretch (with 200+ samples of true context around
    the frames compared) gives exactly the whole recording's values there."""
    rate, n = 16000, 3600 * 16000
    clip = load_audio(paths["moonshine_a_tale_of_two_cities.wav"])  # 16-bit PCM / 32768
    clip = clip[: clip.size // 160 * 160]
    tone = (0.5 * np.sin(np.pi * np.arange(rate) / 8)).astype(np.float32)
    tone = np.round(tone * 32768) / np.float32(32768)
    period = np.concatenate([clip, tone])
    p, s_len = period.size, clip.size
    assert p % 160 == 0 and 1600 < n % p < s_len - 1600  # the file ends inside speech

    path = tmp_path / "hour.wav"
    pcm = np.round(period * 32768).astype("<i2").tobytes()
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        for _ in range(n // p):
            w.writeframes(pcm)
        w.writeframes(pcm[: 2 * (n % p)])

    def audio(a: int, b: int) -> np.ndarray:
        return period[np.arange(a, b) % p]

    n_frames = n // 160 + 1
    starts = [0, 4321, 200_017, 359_000 - 1500, n_frames - 3000, n_frames - 1234, n_frames - 1]
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    out_npz = tmp_path / "windows.npz"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _HOUR_SCRIPT,
            str(path),
            paths["jfk.wav"],
            str(spool_dir),
            str(out_npz),
            ",".join(map(str, starts)),
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    print(stats)
    assert stats["n_frames"] == n_frames and stats["duration"] == 3600.0
    assert stats["spool_bytes"] == n_frames * 80 * 4  # 115 MB on disk
    full_mel_bytes, audio_bytes = n_frames * 80 * 4, n * 4
    assert stats["rss_growth"] < 40e6 < full_mel_bytes < audio_bytes
    assert stats["traced_peak"] < 40e6
    assert _spool_files(spool_dir) == []

    windows = np.load(out_npz)
    for start in starts:
        got = torch.from_numpy(windows[str(start)])
        stop = min(start + 3000, n_frames)
        # A stretch [a, b) starting and ending 0.1 s into a period's speech, at least a
        # whole period before and after the window, clipped to the file.
        a = max(0, ((start * 160 - 200 - p) // p) * p + 1600)
        b = (-(-(stop * 160 + 200) // p) + 1) * p + 1600
        if b >= n:  # to the end of the file: the reference's own end padding applies
            ref = log_mel_spectrogram(audio(a, n), 80, padding=160)
        else:
            ref = log_mel_spectrogram(audio(a, b), 80)
        want = ref[:, start - a // 160 : stop - a // 160]
        assert got.shape == want.shape == (80, stop - start), start
        assert torch.equal(got, want), (start, (got - want).abs().max().item())
