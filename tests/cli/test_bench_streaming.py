"""``oasr bench --workload streaming`` end to end on WeNet's tiny causal U2++ fixture and the
bundled tiny.en: 1.5 s of audio, one and two streams, through the engine and oasr's
``/v1/audio/stream`` (an ``oasr serve`` child and ``websockets`` clients) and the Realtime
route; a model the engine cannot stream and a route the server lacks are reported as skipped
with their reason, not failed. No timing is asserted (the machine is shared)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import AUDIO_DIR, FIXTURES_DIR

pytest.importorskip("websockets")
pytest.importorskip("uvicorn")

CAUSAL = FIXTURES_DIR / "wenet-u2pp-tiny-causal"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from oasr.cli.main import main
    from oasr.models.bundled import bundled_path

    if not (CAUSAL / "train.yaml").is_file():
        pytest.skip(f"fixture not found at {CAUSAL}")
    models = [str(CAUSAL)] + (["tiny.en"] if bundled_path("tiny.en") is not None else [])
    out = tmp_path_factory.mktemp("bench_streaming") / "report.json"
    table = out.with_suffix(".md")
    code = main(
        ["bench", "--workload", "streaming", "--model", *models, "--short-clip", str(AUDIO_DIR / "jfk.wav")]
        + ["--stream-counts", "1", "2", "--stream-seconds", "1.5", "--threads", "1"]
        + ["--transports", "engine", "ws", "realtime", "--json", str(out), "--markdown", str(table)]
    )
    assert code == 0
    return json.loads(out.read_text()), table.read_text()


def test_every_transport_reports_both_loops_or_why_it_was_skipped(report):
    data, table = report
    wenet = data["models"][str(CAUSAL)]
    assert wenet["architecture"] == "conformer" and wenet["chunk_ms"] > 0
    for transport in ("engine", "ws"):
        for loop in ("batched", "one_stream_loop"):
            runs = wenet[transport][loop]["runs"]
            assert [r["streams"] for r in runs][:1] == [1]
            assert all(r["chunks"] > 0 and r["p95_ms"] > 0 for r in runs), (transport, loop, runs)
            assert 0 <= wenet[transport][loop]["capacity"] <= 2
    realtime = wenet["realtime"]
    if "skipped" in realtime:  # a server without /v1/realtime
        assert "/v1/realtime" in realtime["skipped"]
    else:
        runs = realtime["batched"]["runs"]
        assert runs and all(r["chunks"] > 0 for r in runs), runs
    assert "| wenet-u2pp-tiny-causal | conformer |" in table


def test_a_model_the_engine_cannot_stream_is_skipped_with_the_reason(report):
    data, _ = report
    if "tiny.en" not in data["models"]:
        pytest.skip("tiny.en is not installed")
    whisper = data["models"]["tiny.en"]
    assert whisper["architecture"] == "whisper"
    assert "cannot stream" in whisper.get("skipped", "") or "engine" in whisper


def test_several_models_only_for_the_streaming_workload(capsys):
    from oasr.cli.main import main

    assert main(["bench", "--workload", "short", "--model", "a", "b"]) == 2
    assert "one model for --workload short" in capsys.readouterr().err
