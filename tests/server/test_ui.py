"""The browser page at ``/`` (``oasr.server.ui``).

In headless Chromium (Debian's ``chromium``, driven by Playwright) whose fake microphone plays
data/jfk.flac, against ``oasr serve``'s app in this process: the page lists ``/v1/models`` once
its API key is entered, streams the microphone over ``/v1/audio/stream`` (the key as the
WebSocket subprotocol) and shows the stream's finals, which equal an in-process
``ASREngine.open_stream`` of the very samples the page sent (and those samples are the clip); with
an offline-only model it says so and transcribes a picked and a dropped file as
``/v1/audio/transcriptions`` does. Without a browser: the files, their headers, no path
traversal, ``--no-ui`` and the WebSocket key subprotocol.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import threading
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import FIXTURES_DIR, REPO_ROOT
from tests.server.conftest import _free_port

pytest.importorskip("fastapi")

CAUSAL = FIXTURES_DIR / "wenet-u2pp-tiny-causal"
KEY = "ui-key"
STREAM_SLOTS = 2  # the engine's encoder cache slots
CLIP = REPO_ROOT / "data" / "jfk.flac"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)"
)


class InProcessServer:
    """``create_app(settings, engine)`` served by uvicorn in a thread until ``stop()``."""

    def __init__(self, settings, engine) -> None:
        import uvicorn

        from oasr.server.app import create_app

        self.engine = engine
        self.port = _free_port()
        config = uvicorn.Config(create_app(settings, engine), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the in-process server did not start")
            time.sleep(0.05)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.engine.shutdown()


def _serve(model: str, **settings):
    from oasr.engine.async_engine import AsyncEngine
    from oasr.server.settings import ServerSettings

    engine = AsyncEngine(model, max_streams=STREAM_SLOTS)
    return InProcessServer(ServerSettings(model=model, **settings), engine)


@pytest.fixture(scope="module")
def clip() -> np.ndarray:
    """data/jfk.flac at 16 kHz."""
    from oasr.audio import load_audio

    return load_audio(CLIP)


@pytest.fixture(scope="module")
def clip_wav(clip, tmp_path_factory) -> Path:
    """The clip as a 16-bit PCM WAV: what Chromium's fake microphone plays."""
    path = tmp_path_factory.mktemp("ui") / "jfk.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.clip(clip, -1, 1) * 32767).astype("<i2").tobytes())
    return path


@pytest.fixture(scope="module")
def browser(clip_wav):
    if CHROMIUM is None:
        pytest.skip("no chromium binary on PATH (Debian: apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={clip_wav}%noloop",
                "--autoplay-policy=no-user-gesture-required",
            ],
        )
        yield b
        b.close()


@pytest.fixture(scope="module")
def streaming_server():
    if not (CAUSAL / "train.yaml").is_file():
        pytest.skip(f"fixture not found at {CAUSAL}")
    server = _serve(str(CAUSAL), api_key=KEY)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def offline_server():
    from oasr.models.bundled import bundled_path

    if bundled_path("tiny.en") is None:
        pytest.skip("tiny.en is not installed (oasr's whisper-tiny-en extra)")
    server = _serve("tiny.en", request_options={"beam_size": 1})
    yield server
    server.stop()


class Frames:
    """The page's WebSocket traffic, as Chromium saw it."""

    def __init__(self, page) -> None:
        self.sent: list[str | bytes] = []
        self.received: list[dict] = []
        page.on("websocket", self._attach)

    def _attach(self, ws) -> None:
        ws.on("framesent", lambda payload: self.sent.append(payload))
        ws.on("framereceived", lambda payload: self.received.append(json.loads(payload)))

    def config(self) -> dict:
        return json.loads(next(m for m in self.sent if isinstance(m, str) and m.startswith("{")))

    def samples(self) -> np.ndarray:
        pcm = b"".join(m for m in self.sent if isinstance(m, bytes))
        return np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0


def _wait(condition, timeout_s: float, what: str, page) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; the page says: {page.inner_text('main')!r}")
        page.wait_for_timeout(100)


def _envelope_match(sent: np.ndarray, clip: np.ndarray, max_cut_s: float = 1.0) -> float:
    """How well the loudness of ``sent`` (16 kHz) follows the clip's: the best correlation of their
    20-ms RMS envelopes over the lags at which the clip fits in ``sent``, up to ``max_cut_s`` of its
    start cut off (played before the page's capture ran). The samples themselves do not line up:
    Chromium's fake microphone resamples the file and its clock drifts."""

    def envelope(x: np.ndarray) -> np.ndarray:
        n = len(x) // 320
        return np.sqrt((x[: n * 320].reshape(n, 320) ** 2).mean(1))

    a, b = envelope(sent), envelope(clip)
    best = -1.0
    for lag in range(-round(max_cut_s * 50), len(a) - len(b) + 1):  # clip frame i is sent frame i + lag
        x = a[max(lag, 0) : lag + len(b)]
        y = b[max(-lag, 0) : max(-lag, 0) + len(x)]
        best = max(best, float(np.corrcoef(x, y)[0, 1]))
    return best


