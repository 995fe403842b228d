"""``/v1/audio/stream`` on a real ``oasr serve`` process (WeNet's tiny causal U2++ fixture),
driven by the ``websockets`` client library: the events equal an in-process stream of the
same samples, endpoints, bad input and its close codes (the server goes on serving), the
API key, hang-ups mid-stream freeing their cache slot at once (``/metrics``), a full
server refusing the upgrade with 429, and 32 concurrent connections."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import numpy as np
import pytest

pytest.importorskip("websockets")
from websockets.asyncio.client import connect  # noqa: E402
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402

from tests.conftest import AUDIO_DIR, FIXTURES_DIR  # noqa: E402
from tests.server.conftest import ServerProcess, metric  # noqa: E402

CAUSAL = FIXTURES_DIR / "wenet-u2pp-tiny-causal"
KEY = "stream-key"
MAX_STREAMS = 40
MAX_AUDIO_S = 30.0
IDLE_S = 3.0
MAX_MESSAGE_KB = 64
PIECE = 3200  # samples per binary message (200 ms at 16 kHz)
CLIPS = ("jfk.wav", "bambatse_02_haggard_0323.wav", "bambatse_04_haggard_0273.wav", "bambatse_06_haggard_0090.wav")


@pytest.fixture(scope="module")
def clips() -> dict[str, np.ndarray]:
    """The clips at 16 kHz, quantised to PCM16 (so both sample formats carry the same values)."""
    from oasr.audio import load_audio

    if not (CAUSAL / "train.yaml").is_file():
        pytest.skip(f"fixture not found at {CAUSAL}")
    missing = [c for c in CLIPS if not (AUDIO_DIR / c).exists()]
    if missing:
        pytest.skip(f"data/audio {missing} not found")
    out = {}
    for name in CLIPS:
        x = load_audio(AUDIO_DIR / name)
        out[name] = (np.clip(x, -1, 1) * 32767).astype(np.int16).astype(np.float32) / 32768.0
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory, clips):
    log = tmp_path_factory.mktemp("ws_server") / "server.log"
    proc = ServerProcess(
        ["--model", str(CAUSAL), "--api-key", KEY, "--max-streams", str(MAX_STREAMS)]
        + ["--max-audio-seconds", str(MAX_AUDIO_S), "--stream-idle-timeout", str(IDLE_S)]
        + ["--max-message-kb", str(MAX_MESSAGE_KB)],
        log,
        api_key=KEY,
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def reference():
    """The in-process engine the server's events are compared with (the server's chunk)."""
    from oasr.engine.engine import ASREngine

    return ASREngine(str(CAUSAL), max_streams=2, max_audio_s=MAX_AUDIO_S)


def reference_events(engine, samples: np.ndarray, **options) -> list[dict]:
    stream = engine.open_stream(sample_rate=16000, **options)
    events = stream.feed(samples)
    events += stream.finish()
    return [e.to_dict() for e in events]


def _rounded(events: list[dict]) -> list[dict]:
    out = []
    for e in events:
        e = dict(e)
        if e.get("words"):
            e["words"] = [{**w, "probability": round(w["probability"], 6)} for w in e["words"]]
        out.append(e)
    return out


def pcm16(samples: np.ndarray) -> list[bytes]:
    q = np.round(samples * 32768.0).clip(-32768, 32767).astype("<i2")
    return [q[i : i + PIECE].tobytes() for i in range(0, len(q), PIECE)]


def float32(samples: np.ndarray) -> list[bytes]:
    x = samples.astype("<f4")
    return [x[i : i + PIECE].tobytes() for i in range(0, len(x), PIECE)]


def url(server: ServerProcess) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/audio/stream"


async def session(server, config, messages=(), *, done=True, headers=None, pause_s=0.0):
    """Send ``config`` (a dict is JSON-encoded), the messages and "done"; every event until the
    server closes, and its close code."""
    headers = server.headers() if headers is None else headers
    async with connect(url(server), additional_headers=headers, max_size=None) as ws:
        try:
            await ws.send(json.dumps(config) if isinstance(config, dict) else config)
            for m in messages:
                await ws.send(m)
                if pause_s:
                    await asyncio.sleep(pause_s)
            if done:
                await ws.send("done")
        except ConnectionClosed:
            pass  # the server refused something: its events and close code say what
        events = []
        try:
            async for message in ws:
                events.append(json.loads(message))
        except ConnectionClosed:
            pass
        return events, ws.close_code


def run(coro):
    return asyncio.run(coro)


def wait_for_metric(server, name: str, value: float, timeout_s: float = 20.0, **labels) -> float:
    deadline = time.monotonic() + timeout_s
    got = metric(server.metrics(), name, **labels)
    while got != value and time.monotonic() < deadline:
        time.sleep(0.1)
        got = metric(server.metrics(), name, **labels)
    return got


# ---------------------------------------------------------------------------
# Events


def test_events_equal_an_in_process_stream(server, reference, clips):
    samples = clips["jfk.wav"]
    events, code = run(session(server, {"sample_rate": 16000}, pcm16(samples)))
    assert code == 1000
    assert events == reference_events(reference, samples)
    kinds = [e["type"] for e in events]
    assert kinds[-2:] == ["final", "done"] and "partial" in kinds
    final = events[-2]
    assert final["tokens"] and 0.0 <= final["start"] < final["end"] <= len(samples) / 16000 + 1e-6


def test_float32_frames_give_the_pcm16_result(server, clips):
    samples = clips["bambatse_02_haggard_0323.wav"]
    as_pcm16, _ = run(session(server, {"sample_rate": 16000}, pcm16(samples)))
    as_float, code = run(session(server, {"sample_rate": 16000, "sample_format": "float32"}, float32(samples)))
    assert code == 1000
    assert as_float == as_pcm16


def test_word_times_and_no_partials(server, reference, clips):
    samples = clips["bambatse_04_haggard_0273.wav"]
    options = {"word_timestamps": True, "partials": False}
    events, code = run(session(server, {"sample_rate": 16000, **options}, pcm16(samples)))
    assert code == 1000
    # A word's probability is a mean of float32 softmax values: equal to within rounding across
    # processes (thread counts differ), so it is compared to 6 places; all else exactly.
    assert _rounded(events) == _rounded(reference_events(reference, samples, **options))
    assert [e["type"] for e in events] == ["final", "done"]
    words = events[0]["words"]
    assert words and all(a["end"] <= b["start"] + 1e-6 for a, b in zip(words, words[1:]))


def test_a_resampled_stream_equals_the_in_process_one(server, reference, clips):
    from oasr.audio import load_audio

    samples = load_audio(AUDIO_DIR / "jfk.wav", 8000)
    samples = np.round(samples * 32768.0).clip(-32768, 32767) / 32768.0
    events, code = run(session(server, {"sample_rate": 8000}, pcm16(samples.astype(np.float32))))
    assert code == 1000
    stream = reference.open_stream(sample_rate=8000)
    expected = [e.to_dict() for e in stream.feed(samples.astype(np.float32)) + stream.finish()]
    assert events == expected


def test_endpoints_close_segments(server, reference, clips):
    samples = np.concatenate([clips["jfk.wav"], clips["bambatse_02_haggard_0323.wav"]])
    options = {"endpoint": True, "rule3_min_utterance_length": 4.0}
    events, code = run(session(server, {"sample_rate": 16000, **options}, pcm16(samples)))
    assert code == 1000
    assert events == reference_events(reference, samples, **options)
    endpoints = [e for e in events if e["type"] == "endpoint"]
    finals = [e for e in events if e["type"] == "final"]
    assert len(endpoints) >= 2 and len(finals) >= len(endpoints)
    assert [e["segment"] for e in endpoints] == list(range(len(endpoints)))
    assert all(a["end"] <= b["start"] + 1e-6 for a, b in zip(finals, finals[1:]))


# ---------------------------------------------------------------------------
# Bad input: an error event, a close code, and the server goes on


BAD = {
    "audio before the configuration": (b"\x00\x00", [], 1003, "bad_frame"),
    "configuration not JSON": ("{sample_rate", [], 1003, "bad_frame"),
    "configuration not an object": ("[16000]", [], 1003, "bad_frame"),
    "unknown sample format": ({"sample_rate": 16000, "sample_format": "mulaw"}, [], 1003, "bad_frame"),
    "no sample rate": ({}, [], 1007, "invalid_options"),
    "sample rate not a number": ({"sample_rate": "16k"}, [], 1007, "invalid_options"),
    "sample rate out of range": ({"sample_rate": 1}, [], 1007, "invalid_options"),
    "unknown option": ({"sample_rate": 16000, "beam_sizee": 2}, [], 1007, "invalid_options"),
    "vad on a live stream": ({"sample_rate": 16000, "vad_filter": True}, [], 1007, "invalid_options"),
    "endpoint not a boolean": ({"sample_rate": 16000, "endpoint": "yes"}, [], 1007, "invalid_options"),
    "a model not served": ({"sample_rate": 16000, "model": "whisper-1"}, [], 1008, "model_not_found"),
    "half a sample": ({"sample_rate": 16000}, [b"\x00\x00\x00"], 1003, "bad_frame"),
    "a text message mid-stream": ({"sample_rate": 16000}, [b"\x00\x00" * 160, "hello"], 1003, "bad_frame"),
    "NaN samples": (
        {"sample_rate": 16000, "sample_format": "float32"},
        [np.array([0.0, np.nan], "<f4").tobytes()],
        1007,
        "invalid_audio",
    ),
    "infinite samples": (
        {"sample_rate": 16000, "sample_format": "float32"},
        [np.array([np.inf] * 4, "<f4").tobytes()],
        1007,
        "invalid_audio",
    ),
    # Hostile configurations: each is refused with its documented code, none reaches the engine's step.
    "configuration nested 10k deep": (
        '{"sample_rate": 16000, "x": ' + "[" * 10_000 + "]" * 10_000 + "}",
        [],
        1003,
        "bad_frame",
    ),
    "a list as sample format": ({"sample_rate": 16000, "sample_format": ["pcm16"]}, [], 1003, "bad_frame"),
    "an object as sample format": ({"sample_rate": 16000, "sample_format": {}}, [], 1003, "bad_frame"),
    "an infinite beam": ('{"sample_rate": 16000, "beam_size": 1e400}', [b"\x00\x00" * 160], 1007, "invalid_options"),
    "a fractional beam": ({"sample_rate": 16000, "beam_size": 2.5}, [b"\x00\x00" * 160], 1007, "invalid_options"),
    "a beam of 1000": ({"sample_rate": 16000, "beam_size": 1000}, [b"\x00\x00" * 160], 1007, "invalid_options"),
    "a beam of 1e9": ({"sample_rate": 16000, "beam_size": 10**9}, [b"\x00\x00" * 160], 1007, "invalid_options"),
    "endpoint rules not an object": (
        {"sample_rate": 16000, "endpoint": True, "endpoint_config": "x"},
        [b"\x00\x00" * 160],
        1007,
        "invalid_options",
    ),
    "an unknown endpoint rule": (
        {"sample_rate": 16000, "endpoint": True, "endpoint_config": {"rule9": 1.0}},
        [b"\x00\x00" * 160],
        1007,
        "invalid_options",
    ),
    "a list as model": ({"sample_rate": 16000, "model": ["x"]}, [], 1007, "invalid_options"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_an_error_event_and_a_close_code(server, case):
    config, messages, close_code, error_code = BAD[case]
    events, code = run(session(server, config, messages))
    assert code == close_code
    assert [e["type"] for e in events] == ["error"] and events[0]["code"] == error_code
    assert events[0]["message"]
    assert server.healthy()


def test_a_hostile_configuration_leaves_streaming_up_for_the_next_stream(server, reference, clips):
    """``endpoint_config`` as ``{}`` (the JSON object of the rules: every rule at its default)
    or as ``"x"`` (refused, 1007), then one binary message: the streaming loop goes on, and a
    normal stream on the same server gets its in-process final."""
    hostile = {"sample_rate": 16000, "endpoint": True, "endpoint_config": {}}
    samples = clips["bambatse_02_haggard_0323.wav"]
    events, code = run(session(server, hostile, pcm16(samples)))
    assert code == 1000
    assert events == reference_events(reference, samples, endpoint=True)
    events, code = run(session(server, {**hostile, "endpoint_config": "x"}, [b"\x00\x00" * 1600]))
    assert code == 1007 and events[0]["code"] == "invalid_options"
    samples = clips["jfk.wav"]
    events, code = run(session(server, {"sample_rate": 16000}, pcm16(samples)))
    assert code == 1000
    assert events == reference_events(reference, samples)
    assert server.healthy()
    assert metric(server.metrics(), "oasr_stream_loop_up") == 1


def test_a_stream_past_the_duration_limit_is_closed(server, clips):
    silence = np.zeros(int(MAX_AUDIO_S * 16000) + PIECE, dtype=np.float32)
    events, code = run(session(server, {"sample_rate": 16000}, pcm16(silence)))
    assert code == 1008
    assert events[-1]["type"] == "error" and events[-1]["code"] == "audio_too_long"
    assert all(e["type"] == "partial" for e in events[:-1])


def test_an_idle_stream_is_closed(server):
    async def idle():
        async with connect(url(server), additional_headers=server.headers()) as ws:
            await ws.send(json.dumps({"sample_rate": 16000}))
            await ws.send(b"\x00\x00" * 1600)
            started = time.monotonic()
            events = []
            with pytest.raises(ConnectionClosed):
                async for m in ws:
                    events.append(json.loads(m))
            return events, ws.close_code, time.monotonic() - started

    events, code, waited = run(idle())
    assert code == 1008 and events[-1]["code"] == "idle_timeout"
    assert waited >= IDLE_S - 0.5


def test_a_message_over_the_limit_closes_with_1009(server):
    before = metric(server.metrics(), "oasr_stream_sessions_total", code="1009")
    gone = metric(server.metrics(), "oasr_stream_sessions_total", code="0")
    big = b"\x00\x00" * (MAX_MESSAGE_KB * 1024)  # twice the limit
    events, code = run(session(server, {"sample_rate": 16000}, [big]))
    assert code == 1009 and events == []
    assert server.healthy()
    # Closed by the WebSocket layer, below the app: counted as what it is, not as "the client went away".
    assert wait_for_metric(server, "oasr_stream_sessions_total", before + 1, code="1009") == before + 1
    assert metric(server.metrics(), "oasr_stream_sessions_total", code="0") == gone


def test_the_api_key_is_required(server):
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        with pytest.raises(InvalidStatus) as e:
            run(session(server, {"sample_rate": 16000}, headers=headers))
        assert e.value.response.status_code == 401
        assert json.loads(e.value.response.body)["error"]["code"] == "invalid_api_key"
    assert "returned without completing handshake" not in server.log()


# ---------------------------------------------------------------------------
# Slots: hang-ups free them at once, a full server refuses the upgrade


def test_a_hang_up_mid_stream_frees_its_slot_at_once(server, clips):
    before = metric(server.metrics(), "oasr_stream_sessions_total", code="1006")
    gone = metric(server.metrics(), "oasr_stream_sessions_total", code="0")

    async def hang_up():
        ws = await connect(url(server), additional_headers=server.headers())
        await ws.send(json.dumps({"sample_rate": 16000}))
        for m in pcm16(clips["jfk.wav"])[:10]:
            await ws.send(m)
        await ws.recv()  # a partial: the stream holds its slot
        assert metric(server.metrics(), "oasr_streams_active") == 1
        ws.transport.abort()  # no close frame: the TCP connection just drops

    run(hang_up())
    assert wait_for_metric(server, "oasr_streams_active", 0) == 0
    assert wait_for_metric(server, "oasr_stream_connections", 0) == 0
    # A TCP connection dropped without a close frame is 1006, not a client that closed the WebSocket (0).
    assert metric(server.metrics(), "oasr_stream_sessions_total", code="1006") == before + 1
    assert metric(server.metrics(), "oasr_stream_sessions_total", code="0") == gone
    assert metric(server.metrics(), "oasr_stream_cache_bytes") > 0  # the pool stays allocated, its slot free


def test_a_client_close_frame_mid_stream_counts_as_gone(server, clips):
    before = metric(server.metrics(), "oasr_stream_sessions_total", code="0")

    async def close_early():
        async with connect(url(server), additional_headers=server.headers()) as ws:
            await ws.send(json.dumps({"sample_rate": 16000}))
            for m in pcm16(clips["jfk.wav"])[:10]:
                await ws.send(m)
            await ws.recv()
        # leaving the block sends a close frame (1000) before "done"

    run(close_early())
    assert wait_for_metric(server, "oasr_stream_sessions_total", before + 1, code="0") == before + 1
    assert wait_for_metric(server, "oasr_streams_active", 0) == 0


def test_a_full_server_refuses_the_upgrade_with_429(server, clips):
    async def fill():
        held = [await connect(url(server), additional_headers=server.headers()) for _ in range(MAX_STREAMS)]
        try:
            with pytest.raises(InvalidStatus) as e:
                await connect(url(server), additional_headers=server.headers())
            assert e.value.response.status_code == 429
            assert json.loads(e.value.response.body)["error"]["code"] == "streams_full"
        finally:
            for ws in held:
                await ws.close()

    run(fill())
    assert wait_for_metric(server, "oasr_stream_connections", 0) == 0
    events, code = run(session(server, {"sample_rate": 16000}, pcm16(clips["bambatse_02_haggard_0323.wav"])))
    assert code == 1000 and events[-1]["type"] == "done"


def test_32_concurrent_connections(server, reference, clips):
    names = [CLIPS[1 + i % 3] for i in range(32)]
    expected = {name: reference_events(reference, clips[name]) for name in set(names)}

    async def all_at_once():
        return await asyncio.gather(
            *(session(server, {"sample_rate": 16000}, pcm16(clips[n]), pause_s=0.01) for n in names)
        )

    results = run(all_at_once())
    for name, (events, code) in zip(names, results):
        assert code == 1000
        assert events == expected[name]
    assert wait_for_metric(server, "oasr_streams_active", 0) == 0
    assert metric(server.metrics(), "oasr_stream_steps_total") > 0


def test_churn_of_clients_hanging_up_leaves_every_final_equal_to_its_solo_run(server, reference, clips):
    """16 clients, 6 rounds each: open a stream, send its audio, and either end it or hang up
    (a TCP reset or a close frame) at a random point, while the others open, send and hang up
    around it. Every stream that ended gets the events of its solo run (a freed slot is never
    handed out with another stream's cache)."""
    import random

    names = CLIPS[1:]
    expected = {name: reference_events(reference, clips[name]) for name in names}

    async def client(seed: int):
        rng = random.Random(seed)
        finished = []
        for _ in range(6):
            name = rng.choice(names)
            messages = pcm16(clips[name])
            cut = rng.randrange(1, len(messages)) if rng.random() < 0.5 else None
            try:
                ws = await connect(url(server), additional_headers=server.headers(), max_size=None)
            except InvalidStatus as e:  # every slot taken for a moment: 429, as a client would, retry
                assert e.response.status_code == 429
                await asyncio.sleep(0.05)
                continue
            try:
                await ws.send(json.dumps({"sample_rate": 16000}))
                for i, m in enumerate(messages):
                    if i == cut:
                        break
                    await ws.send(m)
                    await asyncio.sleep(rng.random() * 0.004)
                if cut is not None:
                    if rng.random() < 0.5:
                        ws.transport.abort()
                    else:
                        await ws.close()
                    continue
                await ws.send("done")
            except ConnectionClosed:
                pass  # refused (1013 below): its events say why
            events = []
            with contextlib.suppress(ConnectionClosed):
                async for m in ws:
                    events.append(json.loads(m))
            finished.append((name, events, ws.close_code))
        return finished

    async def churn():
        return await asyncio.gather(*(client(seed) for seed in range(16)))

    finished = [f for per_client in run(churn()) for f in per_client]
    assert len(finished) >= 16
    for name, events, code in finished:
        if code == 1013:  # no slot at open (the upgrade raced another stream): a retry hint, no audio decoded
            assert [e["type"] for e in events] == ["error"] and events[0]["retry_after_s"] > 0
            continue
        assert code == 1000
        assert events == expected[name]
    assert wait_for_metric(server, "oasr_streams_active", 0) == 0
    assert server.healthy()


def test_a_client_sending_faster_than_real_time_gets_its_final(tmp_path, clips):
    """A client that sends 200 s of audio as fast as it can, on a server pinging every 0.5 s
    with a 0.5-s pong timeout: the server stops reading it while 10 s of its audio wait for the
    encoder, so its pongs wait behind its audio for seconds, and the audio still arriving keeps
    it alive: the stream ends with its final, ``done`` and 1000 (no 1011 keepalive timeout)."""
    from oasr.engine.engine import ASREngine

    samples = np.concatenate([clips[name] for name in CLIPS] * 8)[: 16000 * 200]
    args = ["--model", str(CAUSAL), "--max-audio-seconds", "600", "--ws-ping-interval", "0.5"]
    proc = ServerProcess([*args, "--ws-ping-timeout", "0.5"], tmp_path / "log")
    try:

        async def flood():
            async with connect(url(proc), ping_interval=None, max_size=None) as ws:
                await ws.send(json.dumps({"sample_rate": 16000, "partials": False}))
                for m in pcm16(samples):  # as fast as the server takes them
                    await ws.send(m)
                await ws.send("done")
                events = []
                with contextlib.suppress(ConnectionClosed):
                    async for m in ws:
                        events.append(json.loads(m))
                return events, ws.close_code

        events, code = run(flood())
    finally:
        proc.stop()
    assert code == 1000, (code, events[-1:])
    expected = reference_events(ASREngine(str(CAUSAL), max_streams=1, max_audio_s=600), samples, partials=False)
    assert events == expected and events[-2]["type"] == "final"


def test_sigterm_closes_open_streams_with_1012_and_the_server_exits(tmp_path, clips):
    import signal

    proc = ServerProcess(["--model", str(CAUSAL), "--max-streams", "2", "--max-audio-seconds", "30"], tmp_path / "log")
    try:

        async def cut_off():
            async with connect(url(proc)) as ws:
                await ws.send(json.dumps({"sample_rate": 16000}))
                for m in pcm16(clips["jfk.wav"])[:10]:
                    await ws.send(m)
                await ws.recv()  # the stream is open and decoding
                proc.proc.send_signal(signal.SIGTERM)
                with pytest.raises(ConnectionClosed):
                    while True:
                        await ws.recv()
                return ws.close_code

        assert run(cut_off()) == 1012
        assert proc.proc.wait(timeout=30) == 0  # a requested shutdown (lifecycle.run_server), not death by signal
        assert "Traceback" not in proc.log()
    finally:
        proc.stop()


def test_a_stream_the_engine_has_no_room_for_is_refused_before_work_with_a_retry_hint(clips):
    """More connections allowed than the engine has slots (an in-process app). While the one
    slot is taken, an upgrade is refused with 429 and ``Retry-After``; a connection that passed
    the upgrade before the slot was taken gets ``streams_full`` with ``retry_after_s`` and 1013
    when it opens its stream; the one holding the slot goes on."""
    from starlette.testclient import TestClient, WebSocketDenialResponse

    from oasr.engine.async_engine import AsyncEngine
    from oasr.server.app import create_app
    from oasr.server.settings import ServerSettings

    engine = AsyncEngine(str(CAUSAL), max_streams=1, max_audio_s=MAX_AUDIO_S)
    try:
        app = create_app(ServerSettings(model=str(CAUSAL), max_streams=3), engine=engine)
        with (
            TestClient(app) as client,
            client.websocket_connect("/v1/audio/stream") as first,
            client.websocket_connect("/v1/audio/stream") as second,
        ):
            first.send_text(json.dumps({"sample_rate": 16000}))
            for m in pcm16(clips["bambatse_02_haggard_0323.wav"]):
                first.send_bytes(m)
            assert first.receive_json()["type"] == "partial"
            second.send_text(json.dumps({"sample_rate": 16000}))
            refused = second.receive_json()
            assert refused["code"] == "streams_full" and refused["retry_after_s"] == 1
            assert second.receive() == {"type": "websocket.close", "code": 1013, "reason": "streams_full"}
            with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect("/v1/audio/stream"):
                pass
            assert denied.value.status_code == 429 and denied.value.headers["retry-after"] == "1"
            assert denied.value.json()["error"]["code"] == "streams_full"
            first.send_text("done")
            events = []
            while not events or events[-1]["type"] != "done":
                events.append(first.receive_json())
            assert [e["type"] for e in events][-2:] == ["final", "done"]
    finally:
        engine.shutdown()


def _in_process(max_streams: int = 2):
    from starlette.testclient import TestClient

    from oasr.engine.async_engine import AsyncEngine
    from oasr.server.app import create_app
    from oasr.server.settings import ServerSettings

    engine = AsyncEngine(str(CAUSAL), max_streams=max_streams, max_audio_s=MAX_AUDIO_S)
    app = create_app(ServerSettings(model=str(CAUSAL), max_streams=max_streams), engine=engine)
    return engine, TestClient(app)


def _stream_in_process(client, config: dict, messages, *, done: bool = True) -> tuple[list[dict], int]:
    with client.websocket_connect("/v1/audio/stream") as ws:
        ws.send_text(json.dumps(config))
        for m in messages:
            ws.send_bytes(m)
        if done:
            ws.send_text("done")
        events = []
        while True:
            message = ws.receive()
            if message["type"] == "websocket.close":
                return events, message["code"]
            events.append(json.loads(message["text"]))


def test_a_flood_of_tiny_messages_costs_the_engine_no_more_than_its_audio(reference, clips, monkeypatch):
    """The first 2 s of a clip as 32,000 messages of one sample each, the rest in 200-ms ones:
    the result is the clip's, and the engine sees the audio in pieces of at least ``MIN_PUSH_S``
    (pushes onto the stream and front-end calls counted, not time)."""
    from oasr.audio.streaming import FeatureStream
    from oasr.engine.streaming.api import AsyncStream
    from oasr.server.streaming import MIN_PUSH_S

    samples = clips["bambatse_02_haggard_0323.wav"]
    expected = reference_events(reference, samples)
    pushes, frontend_calls = [], []
    feed, push = AsyncStream.feed, FeatureStream.push
    monkeypatch.setattr(AsyncStream, "feed", lambda self, x: (pushes.append(len(x)), feed(self, x))[1])
    monkeypatch.setattr(FeatureStream, "push", lambda self, x: (frontend_calls.append(len(x)), push(self, x))[1])
    q = np.round(samples * 32768.0).clip(-32768, 32767).astype("<i2")
    flood = [q[i : i + 1].tobytes() for i in range(32000)]
    rest = [q[i : i + PIECE].tobytes() for i in range(32000, len(q), PIECE)]
    engine, client = _in_process()
    try:
        with client:
            events, code = _stream_in_process(client, {"sample_rate": 16000}, flood + rest)
    finally:
        engine.shutdown()
    assert code == 1000
    assert events == expected
    assert sum(pushes) == len(samples)
    assert len(pushes) <= 32000 / (MIN_PUSH_S * 16000) + len(rest) + 1
    assert len(frontend_calls) <= len(pushes)


class _Fatal(BaseException):
    """Not an ``Exception``: what no guard takes (the streaming thread dies of it)."""


def test_a_fault_in_one_streams_part_of_a_step_fails_that_stream_alone(reference, clips, monkeypatch):
    """A stream whose endpoint rules raise (an injected bug) ends with ``engine_error`` / 1011
    while a stream open beside it gets its whole, right result: the fault stayed inside that
    stream's guard (the loop counted none, and runs on)."""
    import threading

    from oasr.engine.streaming.endpoint import EndpointConfig

    detect = EndpointConfig.detect

    def broken(self, *args):
        if self.rule3_min_utterance_length == 7.0:  # the doomed stream's marker
            raise ZeroDivisionError("an injected bug")
        return detect(self, *args)

    monkeypatch.setattr(EndpointConfig, "detect", broken)
    samples = clips["bambatse_04_haggard_0273.wav"]
    engine, client = _in_process()
    try:
        with client:
            out = {}

            def doomed():
                config = {"sample_rate": 16000, "endpoint": True, "rule3_min_utterance_length": 7.0}
                out["doomed"] = _stream_in_process(client, config, pcm16(samples), done=False)

            thread = threading.Thread(target=doomed)
            thread.start()
            events, code = _stream_in_process(client, {"sample_rate": 16000}, pcm16(samples))
            thread.join(60)
            assert engine.streaming.faults == 0 and engine.streaming.alive
    finally:
        engine.shutdown()
    assert code == 1000 and events == reference_events(reference, samples)
    doomed_events, doomed_code = out["doomed"]
    assert doomed_code == 1011 and doomed_events[-1]["code"] == "engine_error"
    assert "an injected bug" in doomed_events[-1]["message"]


def test_a_fault_outside_every_guard_fails_the_open_streams_and_the_loop_goes_on(reference, clips, monkeypatch):
    from oasr.engine.streaming.core import StreamingCore

    step = StreamingCore.step
    failed = []

    def fail_once(self):
        if not failed and self.streams:
            failed.append(True)
            raise RuntimeError("an injected step failure")
        return step(self)

    monkeypatch.setattr(StreamingCore, "step", fail_once)
    samples = clips["bambatse_02_haggard_0323.wav"]
    engine, client = _in_process()
    try:
        with client:
            events, code = _stream_in_process(client, {"sample_rate": 16000}, [b"".join(pcm16(samples))], done=False)
            assert code == 1011 and events[-1]["code"] == "engine_error"
            assert "an injected step failure" in events[-1]["message"]
            events, code = _stream_in_process(client, {"sample_rate": 16000}, pcm16(samples))
            assert code == 1000 and events == reference_events(reference, samples)
            assert client.get("/health").status_code == 200
            assert "oasr_stream_loop_faults_total 1.0" in client.get("/metrics").text
    finally:
        engine.shutdown()


def test_a_dead_streaming_loop_fails_health_and_refuses_upgrades(clips, monkeypatch):
    """The streaming thread killed by what no guard takes (a ``BaseException``): ``/health``
    answers 503 ``streaming_stopped`` so that a supervisor restarts the server, and a new stream
    is refused before the upgrade (503)."""
    from starlette.testclient import WebSocketDenialResponse

    from oasr.engine.streaming.core import StreamingCore

    def fatal(self):
        raise _Fatal("the streaming thread is killed")

    engine, client = _in_process()
    try:
        with client:
            assert client.get("/health").status_code == 200
            monkeypatch.setattr(StreamingCore, "step", fatal)
            events, code = _stream_in_process(client, {"sample_rate": 16000}, [b"\x00\x00" * 16000], done=False)
            assert code == 1011 and events[-1]["code"] == "engine_error"
            health = client.get("/health")
            assert health.status_code == 503 and health.json()["error"]["code"] == "streaming_stopped"
            assert "oasr_stream_loop_up 0.0" in client.get("/metrics").text
            with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect("/v1/audio/stream"):
                pass
            assert denied.value.status_code == 503
    finally:
        engine.shutdown()


def test_a_step_that_fails_closes_its_stream_with_1011_and_the_next_stream_decodes(clips, monkeypatch):
    """A failure inside a streaming step (the encoder raising once, in-process app): the stream
    gets ``engine_error`` and 1011; the engine's next stream decodes as usual."""
    from starlette.testclient import TestClient

    from oasr.engine.async_engine import AsyncEngine
    from oasr.engine.streaming.runtime import PagedRuntime
    from oasr.server.app import create_app
    from oasr.server.settings import ServerSettings

    real = PagedRuntime.encode
    failed = []

    def fail_once(self, *args, **kwargs):
        if not failed:
            failed.append(True)
            raise RuntimeError("injected encoder failure")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PagedRuntime, "encode", fail_once)
    samples = clips["bambatse_02_haggard_0323.wav"]
    engine = AsyncEngine(str(CAUSAL), max_streams=2, max_audio_s=MAX_AUDIO_S)
    try:
        app = create_app(ServerSettings(model=str(CAUSAL), max_streams=2), engine=engine)
        with TestClient(app) as client:
            with client.websocket_connect("/v1/audio/stream") as ws:
                ws.send_text(json.dumps({"sample_rate": 16000}))
                ws.send_bytes(b"".join(pcm16(samples)))  # one message: none is sent after the close
                event = ws.receive_json()
                assert event["type"] == "error" and event["code"] == "engine_error"
                assert "injected encoder failure" in event["message"]
                assert ws.receive() == {"type": "websocket.close", "code": 1011, "reason": ""}
            assert failed
            with client.websocket_connect("/v1/audio/stream") as ws:
                ws.send_text(json.dumps({"sample_rate": 16000}))
                for m in pcm16(samples):
                    ws.send_bytes(m)
                ws.send_text("done")
                events = []
                while not events or events[-1]["type"] != "done":
                    events.append(ws.receive_json())
                assert events[-2]["type"] == "final" and events[-2]["tokens"]
    finally:
        engine.shutdown()


