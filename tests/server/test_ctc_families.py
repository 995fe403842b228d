"""The three CTC families behind ``oasr serve``: WeNet U2++ (CTC and attention
rescoring, the shared fixture), Parakeet CTC and LASR (tiny random checkpoints in
their Hugging Face layouts), each through the official ``openai`` client and
compared with the in-process engine at the server's decoding defaults."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FIXTURES_DIR
from tests.server.conftest import ServerProcess

pytest.importorskip("transformers")

WENET_DIR = FIXTURES_DIR / "wenet-u2pp-tiny"
CLIP = "sense_and_sensibility_01_austen_64kb-0870.wav"


def _serve(tmp_path_factory, name: str, *extra: str) -> ServerProcess:
    log = tmp_path_factory.mktemp("server") / f"{name}.log"
    return ServerProcess(["--served-model-name", name, *extra], log)


def _check_server(server: ServerProcess, name: str, audio, expected_text: str) -> None:
    client = server.client()
    with open(audio, "rb") as f:
        plain = client.audio.transcriptions.create(model=name, file=f)
    assert plain.text == expected_text
    with open(audio, "rb") as f:
        verbose = client.audio.transcriptions.create(
            model=name, file=f, response_format="verbose_json", timestamp_granularities=["word", "segment"]
        )
    assert verbose.text == expected_text
    assert verbose.duration > 0 and verbose.segments
    assert verbose.model_extra["finish_reason"] == "stop"  # CTC has no token budget
    if expected_text:
        assert verbose.words and all(w.start <= w.end <= verbose.duration + 1e-6 for w in verbose.words)
    with open(audio, "rb") as f:
        events = list(client.audio.transcriptions.create(model=name, file=f, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "transcript.text.delta")
    done = [e for e in events if e.type == "transcript.text.done"]
    assert done and done[0].text == expected_text == deltas
    with open(audio, "rb") as f, pytest.raises(openai_error()) as err:
        client.audio.transcriptions.create(model=name, file=f, language="xx-not-a-language")
    assert err.value.status_code == 400
    # oasr's extensions that a CTC decode does not take: 400 naming the field and who takes it.
    for field, value in (("max_new_tokens", 5), ("repetition_penalty", 1.2), ("seed", 1)):
        with open(audio, "rb") as f, pytest.raises(openai_error()) as err:
            client.audio.transcriptions.create(model=name, file=f, extra_body={field: value})
        assert err.value.status_code == 400 and err.value.body["param"] == field
        assert "only 'aed' and 'llm' decoding does" in err.value.body["message"]
    assert server.alive()


def openai_error():
    import openai

    return openai.BadRequestError


@pytest.fixture(scope="module")
def wenet_clip(audio_dir):
    path = audio_dir / CLIP
    if not (WENET_DIR / "final.pt").exists() or not path.exists():
        pytest.skip("the WeNet fixture or its clip is absent")
    return path


@pytest.mark.parametrize(
    ("decode_type", "key"), [("ctc", "ctc_greedy_search"), ("ctc_aed_rescoring", "attention_rescoring")]
)
def test_wenet_through_the_server_reproduces_wenet(tmp_path_factory, wenet_clip, decode_type, key):
    expected = json.loads((WENET_DIR / "expected.json").read_text())[key]
    # Greedy CTC at the server's beam 1; rescoring over WeNet's beam-4 n-best.
    beam = "1" if decode_type == "ctc" else "4"
    server = _serve(
        tmp_path_factory, "wenet", "--model", str(WENET_DIR), "--decode-type", decode_type, "--beam-size", beam
    )
    try:
        import oasr

        engine = oasr.ASREngine(str(WENET_DIR), decode_type=decode_type)
        ref = engine.transcribe(str(wenet_clip), beam_size=int(beam))
        assert [t for seg in ref.segments for t in seg.tokens] == expected
        _check_server(server, "wenet", wenet_clip, ref.text)
    finally:
        server.stop()


@pytest.mark.parametrize("family", ["parakeet", "lasr"])
def test_hf_ctc_families_through_the_server(tmp_path_factory, audio_dir, family):
    import oasr

    model_dir = tmp_path_factory.mktemp(family) / "model"
    if family == "parakeet":
        from tests.models.parakeet.conftest import save_ctc_checkpoint

        save_ctc_checkpoint(model_dir, seed=3)
    else:
        from tests.models.lasr._reference import build_random_lasr

        build_random_lasr(model_dir, seed=3)
    audio = audio_dir / "jfk.wav"
    ref = oasr.ASREngine(str(model_dir)).transcribe(str(audio), beam_size=1)
    assert ref.text.strip(), "a random tiny model still emits some tokens on real speech"
    server = _serve(tmp_path_factory, family, "--model", str(model_dir))
    try:
        _check_server(server, family, audio, ref.text)
        # English-only checkpoints accept language="en".
        with open(audio, "rb") as f:
            assert server.client().audio.transcriptions.create(model=family, file=f, language="en").text == ref.text
    finally:
        server.stop()


def test_serve_refuses_a_decoding_flag_the_family_does_not_take(tmp_path_factory):
    from tests.models.lasr._reference import build_random_lasr
    from tests.server._fault_helpers import failed_start

    model_dir = build_random_lasr(tmp_path_factory.mktemp("lasr") / "model", seed=3)
    code, output, _ = failed_start(["--model", str(model_dir), "--repetition-penalty", "1.2"])
    assert code == 2, output
    assert "--repetition-penalty 1.2" in output and "only 'aed' and 'llm' decoding does" in output
    assert "not starting" in output and "Traceback" not in output