@needs_chromium
def test_the_microphone_streams_and_the_page_shows_the_streams_finals(browser, streaming_server, clip, tmp_path):
    import httpx
    import soxr

    from oasr.engine.engine import ASREngine

    page = browser.new_page()
    frames = Frames(page)
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    page.on("pageerror", lambda error: console.append(f"uncaught: {error}"))
    page.goto(streaming_server.base_url + "/")
    page.get_by_role("alert").filter(has_text="needs an API key").wait_for()
    page.fill("#api-key", KEY)
    page.press("#api-key", "Tab")  # "change": the page lists the models with the key
    page.get_by_text("Ready: press Start").wait_for()
    listed = httpx.get(f"{streaming_server.base_url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert page.locator("#model option").all_text_contents() == [card["id"] for card in listed["data"]]
    assert page.is_hidden("#error")

    page.click("#record")
    page.get_by_text("Listening").wait_for()
    seconds = len(clip) / 16000 + 0.5
    shown = set()  # the partial text on the page while the audio plays

    def clip_sent() -> bool:
        shown.add(page.text_content("#partial"))
        return bool(frames.sent) and len(frames.samples()) >= seconds * frames.config()["sample_rate"]

    _wait(clip_sent, 40, "audio", page)
    page.click("#record")
    page.locator("#live-status", has_text="Done.").wait_for(timeout=30_000)
    page.screenshot(path=tmp_path / "ui-live.png", full_page=True)
    # Playwright reports frames as events of their own, which may come after the page's state.
    _wait(lambda: "done" in frames.sent and frames.received[-1]["type"] == "done", 10, "the last frames", page)

    finals = [e["text"] for e in frames.received if e["type"] == "final"]
    assert finals
    partials = {e["text"] for e in frames.received if e["type"] == "partial"}
    assert len(shown - {""}) > 3 and shown - {""} <= partials  # partial text shown in place as it came
    assert page.locator("#transcript .final").all_text_contents() == finals
    assert page.text_content("#partial") == "" and page.is_hidden("#error")
    assert not [m for m in console if "Content Security Policy" in m or m.startswith("uncaught")], console

    config = frames.config()  # {"sample_rate": the AudioContext's, "sample_format": "pcm16", "endpoint": true}
    rate = config["sample_rate"]
    sent = frames.samples()
    match = _envelope_match(soxr.resample(sent, rate, 16000), clip)
    assert match > 0.9, f"the audio sent is not the clip's (envelope correlation {match:.2f}; 0.98 when it is)"
    options = {k: v for k, v in config.items() if k not in ("sample_format", "model")}
    stream = ASREngine(str(CAUSAL), max_streams=1).open_stream(**options)
    events = stream.feed(sent) + stream.finish()
    assert [e.text for e in events if e.type == "final"] == finals


@needs_chromium
def test_a_refused_stream_is_explained_on_the_page(browser, streaming_server):
    """Every stream slot of the engine taken after the page loaded: Start is refused, and the page
    says why (learnt over HTTP: the browser hides the refused upgrade's answer)."""
    import httpx
    from websockets.sync.client import connect

    page = browser.new_page()
    page.goto(streaming_server.base_url + "/")
    page.fill("#api-key", KEY)
    page.press("#api-key", "Tab")
    page.get_by_text("Ready: press Start").wait_for()
    url = f"ws://127.0.0.1:{streaming_server.port}/v1/audio/stream"
    with contextlib.ExitStack() as held:
        for _ in range(STREAM_SLOTS):
            ws = held.enter_context(connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}))
            ws.send(json.dumps({"sample_rate": 16000}))
            ws.send(np.zeros(1600, "<i2").tobytes())

        def full() -> bool:
            preflight = f"{streaming_server.base_url}/v1/audio/stream"
            return httpx.get(preflight, headers={"Authorization": f"Bearer {KEY}"}).status_code == 429

        _wait(full, 20, "the held streams to take every slot", page)
        page.click("#record")
        alert = page.get_by_role("alert")
        alert.filter(has_text="The live stream was refused").wait_for(timeout=20_000)
        assert "no room for one more live stream" in alert.inner_text()
        assert page.text_content("#record") == "Start" and page.is_enabled("#record")  # busy: try again later


