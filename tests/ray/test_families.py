"""The families that came last (issues 31 and 32) through Ray. ``oasr transcribe --ray``: each
one's tiny checkpoint (the surface tests' builders; the streaming variants' offline decode on a
clip short enough for their tiny checkpoints) through Ray Data writes the JSON that plain ``oasr
transcribe`` writes for the same clip. ``oasr serve --ray`` (``build_app``, what that command
deploys): a Voxtral replica answers the official ``openai`` client, plain and streamed (SSE), with
Python's text. One family stands for all there: the replica builds its engine with the server's
``build_engine`` from the directory and serves ``create_app`` unchanged (``oasr/serving/ray.py``
has no family branch), so what a family can differ in is its engine, which the transcribe cases
and the server suite cover; a speech-LLM is the one whose request path (prompt, language, token
budget, deltas of a running decode) is furthest from Whisper's."""

from __future__ import annotations

from pathlib import Path

import pytest

from oasr.cli.main import main
from tests.surfaces.test_default_decoding import CLIP, FAMILIES

from .conftest import free_port

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")]

NEW = ["wav2vec2", "sensevoice", "granite-speech5", "moonshine", "voxtral", "granite-speech"]
SHORT = "speechbrain_spk1_snt1.wav"  # 2.9 s: within the tiny Moonshine Streaming's 512 encoder positions


def _moonshine_streaming(d: Path) -> tuple[Path, list[str]]:
    from tests.models.moonshine_streaming.conftest import save_checkpoint

    d.mkdir(parents=True)
    save_checkpoint(d)
    return d, []


def _voxtral_realtime(d: Path) -> tuple[Path, list[str]]:
    from tests.models.voxtral_realtime.conftest import save_checkpoint

    d.mkdir(parents=True)
    save_checkpoint(d)
    return d, []


STREAMING = {"moonshine-streaming": _moonshine_streaming, "voxtral-realtime": _voxtral_realtime}


@pytest.mark.parametrize("family", NEW + list(STREAMING))
def test_ray_batch_writes_what_the_cli_writes(ray_cluster, family, tmp_path, audio_dir):
    clip = audio_dir / (SHORT if family in STREAMING else CLIP)
    if not clip.exists():
        pytest.skip(f"{clip.name} is not in data/audio")
    path, engine_flags = {**FAMILIES, **STREAMING}[family](tmp_path / "ckpt")
    common = ["--model", str(path), *engine_flags, "--threads", "1", "--no-progress", "-f", "json"]
    assert main(["transcribe", str(clip), "-o", str(tmp_path / "cli"), *common]) == 0
    ray_args = ["--ray", "--actors", "1", "--num-cpus-per-actor", "0.5"]
    assert main(["transcribe", *ray_args, str(clip), "-o", str(tmp_path / "ray"), *common]) == 0
    name = f"{clip.stem}.json"
    assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), family


def test_serve_ray_answers_a_speech_llm_as_python_does(ray_cluster, tmp_path, audio_dir):
    openai = pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    from ray import serve

    import oasr
    from oasr.serving.ray import build_app

    clip = audio_dir / CLIP
    if not clip.exists():
        pytest.skip(f"{CLIP} is not in data/audio")
    path, _ = FAMILIES["voxtral"](tmp_path / "voxtral")
    expected = oasr.ASREngine(str(path), device="cpu", num_threads=1).transcribe(str(clip)).text
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    app = build_app(str(path), served_model_names=("voxtral",), num_replicas=1, num_cpus=0.5, num_threads=1)
    serve.run(app, name="oasr-voxtral", route_prefix="/")
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=300)
        with open(clip, "rb") as f:
            plain = client.audio.transcriptions.create(file=f, model="voxtral")
        with open(clip, "rb") as f:
            events = list(client.audio.transcriptions.create(file=f, model="voxtral", stream=True))
    finally:
        serve.delete("oasr-voxtral")
        serve.shutdown()  # the next module starts Serve again, on a port of its own
    assert plain.text == expected and expected
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    assert events[-1].type == "transcript.text.done" and "".join(deltas) == events[-1].text == expected
    assert len(deltas) > 1  # sent as the decode runs
