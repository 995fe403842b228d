"""``oasr bench --workload streaming`` end to end on WeNet's tiny causal U2++ fixture: 1.5 s of
audio, one stream, through the engine and oasr's ``/v1/audio/stream`` (an ``oasr
serve`` child and ``websockets`` clients) and the Realtime route; a route the server lacks, and
the bundled tiny.en where the engine cannot stream it, are reported as skipped with their
reason, not failed. No timing is asserted (the machine is shared)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import AUDIO_DIR, FIXTURES_DIR

pytest.importorskip("websockets")
pytest.importorskip("uvicorn")

CAUSAL = FIXTURES_DIR / "wenet-u2pp-tiny-causal"


def bench(out, models: list[str], *flags: str) -> tuple[dict, str]:
    """``oasr bench --workload streaming`` on ``models`` (1.5 s of jfk.wav a stream): (JSON, table)."""
    from oasr.cli.main import main

    code = main(
        ["bench", "--workload", "streaming", "--model", *models, "--short-clip", str(AUDIO_DIR / "jfk.wav")]
        + ["--stream-seconds", "1.5", "--threads", "1", "--json", str(out), "--markdown", str(out.with_suffix(".md"))]
        + list(flags)
    )
    assert code == 0
    return json.loads(out.read_text()), out.with_suffix(".md").read_text()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if not (CAUSAL / "train.yaml").is_file():
        pytest.skip(f"fixture not found at {CAUSAL}")
    out = tmp_path_factory.mktemp("bench_streaming") / "report.json"
    return bench(out, [str(CAUSAL)], "--stream-counts", "1", "--transports", "engine", "ws", "realtime")


def test_every_transport_reports_both_loops_or_why_it_was_skipped(report):
    data, table = report
    wenet = data["models"][str(CAUSAL)]
    assert wenet["architecture"] == "conformer" and wenet["chunk_ms"] > 0
    for transport in ("engine", "ws"):
        for loop in ("batched", "one_stream_loop"):
            runs = wenet[transport][loop]["runs"]
            assert [r["streams"] for r in runs][:1] == [1]
            assert all(r["chunks"] > 0 and r["p95_ms"] > 0 for r in runs), (transport, loop, runs)
            assert 0 <= wenet[transport][loop]["capacity"] <= 1
    realtime = wenet["realtime"]
    if "skipped" in realtime:  # a server without /v1/realtime
        assert "/v1/realtime" in realtime["skipped"]
    else:  # every delta placed on the reference timeline, each timed twice
        runs = realtime["batched"]["runs"]
        assert runs and all(r["chunks"] > 0 and r["unplaced"] == 0 for r in runs), runs
        assert all(r["first_seen_p95_ms"] >= r["p95_ms"] for r in runs), runs
    assert "| wenet-u2pp-tiny-causal | conformer |" in table


def test_an_offline_model_is_skipped_with_the_reason_or_streamed_by_its_policy(tmp_path):
    from oasr.models.bundled import bundled_path

    if bundled_path("tiny.en") is None:
        pytest.skip("tiny.en is not installed")
    data, table = bench(tmp_path / "whisper.json", ["tiny.en"], "--stream-counts", "1", "--transports", "engine")
    whisper = data["models"]["tiny.en"]
    assert whisper["architecture"] == "whisper"
    if "skipped" in whisper:  # an engine without a streaming policy for offline models
        assert "cannot stream" in whisper["skipped"] and "skipped: the engine does not stream it" in table
    else:  # Whisper live: timed through open_stream; no one-stream loop to compare with
        assert whisper["engine"]["batched"]["runs"][0]["chunks"] >= 0
        assert "not batched by the chunked core" in whisper["engine"]["one_stream_loop"]["skipped"]


def test_several_models_only_for_the_streaming_workload(capsys):
    from oasr.cli.main import main

    assert main(["bench", "--workload", "short", "--model", "a", "b"]) == 2
    assert "one model for --workload short" in capsys.readouterr().err