@needs_chromium
def test_whisper_streams_live_and_files_are_transcribed(browser, offline_server, clip, audio_dir, tmp_path):
    """An offline model (Whisper tiny.en) streams from the microphone by local agreement (Whisper
    live): the page shows the clip's words as the stream confirms them; files go over HTTP."""
    import httpx

    page = browser.new_page()
    frames = Frames(page)
    page.goto(offline_server.base_url + "/")
    page.get_by_text("Ready: press Start").wait_for()
    assert page.locator("#model option").all_text_contents() == ["tiny.en"]
    page.click("#record")
    page.get_by_text("Listening").wait_for()
    seconds = len(clip) / 16000 + 0.5
    _wait(
        lambda: bool(frames.sent) and len(frames.samples()) >= seconds * frames.config()["sample_rate"],
        40,
        "audio",
        page,
    )
    page.click("#record")
    page.locator("#live-status", has_text="Done.").wait_for(timeout=60_000)
    _wait(lambda: "done" in frames.sent and frames.received[-1]["type"] == "done", 10, "the last frames", page)
    finals = [e["text"] for e in frames.received if e["type"] == "final"]
    assert len(finals) > 1  # confirmed piece by piece while the audio played
    assert page.locator("#transcript .final").all_text_contents() == finals
    heard = " ".join(finals).lower()
    assert "fellow americans" in heard and "your country" in heard
    page.screenshot(path=tmp_path / "ui-whisper-live.png", full_page=True)

    def expected(path: Path) -> str:
        with path.open("rb") as f:
            form = {"model": "tiny.en", "response_format": "json"}
            url = f"{offline_server.base_url}/v1/audio/transcriptions"
            r = httpx.post(url, files={"file": f}, data=form, timeout=60)
        r.raise_for_status()
        return r.json()["text"]

    page.set_input_files("#file", str(CLIP))
    page.locator("#file-status", has_text="jfk.flac:").wait_for(timeout=30_000)
    text = page.text_content("#file-text")
    assert text == expected(CLIP) and "fellow Americans" in text
    page.screenshot(path=tmp_path / "ui-file.png", full_page=True)

    dropped = audio_dir / "bambatse_02_haggard_0323.wav"
    page.evaluate(
        """([name, data]) => {
            const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], name, { type: "audio/wav" }));
            const drop = document.getElementById("drop");
            drop.dispatchEvent(new DragEvent("drop", { dataTransfer: transfer, bubbles: true, cancelable: true }));
        }""",
        [dropped.name, base64.b64encode(dropped.read_bytes()).decode()],
    )
    page.locator("#file-status", has_text=f"{dropped.name}:").wait_for(timeout=30_000)
    assert page.text_content("#file-text") == expected(dropped)
    assert page.is_hidden("#error")


# ---------------------------------------------------------------------------
# Without a browser


def _client(*argv: str):
    import argparse

    from starlette.testclient import TestClient

    from oasr.cli import serve
    from oasr.server.app import create_app

    parser = argparse.ArgumentParser()
    serve.register(parser.add_subparsers())
    return TestClient(create_app(serve.settings_from_args(parser.parse_args(["serve", *argv]))))


def test_the_page_and_its_files_are_served_with_their_types_and_a_same_origin_policy():
    from oasr.server.ui import FILES, UI_DIR

    client = _client()
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "script-src 'self'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    for name, content_type in FILES.items():
        r = client.get(f"/ui/{name}")
        assert r.status_code == 200 and r.headers["content-type"] == content_type, name
    assert sorted(p.name for p in UI_DIR.iterdir()) == sorted(FILES)  # every file shipped is served
    for path in ("/ui/../app.py", "/ui/..%2fapp.py", "/ui/%2e%2e/routes.py", "/ui/ui.py", "/ui/", "/index.html"):
        assert client.get(path).status_code == 404, path


def test_no_ui_leaves_the_page_out():
    client = _client("--no-ui")
    assert client.get("/").status_code == 404
    assert client.get("/ui/app.js").status_code == 404


def test_a_websocket_takes_the_key_as_its_subprotocol(streaming_server):
    import httpx
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    url = f"ws://127.0.0.1:{streaming_server.port}/v1/audio/stream"

    def session(subprotocols):
        with connect(url, subprotocols=subprotocols) as ws:
            ws.send(json.dumps({"sample_rate": 16000}))
            ws.send(np.zeros(3200, "<i2").tobytes())
            ws.send("done")
            events = [json.loads(m) for m in ws]
            return ws.subprotocol, events[-1]["type"]

    assert session([f"openai-insecure-api-key.{KEY}"]) == (f"openai-insecure-api-key.{KEY}", "done")
    for offered in (["openai-insecure-api-key.wrong"], None):
        with pytest.raises(InvalidStatus) as e:
            session(offered)
        assert e.value.response.status_code == 401

    preflight = httpx.get(streaming_server.base_url + "/v1/audio/stream", headers={"Authorization": f"Bearer {KEY}"})
    assert preflight.status_code == 426 and preflight.json()["error"]["code"] == "upgrade_required"
    assert httpx.get(streaming_server.base_url + "/v1/audio/stream").status_code == 401
