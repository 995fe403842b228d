"""Audio far outside [-1, 1], or whose features are not finite, is refused before any decode
work, alike for every family and through every surface; audio that is only odd (silence,
denormals, a DC offset, a float mix past full scale) decodes.

One table of waveforms (``CASES``) goes through Python (``ASREngine.transcribe`` of the
array and of a 32-bit float WAV), ``oasr transcribe`` (the WAV file) and ``oasr serve``
(the WAV uploaded to ``/v1/audio/transcriptions``) for each family's tiny random checkpoint
(``FAMILIES`` of ``test_default_decoding``; Whisper's is the real tiny.en, which stops on
silence where a random decoder runs to its token limit). A refused input is an ``AudioDecodeError``
(ValueError) / a CLI error line and exit status 1 (a bad input file, as for every other
undecodable file) / HTTP 400 ``invalid_audio``, whose message names the problem; the
server has not run a single step for it (no quarantine, no encoder pass). Before this was
fixed, 1e19-1e30 samples gave NaN log-mel features, the batch failed, was decoded again in
quarantine and the client got 500 after ~40 s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from oasr.audio import AudioDecodeError, load_audio
from tests.server.conftest import float_wav
from tests.surfaces.test_default_decoding import FAMILIES

pytest.importorskip("fastapi")
pytestmark = pytest.mark.slow  # ten families' checkpoints, each through three surfaces

F32_MAX = float(np.finfo(np.float32).max)
N = 32000  # 2 s at 16 kHz
FAR_OUTSIDE = "far outside the \\[-1, 1\\] of float audio"


def _with(x: np.ndarray, at: int, value: float) -> np.ndarray:
    x = x.copy()
    x[at] = value
    return x


def _peak(x: np.ndarray, peak: float) -> np.ndarray:
    return (x * (peak / np.abs(x).max())).astype(np.float32)


# name -> (waveform from 2 s of real speech, the refusal's message pattern or None: it decodes)
CASES: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str | None]] = {
    "1e19": (lambda s: np.full(N, 1e19, np.float32), FAR_OUTSIDE),
    "1e30": (lambda s: np.full(N, 1e30, np.float32), FAR_OUTSIDE),
    "float32_max": (lambda s: np.full(N, F32_MAX, np.float32), FAR_OUTSIDE),
    "noise_at_1e19": (lambda s: (np.random.default_rng(0).standard_normal(N) * 1e19).astype(np.float32), FAR_OUTSIDE),
    "speech_with_one_1e19_sample": (lambda s: _with(s, N // 2, 1e19), FAR_OUTSIDE),
    "speech_with_one_float32_max_sample": (lambda s: _with(s, N // 2, -F32_MAX), FAR_OUTSIDE),
    "int16_speech_as_floats": (lambda s: np.round(s * 32767).astype(np.float32), FAR_OUTSIDE),
    "speech_peaking_at_101": (lambda s: _peak(s, 101.0), FAR_OUTSIDE),
    "all_zero": (lambda s: np.zeros(N, np.float32), None),
    "denormals": (lambda s: np.full(N, 1e-40, np.float32), None),
    "speech_in_denormals": (lambda s: (s * np.float32(1e-39)).astype(np.float32), None),
    "dc_offset": (lambda s: np.full(N, 0.5, np.float32), None),
    "speech_on_a_dc_offset": (lambda s: (s + np.float32(0.4)).astype(np.float32), None),
    "speech_past_full_scale": (lambda s: _peak(s, 1.6), None),  # a float mix's overs
    "speech_peaking_at_100": (lambda s: _peak(s, 100.0), None),  # the bound itself
}
REFUSED = [name for name, (_, message) in CASES.items() if message is not None]


@pytest.fixture(scope="module")
def speech(audio_dir) -> np.ndarray:
    return load_audio(audio_dir / "jfk.wav")[:N]


@pytest.fixture(scope="module")
def waves(speech) -> dict[str, np.ndarray]:
    out = {name: make(speech) for name, (make, _) in CASES.items()}
    assert all(x.dtype == np.float32 and x.shape == (N,) for x in out.values())
    return out


@pytest.fixture(scope="module")
def wav_files(waves, tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad_audio")
    out = {}
    for name, x in waves.items():
        out[name] = d / f"{name}.wav"
        out[name].write_bytes(float_wav(x))
    return out


def _tiny_en(d: Path) -> tuple[Path, list[str]]:
    from oasr.models.bundled import bundled_path

    path = bundled_path("whisper-tiny.en")
    if path is None:
        pytest.skip("tiny.en weights not installed")
    return Path(path), []


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory) -> tuple[str, Path, list[str]]:
    name = request.param
    build = _tiny_en if name == "whisper" else FAMILIES[name]
    path, flags = build(tmp_path_factory.mktemp(name))
    return name, path, flags


def _engine_kwargs(flags: list[str]) -> dict[str, str]:
    return dict(zip([f.lstrip("-").replace("-", "_") for f in flags[::2]], flags[1::2], strict=True))


def test_python(family, waves, wav_files):
    import oasr

    _, path, flags = family
    engine = oasr.ASREngine(str(path), device="cpu", **_engine_kwargs(flags))
    for name, (_, message) in CASES.items():
        if message is None:
            assert isinstance(engine.transcribe(waves[name]).text, str), name
            continue
        for source in (waves[name], str(wav_files[name])):
            with pytest.raises(AudioDecodeError, match=message):
                engine.transcribe(source)
    assert engine.strategy.num_unfinished() == 0


def test_cli(family, wav_files, capsys):
    from oasr.cli.main import main

    _, path, flags = family
    refused = [str(wav_files[name]) for name in REFUSED]
    decoded = str(wav_files["speech_peaking_at_100"])
    capsys.readouterr()
    code = main(["transcribe", *refused, decoded, "--model", str(path), "--device", "cpu", *flags, "--no-progress"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    lines = captured.err.splitlines()
    for file in refused:
        (line,) = [x for x in lines if x.startswith(f"oasr transcribe: {file}: ")]
        assert "far outside the [-1, 1] of float audio" in line, line
    # the decoded file is not refused (a tiny random LLM may still run to its budget: that warning is fine)
    assert not any(
        x.startswith(f"oasr transcribe: {decoded}: ") and "finish_reason 'length'" not in x for x in lines
    ), captured.err
    assert f"{len(refused)} of {len(refused) + 1} inputs failed" in captured.err


def test_http(family, wav_files):
    from fastapi.testclient import TestClient

    from oasr.cli.main import build_parser
    from oasr.cli.serve import settings_from_args
    from oasr.server.app import build_engine, create_app

    _, path, flags = family
    settings = settings_from_args(build_parser().parse_args(["serve", "--model", str(path), "--device", "cpu", *flags]))
    engine = build_engine(settings)
    try:
        with TestClient(create_app(settings, engine)) as client:

            def post(name: str):
                files = {"file": (f"{name}.wav", wav_files[name].read_bytes(), "audio/wav")}
                return client.post("/v1/audio/transcriptions", data={"model": settings.model_names[0]}, files=files)

            for name in REFUSED:
                r = post(name)
                assert r.status_code == 400, (name, r.status_code, r.text)
                err = r.json()["error"]
                assert (err["param"], err["code"]) == ("file", "invalid_audio"), err
                assert "far outside the [-1, 1] of float audio" in err["message"], err
            stats = engine.stats()
            # Refused while preparing: no step ran, nothing was decoded again in quarantine.
            assert (stats.steps, stats.quarantined, stats.finished) == (0, 0, 0), stats
            for name, (_, message) in CASES.items():
                if message is None:
                    r = post(name)
                    assert r.status_code == 200, (name, r.text)
    finally:
        engine.shutdown()
