"""``/v1/realtime`` (OpenAI's Realtime transcription sessions) on an in-process ``oasr serve`` app:
the official ``openai`` package's realtime clients (GA and beta) against a streaming model (WeNet's
tiny causal U2++ fixture: the transcript equals ``ASREngine.open_stream``'s) and an offline one
(Whisper tiny.en on data/jfk.flac: each turn's transcript equals ``/v1/audio/transcriptions`` of
the same audio, committed by hand and cut by the server VAD), then the raw ``websockets`` client
through every event and error shape, the API key (header and subprotocol) and the intent."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("websockets")
pytest.importorskip("uvicorn")
pytest.importorskip("silero_vad")
from openai.types.realtime import (  # noqa: E402
    ConversationItemInputAudioTranscriptionCompletedEvent,
    InputAudioBufferCommittedEvent,
    InputAudioBufferSpeechStartedEvent,
    InputAudioBufferSpeechStoppedEvent,
    RealtimeErrorEvent,
    SessionCreatedEvent,
    SessionUpdatedEvent,
)
from websockets.asyncio.client import connect  # noqa: E402
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402

from oasr.metrics import error_rates  # noqa: E402
from oasr.models.bundled import bundled_path  # noqa: E402
from oasr.server.realtime import _wav  # noqa: E402
from oasr.server.realtime_protocol import G711  # noqa: E402
from tests.conftest import FIXTURES_DIR, REPO_ROOT  # noqa: E402

CAUSAL = FIXTURES_DIR / "wenet-u2pp-tiny-causal"
KEY = "rt-key"
RATE = 24000
PIECE = 2400  # samples per append (100 ms at 24 kHz)
IDLE_S = 5.0


class InProcessServer:
    """``create_app`` over ``engine`` served by uvicorn on a free port, on a thread."""

    def __init__(self, settings, engine) -> None:
        import uvicorn

        from oasr.server.app import create_app
        from oasr.server.lifecycle import _ws_protocol, bind_socket

        self.engine = engine
        sock = bind_socket("127.0.0.1", 0)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            create_app(settings, engine=engine),
            ws=_ws_protocol(),
            ws_max_size=settings.max_message_bytes,
            log_level="warning",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, query: str = "intent=transcription") -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime?{query}"

    def client(self, key: str = "unused"):
        return openai.AsyncOpenAI(
            api_key=key, base_url=self.http + "/v1", websocket_base_url=f"ws://127.0.0.1:{self.port}/v1", max_retries=0
        )

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.engine.shutdown()


@pytest.fixture(scope="module")
def jfk() -> np.ndarray:
    """data/jfk.flac as 24-kHz PCM16."""
    from oasr.audio import load_audio

    x = load_audio(REPO_ROOT / "data" / "jfk.flac", RATE)
    return (np.clip(x, -1, 1) * 32767).astype("<i2")


@pytest.fixture(scope="module")
def wenet():
    from oasr.engine.async_engine import AsyncEngine
    from oasr.server.settings import ServerSettings

    if not (CAUSAL / "train.yaml").is_file():
        pytest.skip(f"fixture not found at {CAUSAL}")
    settings = ServerSettings(model=str(CAUSAL), served_model_names=("wenet",), api_key=KEY, stream_idle_s=IDLE_S)
    server = InProcessServer(settings, AsyncEngine(str(CAUSAL)))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def reference(wenet):
    """The in-process engine the streaming model's transcripts are compared with."""
    from oasr.engine.engine import ASREngine

    return ASREngine(str(CAUSAL))


def final_text(engine, samples: np.ndarray, rate: int) -> str:
    """The final text of an in-process live stream of ``samples``."""
    stream = engine.open_stream(sample_rate=rate)
    return " ".join(e.text for e in stream.feed(samples) + stream.finish() if e.type == "final")


@pytest.fixture(scope="module")
def whisper():
    from oasr.engine.async_engine import AsyncEngine
    from oasr.server.settings import ServerSettings

    if bundled_path("tiny.en") is None:
        pytest.skip("tiny.en is not installed (oasr's whisper-tiny-en extra)")
    settings = ServerSettings(
        model="tiny.en", served_model_names=("tiny.en", "whisper-1"), request_options={"beam_size": 1}
    )
    server = InProcessServer(settings, AsyncEngine("tiny.en"))
    yield server
    server.stop()