def test_a_chunk_the_model_cannot_serve_stops_serve_at_start():
    import subprocess
    import sys

    from tests.server.conftest import REPO_ROOT, _free_port

    argv = ["serve", "--model", str(CAUSAL), "--port", str(_free_port()), "--stream-chunk-ms", "100"]
    run_ = subprocess.run(
        [sys.executable, "-m", "oasr.cli.main", *argv], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert run_.returncode == 2
    assert "live streams: chunk of 100 ms is not a whole number" in run_.stderr and "not starting" in run_.stderr


def test_a_bug_in_a_session_closes_it_with_1011_and_frees_its_slot(clips, monkeypatch):
    from starlette.testclient import TestClient

    from oasr.engine.async_engine import AsyncEngine
    from oasr.server import streaming
    from oasr.server.app import create_app
    from oasr.server.settings import ServerSettings

    def broken(self, data):
        raise ZeroDivisionError("a bug")

    engine = AsyncEngine(str(CAUSAL), max_streams=1, max_audio_s=MAX_AUDIO_S)
    try:
        app = create_app(ServerSettings(model=str(CAUSAL), max_streams=1), engine=engine)
        with TestClient(app) as client:
            with monkeypatch.context() as patch:
                patch.setattr(streaming.StreamConfig, "samples", broken)
                with client.websocket_connect("/v1/audio/stream") as ws:
                    ws.send_text(json.dumps({"sample_rate": 16000}))
                    ws.send_bytes(b"\x00\x00" * 160)
                    assert ws.receive_json() == {
                        "type": "error",
                        "code": "internal_error",
                        "message": "internal error: ZeroDivisionError",
                    }
                    assert ws.receive()["code"] == 1011
            assert engine.streaming.core.num_streams == 0
            with client.websocket_connect("/v1/audio/stream") as ws:  # the one slot is free again
                ws.send_text(json.dumps({"sample_rate": 16000}))
                ws.send_bytes(b"".join(pcm16(clips["bambatse_02_haggard_0323.wav"])))
                ws.send_text("done")
                events = []
                while not events or events[-1]["type"] != "done":
                    events.append(ws.receive_json())
                assert events[-2]["type"] == "final"
    finally:
        engine.shutdown()