def b64(pcm: np.ndarray) -> str:
    return base64.b64encode(pcm.astype("<i2").tobytes()).decode()


def http_text(server: InProcessServer, pcm: np.ndarray, model: str) -> str:
    r = httpx.post(
        server.http + "/v1/audio/transcriptions",
        files={"file": ("turn.wav", _wav(pcm, RATE), "audio/wav")},
        data={"model": model},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    return r.json()["text"]


def ms_slice(pcm: np.ndarray, start_ms: int, end_ms: int) -> np.ndarray:
    return pcm[round(start_ms * RATE / 1000) : round(end_ms * RATE / 1000)]


async def until(conn, kinds: set[str], count: int = 1, timeout: float = 120) -> list:
    """Events from an openai connection until ``count`` of ``kinds`` came (all of them returned)."""
    out, seen = [], 0
    async with asyncio.timeout(timeout):
        while seen < count:
            event = await conn.recv()
            out.append(event)
            seen += event.type in kinds
    return out


DONE = {"conversation.item.input_audio_transcription.completed", "conversation.item.input_audio_transcription.failed"}


# ---------------------------------------------------------------------------
# The official client


def test_openai_client_streaming_model_equals_open_stream(wenet, reference, jfk):
    async def session():
        async with wenet.client(KEY).realtime.connect(extra_query={"intent": "transcription"}) as conn:
            created = await conn.recv()
            assert created.type == "session.created" and created.session.type == "transcription"
            await conn.session.update(
                session={
                    "type": "transcription",
                    "audio": {"input": {"transcription": {"model": "wenet"}, "turn_detection": None}},
                }
            )
            updated = await conn.recv()
            assert updated.type == "session.updated" and updated.session.audio.input.turn_detection is None
            for i in range(0, len(jfk), PIECE):
                await conn.input_audio_buffer.append(audio=b64(jfk[i : i + PIECE]))
            await conn.input_audio_buffer.commit()
            return await until(conn, DONE)

    events = asyncio.run(session())
    committed = [e for e in events if e.type == "input_audio_buffer.committed"]
    completed = events[-1]
    assert completed.type == "conversation.item.input_audio_transcription.completed"
    assert len(committed) == 1 and committed[0].previous_item_id is None and completed.item_id == committed[0].item_id
    assert completed.transcript == final_text(reference, jfk.astype(np.float32) / 32768.0, RATE)
    assert completed.transcript
    assert completed.usage.type == "duration" and completed.usage.seconds == pytest.approx(len(jfk) / RATE, abs=1e-3)
    deltas = "".join(e.delta for e in events if e.type == "conversation.item.input_audio_transcription.delta")
    assert completed.transcript.startswith(deltas) and deltas  # never taken back


def test_openai_client_whisper_manual_commit_equals_http(whisper, jfk):
    async def session():
        async with whisper.client().realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.recv()
            audio_input = {"format": {"type": "audio/pcm", "rate": RATE}, "turn_detection": None}
            await conn.session.update(
                session={
                    "type": "transcription",
                    "audio": {"input": {**audio_input, "transcription": {"model": "whisper-1", "language": "en"}}},
                }
            )
            assert (await conn.recv()).session.audio.input.transcription.model == "whisper-1"
            for i in range(0, len(jfk), PIECE):
                await conn.input_audio_buffer.append(audio=b64(jfk[i : i + PIECE]))
            await conn.input_audio_buffer.commit()
            return await until(conn, DONE)

    events = asyncio.run(session())
    completed = events[-1]
    assert completed.type == "conversation.item.input_audio_transcription.completed"
    assert completed.transcript == http_text(whisper, jfk, "whisper-1")
    assert "ask not what your country can do for you" in completed.transcript.lower()
    deltas = [e.delta for e in events if e.type == "conversation.item.input_audio_transcription.delta"]
    assert len(deltas) > 1 and "".join(deltas) == completed.transcript  # Whisper streams its text


@pytest.fixture(scope="module")
def whisper_live():
    """tiny.en served with ``realtime_live``: sessions stream by local agreement (Whisper live)."""
    from oasr.engine.async_engine import AsyncEngine
    from oasr.server.settings import ServerSettings

    if bundled_path("tiny.en") is None:
        pytest.skip("tiny.en is not installed (oasr's whisper-tiny-en extra)")
    settings = ServerSettings(
        model="tiny.en", served_model_names=("whisper-1",), request_options={"beam_size": 1}, realtime_live=True
    )
    server = InProcessServer(settings, AsyncEngine("tiny.en"))
    yield server
    server.stop()


def test_openai_client_whisper_live_deltas_are_confirmed_pieces(whisper_live, whisper, jfk):
    """With ``--realtime-live`` the deltas come while the audio is still arriving (pieces local
    agreement confirmed), and the turn's transcript is Whisper's text of the whole turn."""

    async def session():
        async with whisper_live.client().realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.recv()
            await conn.session.update(
                session={
                    "type": "transcription",
                    "audio": {"input": {"transcription": {"model": "whisper-1"}, "turn_detection": None}},
                }
            )
            await conn.recv()
            events, sent = [], {"commit": False}

            async def read():
                while True:
                    event = await conn.recv()
                    events.append((sent["commit"], event))
                    if event.type in DONE:
                        return

            reader = asyncio.create_task(read())
            for i in range(0, len(jfk), PIECE):  # at twice the speed of a live source
                await conn.input_audio_buffer.append(audio=b64(jfk[i : i + PIECE]))
                await asyncio.sleep(PIECE / RATE / 2)
            sent["commit"] = True
            await conn.input_audio_buffer.commit()
            await asyncio.wait_for(reader, 120)
            return [e for after, e in events if not after], [e for _, e in events]

    before_commit, events = asyncio.run(session())
    kind = "conversation.item.input_audio_transcription.delta"
    completed = events[-1]
    assert completed.type == "conversation.item.input_audio_transcription.completed"
    deltas = [e.delta for e in events if e.type == kind]
    assert "".join(deltas) == completed.transcript  # confirmed pieces are never taken back
    assert any(e.type == kind for e in before_commit), "no delta came before the commit"
    rates = error_rates([(http_text(whisper, jfk, "whisper-1"), completed.transcript, "en")])
    assert rates["en"].rate <= 0.1, completed.transcript


def test_the_docs_example_prints_what_http_transcribes(whisper, jfk):
    """docs/realtime.md's session, as written, against this server (served as "whisper-1")."""
    code = re.findall(r"```python\n(.*?)```", (REPO_ROOT / "docs" / "realtime.md").read_text(), re.S)[0]
    code = code.replace(":8000/", f":{whisper.port}/").replace('"whisper-base"', '"whisper-1"')
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    deltas, transcript = run.stdout.strip().splitlines()[-2:]
    assert transcript == deltas == http_text(whisper, jfk, "whisper-1")


def test_beta_client_whisper_server_vad_turns_equal_http(whisper, jfk):
    audio = np.concatenate([jfk, np.zeros(RATE, np.int16)])  # a second of silence ends the last turn

    async def session():
        client = whisper.client()
        async with client.beta.realtime.connect(model="tiny.en", extra_query={"intent": "transcription"}) as conn:
            created = await conn.recv()
            assert created.type == "transcription_session.created"
            vad = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 600}
            await conn.transcription_session.update(
                session={
                    "input_audio_format": "pcm16",
                    "input_audio_transcription": {"model": "tiny.en"},
                    "turn_detection": vad,
                }
            )
            updated = await conn.recv()
            assert updated.type == "transcription_session.updated"
            for i in range(0, len(audio), PIECE):
                await conn.input_audio_buffer.append(audio=b64(audio[i : i + PIECE]))
            events = []
            async with asyncio.timeout(120):
                while True:  # every started turn stops, is committed and completes
                    events.append(await conn.recv())
                    kinds = [e.type for e in events]
                    if kinds.count("input_audio_buffer.speech_started") == sum(k in DONE for k in kinds) > 0:
                        if kinds.count("input_audio_buffer.speech_stopped") == kinds.count(
                            "input_audio_buffer.speech_started"
                        ):
                            return updated, events

    updated, events = asyncio.run(session())
    assert updated.session.turn_detection.silence_duration_ms == 600
    started = {e.item_id: e.audio_start_ms for e in events if e.type == "input_audio_buffer.speech_started"}
    stopped = {e.item_id: e.audio_end_ms for e in events if e.type == "input_audio_buffer.speech_stopped"}
    completed = [e for e in events if e.type == "conversation.item.input_audio_transcription.completed"]
    assert started.keys() == stopped.keys() == {e.item_id for e in completed}
    committed = [e for e in events if e.type == "input_audio_buffer.committed"]
    assert [c.previous_item_id for c in committed] == [None] + [c.item_id for c in committed[:-1]]
    for e in completed:
        turn = ms_slice(audio, started[e.item_id], stopped[e.item_id])
        assert 0 <= started[e.item_id] < stopped[e.item_id] <= len(audio) * 1000 / RATE
        assert e.transcript == http_text(whisper, turn, "tiny.en")
    text = re.sub(r"[^a-z ]", "", " ".join(e.transcript for e in completed).lower())
    assert "ask not what your country can do for you" in text


# ---------------------------------------------------------------------------
# Raw WebSocket: every event and error shape


async def recv(ws) -> dict:
    async with asyncio.timeout(60):
        return json.loads(await ws.recv())


async def error_of(ws, message) -> dict:
    await ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
    event = await recv(ws)
    assert event["type"] == "error", event
    RealtimeErrorEvent.model_validate(event)
    return event["error"]


def auth(key: str = KEY) -> dict:
    return {"Authorization": f"Bearer {key}"}


def test_raw_events_and_errors(wenet, reference, jfk):
    async def go():
        # The API key: none, wrong -> 401 before the upgrade; the browser's subprotocol form passes.
        for headers in ({}, auth("wrong")):
            with pytest.raises(InvalidStatus) as e:
                async with connect(wenet.url(), additional_headers=headers):
                    pass
            assert e.value.response.status_code == 401
        async with connect(wenet.url(), subprotocols=["realtime", f"openai-insecure-api-key.{KEY}"]) as ws:
            assert ws.subprotocol == "realtime"
            assert (await recv(ws))["type"] == "session.created"
        # Not a transcription session, or a model not served: one error event, then 1008.
        for query, code in (
            ("model=gpt-realtime", "invalid_intent"),
            ("intent=conversation", "invalid_intent"),
            ("intent=transcription&model=nope", "model_not_found"),
        ):
            async with connect(wenet.url(query), additional_headers=auth()) as ws:
                event = await recv(ws)
                RealtimeErrorEvent.model_validate(event)
                assert event["error"]["code"] == code
                with pytest.raises(ConnectionClosed):
                    await ws.recv()
                assert ws.close_code == 1008

        async with connect(wenet.url(), additional_headers=auth(), max_size=None) as ws:
            created = await recv(ws)
            SessionCreatedEvent.model_validate(created)
            s = created["session"]
            assert s["type"] == "transcription" and s["audio"]["input"]["format"] == {
                "type": "audio/pcm",
                "rate": 24000,
            }
            assert s["audio"]["input"]["turn_detection"] == {
                "type": "server_vad",
                "threshold": 0.5,
                "prefix_padding_ms": 300,
                "silence_duration_ms": 500,
            }
            cases = [
                ("not json", "invalid_json", None),
                (b"\x00\x01", "invalid_json", None),
                ([1, 2], "invalid_json", None),
                ({"event_id": "e1"}, "missing_required_parameter", "type"),
                ({"type": "response.create", "event_id": "e2"}, "invalid_value", "type"),
                ({"type": "input_audio_buffer.append"}, "missing_required_parameter", "audio"),
                ({"type": "input_audio_buffer.append", "audio": "***"}, "invalid_value", "audio"),
                ({"type": "input_audio_buffer.append", "audio": 5}, "invalid_type", "audio"),
                ({"type": "input_audio_buffer.append", "audio": "AAAA", "x": 1}, "unknown_parameter", "x"),
                (
                    {"type": "input_audio_buffer.append", "audio": base64.b64encode(b"abc").decode()},
                    "invalid_value",
                    "audio",
                ),
                ({"type": "input_audio_buffer.commit", "event_id": "e3"}, "input_audio_buffer_commit_empty", None),
                ({"type": "session.update"}, "missing_required_parameter", "session"),
                ({"type": "session.update", "session": {}}, "missing_required_parameter", "session.type"),
                ({"type": "session.update", "session": {"type": "realtime"}}, "invalid_value", "session.type"),
                (
                    {"type": "session.update", "session": {"type": "transcription", "voice": "x"}},
                    "unknown_parameter",
                    "session.voice",
                ),
            ]
            path = "session.audio.input"
            for inp, code, param in [
                ({"transcription": {"model": "gpt-4o-transcribe"}}, "invalid_value", f"{path}.transcription.model"),
                ({"transcription": {"language": "xx-nope"}}, "invalid_value", f"{path}.transcription.language"),
                ({"turn_detection": {"type": "semantic_vad"}}, "invalid_value", f"{path}.turn_detection.type"),
                ({"transcription": {"keywords": ["oasr"]}}, "invalid_value", f"{path}.transcription.keywords"),
                (
                    {"turn_detection": {"type": "server_vad", "threshold": 2}},
                    "invalid_value",
                    f"{path}.turn_detection.threshold",
                ),
                ({"format": {"type": "audio/opus"}}, "invalid_value", f"{path}.format.type"),
                ({"noise_reduction": {"type": "loud"}}, "invalid_value", f"{path}.noise_reduction.type"),
            ]:
                cases.append(
                    (
                        {"type": "session.update", "session": {"type": "transcription", "audio": {"input": inp}}},
                        code,
                        param,
                    )
                )
            cases.append(
                (
                    {"type": "transcription_session.update", "session": {"input_audio_format": "mp3"}},
                    "invalid_value",
                    "session.input_audio_format",
                )
            )
            for message, code, param in cases:
                err = await error_of(ws, message)
                assert (err["code"], err["param"]) == (code, param), (message, err)
                assert err["type"] == "invalid_request_error" and err["message"]
                if isinstance(message, dict) and "event_id" in message:
                    assert err["event_id"] == message["event_id"]
            commit_empty = await error_of(ws, {"type": "input_audio_buffer.commit"})
            assert "100ms" in commit_empty["message"]

            # A client that sends the whole typed object (nulls for what it did not set) is understood.
            from openai.types.realtime import RealtimeTranscriptionSessionCreateRequest

            full = RealtimeTranscriptionSessionCreateRequest.model_validate(
                {
                    "type": "transcription",
                    "audio": {
                        "input": {
                            "transcription": {"model": "wenet"},
                            "turn_detection": {"type": "server_vad", "silence_duration_ms": 700},
                        }
                    },
                }
            ).model_dump(mode="json")
            assert full["audio"]["input"]["turn_detection"]["threshold"] is None
            await ws.send(json.dumps({"type": "session.update", "session": full}))
            updated = await recv(ws)
            assert updated["type"] == "session.updated", updated
            assert updated["session"]["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 700

            # The failed updates changed nothing; a good one (GA) is reported whole.
            nr = {"type": "far_field"}
            await ws.send(
                json.dumps(
                    {
                        "type": "session.update",
                        "session": {
                            "type": "transcription",
                            "audio": {
                                "input": {
                                    "turn_detection": None,
                                    "noise_reduction": nr,
                                    "transcription": {"model": "wenet"},
                                }
                            },
                        },
                    }
                )
            )
            updated = await recv(ws)
            SessionUpdatedEvent.model_validate(updated)
            got = updated["session"]["audio"]["input"]
            assert got["turn_detection"] is None and got["noise_reduction"] == nr
            assert got["transcription"] == {"model": "wenet", "language": None, "prompt": ""}

            # Clear, then a manual turn: committed + completed, equal to an in-process stream.
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": b64(jfk[:RATE])}))
            await ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
            assert (await recv(ws))["type"] == "input_audio_buffer.cleared"
            turn = jfk[: 3 * RATE]
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": b64(turn)}))
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            events = []
            while not events or events[-1]["type"] != "conversation.item.input_audio_transcription.completed":
                events.append(await recv(ws))
            committed = next(e for e in events if e["type"] == "input_audio_buffer.committed")
            InputAudioBufferCommittedEvent.model_validate(committed)
            ConversationItemInputAudioTranscriptionCompletedEvent.model_validate(events[-1])
            assert events[-1]["transcript"] == final_text(reference, turn.astype(np.float32) / 32768.0, RATE)
            assert events[-1]["item_id"] == committed["item_id"]
            first_item = committed["item_id"]

            # Beta update: G.711 mu-law with server VAD, answered in the beta shape.
            vad = {"type": "server_vad", "silence_duration_ms": 400}
            await ws.send(
                json.dumps(
                    {
                        "type": "transcription_session.update",
                        "session": {
                            "input_audio_format": "g711_ulaw",
                            "turn_detection": vad,
                            "input_audio_noise_reduction": None,
                        },
                    }
                )
            )
            beta = await recv(ws)
            assert beta["type"] == "transcription_session.updated"
            assert (
                beta["session"]["input_audio_format"] == "g711_ulaw"
                and beta["session"]["input_audio_noise_reduction"] is None
            )
            assert beta["session"]["turn_detection"] == {
                "type": "server_vad",
                "threshold": 0.5,
                "prefix_padding_ms": 300,
                "silence_duration_ms": 400,
            }
            from oasr.audio import load_audio

            x8k = load_audio(REPO_ROOT / "data" / "jfk.flac", 8000)
            ulaw = _ulaw_encode(np.concatenate([x8k, np.zeros(8000, np.float32)]))
            for i in range(0, len(ulaw), 800):
                await ws.send(
                    json.dumps(
                        {"type": "input_audio_buffer.append", "audio": base64.b64encode(ulaw[i : i + 800]).decode()}
                    )
                )
            kinds: list[dict] = []
            while not kinds or sum(e["type"] == "input_audio_buffer.speech_started" for e in kinds) != sum(
                e["type"] == "conversation.item.input_audio_transcription.completed" for e in kinds
            ):
                kinds.append(await recv(ws))
            started = [e for e in kinds if e["type"] == "input_audio_buffer.speech_started"]
            stopped = [e for e in kinds if e["type"] == "input_audio_buffer.speech_stopped"]
            for e in started:
                InputAudioBufferSpeechStartedEvent.model_validate(e)
            for e in stopped:
                InputAudioBufferSpeechStoppedEvent.model_validate(e)
            assert started and [e["item_id"] for e in started] == [e["item_id"] for e in stopped]
            # The session's timeline runs on from the PCM audio (4 s before this format).
            assert all(4000 <= a["audio_start_ms"] < b["audio_end_ms"] for a, b in zip(started, stopped))
            commits = [e for e in kinds if e["type"] == "input_audio_buffer.committed"]
            assert commits[0]["previous_item_id"] == first_item
            # Each VAD turn of a streaming model is the live stream of exactly that audio.
            texts = {e["item_id"]: e["transcript"] for e in kinds if e["type"].endswith("completed")}
            decoded = G711["audio/pcmu"][np.frombuffer(ulaw, np.uint8)].astype(np.float32) / 32768.0
            for a, b in zip(started, stopped):
                turn = decoded[(a["audio_start_ms"] - 4000) * 8 : (b["audio_end_ms"] - 4000) * 8]
                assert texts[a["item_id"]] == final_text(reference, turn, 8000)
        # The server goes on serving.
        assert httpx.get(wenet.http + "/health").status_code == 200
        async with connect(wenet.url(), additional_headers=auth()) as ws:
            assert (await recv(ws))["type"] == "session.created"

    asyncio.run(go())


def test_an_idle_session_is_closed_with_an_error_event(wenet):
    async def go():
        async with connect(wenet.url(), additional_headers=auth()) as ws:
            assert (await recv(ws))["type"] == "session.created"
            started = time.monotonic()
            event = await recv(ws)
            RealtimeErrorEvent.model_validate(event)
            assert event["error"]["code"] == "idle_timeout"
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            assert ws.close_code == 1008 and time.monotonic() - started >= IDLE_S - 0.5

    asyncio.run(go())


def _ulaw_encode(x: np.ndarray) -> bytes:
    """G.711 mu-law codes of float samples (the inverse of the server's table, by nearest value)."""
    table = G711["audio/pcmu"].astype(np.int32)
    order = np.argsort(table)
    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype(np.int32)
    idx = np.clip(np.searchsorted(table[order], pcm), 1, 255)
    lo, hi = order[idx - 1], order[idx]
    codes = np.where(np.abs(table[lo] - pcm) <= np.abs(table[hi] - pcm), lo, hi)
    return codes.astype(np.uint8).tobytes()


def test_g711_tables_match_the_standard():
    audioop = pytest.importorskip("audioop")
    codes = bytes(range(256))
    assert (G711["audio/pcmu"] == np.frombuffer(audioop.ulaw2lin(codes, 2), "<i2")).all()
    assert (G711["audio/pcma"] == np.frombuffer(audioop.alaw2lin(codes, 2), "<i2")).all()


def test_stable_prefix_never_takes_text_back():
    from oasr.server.realtime import stable_prefix

    assert stable_prefix("", "hello wor") == ""
    assert stable_prefix("hello wor", "hello world and") == "hello "
    assert stable_prefix("hello world and", "hello world and") == "hello world and"
    assert stable_prefix("你好世", "你好世界") == "你好世"
