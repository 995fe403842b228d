"""Voice-agent frameworks pointed at ``oasr serve`` (the shared tiny.en server, "whisper-1"):
pipecat's OpenAI STT services inside a real pipecat pipeline, and LiveKit Agents' OpenAI STT
plugin, each on the repository's JFK clip. Their transcripts equal the HTTP route's transcript
of the same audio. The Realtime (WebSocket) variants run once the server has ``/v1/realtime``.
"""

from __future__ import annotations

import asyncio
import io
import math
import re
import wave
from email.parser import BytesParser
from email.policy import HTTP

import numpy as np
import pytest

from .conftest import REPO_ROOT, needs_tiny

pytestmark = [pytest.mark.real_weights, needs_tiny]

CLIP = REPO_ROOT / "data" / "jfk.flac"  # 11 s, 16 kHz, 16-bit mono
MODEL = "whisper-1"  # the shared tiny.en server's second name, what agent configs name by default
RATE = 16000
JFK = "and so my fellow americans ask not what your country can do for you ask what you can do for your country"
# The clip's longest pause is under 1.2 s, so a VAD stop this long keeps the whole clip one user
# turn (the frameworks' defaults, 0.2-0.35 s, cut it into four).
TURN_STOP_S = 2.0
FINAL_TIMEOUT_S = 60.0


def _realtime_missing() -> str | None:
    """Why the Realtime tests cannot run: None once the server's router has ``/v1/realtime``."""
    from oasr.server.routes import router

    paths = {getattr(route, "path", None) for route in router.routes}
    return None if "/v1/realtime" in paths else "oasr serve has no /v1/realtime route yet"


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^a-z' ]", " ", text.lower()).split())


@pytest.fixture(scope="module")
def clip_pcm() -> np.ndarray:
    """The clip's 16-bit samples, as the file holds them."""
    sf = pytest.importorskip("soundfile")
    pcm, rate = sf.read(CLIP, dtype="int16")
    assert rate == RATE
    return pcm


def _http(server, audio: bytes, **kw):
    """The HTTP route's transcription of ``audio`` through the official client (the frameworks' reference)."""
    return server.client().audio.transcriptions.create(file=("audio.wav", audio), model=MODEL, **kw)


def _http_text(server, audio: bytes, **kw) -> str:
    return _http(server, audio, **kw).text.strip()


def _wav_samples(data: bytes) -> np.ndarray:
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (RATE, 1, 2)
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def _uploaded_file(content_type: str, body: bytes) -> bytes:
    """The ``file`` part of a multipart/form-data request body."""
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    files = [
        part.get_content()
        for part in message.iter_parts()
        if part.get_param("name", header="content-disposition") == "file"
    ]
    assert len(files) == 1, "one file part per transcription request"
    return files[0]


# -- pipecat ----------------------------------------------------------------------------------


def _pipecat():
    return pytest.importorskip("pipecat", reason="pipecat is not installed (pip install pipecat-ai, see .ci/run)")


async def _run_pipecat(stt, pcm: np.ndarray, *, until_final: bool) -> tuple[list, list[str]]:
    """Feed ``pcm`` then silence as 20 ms audio frames through VAD -> ``stt`` -> a collector, in a
    pipecat pipeline run by its runner; returns the ``TranscriptionFrame``s and the errors the
    collector received.

    Args:
        until_final: end the pipeline only once a transcript arrived (a streaming service sends
            it after the VAD's stop, asynchronously; a segmented one finishes its queue on EndFrame).
    """
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.audio.vad.vad_analyzer import VADParams
    from pipecat.frames.frames import EndFrame, ErrorFrame, InputAudioRawFrame, TranscriptionFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.audio.vad_processor import VADProcessor
    from pipecat.processors.frame_processor import FrameProcessor
    from pipecat.workers.runner import WorkerRunner

    class Collector(FrameProcessor):
        def __init__(self):
            super().__init__()
            self.transcripts: list[TranscriptionFrame] = []
            self.errors: list[str] = []
            self.final = asyncio.Event()

        async def process_frame(self, frame, direction):
            await super().process_frame(frame, direction)
            if isinstance(frame, TranscriptionFrame):
                self.transcripts.append(frame)
                self.final.set()
            elif isinstance(frame, ErrorFrame):
                self.errors.append(frame.error)
                self.final.set()
            await self.push_frame(frame, direction)

    vad = VADProcessor(vad_analyzer=SileroVADAnalyzer(params=VADParams(stop_secs=TURN_STOP_S)))
    collector = Collector()
    worker = PipelineWorker(
        Pipeline([vad, stt, collector]),
        params=PipelineParams(audio_in_sample_rate=RATE),
        idle_timeout_secs=None,
        enable_rtvi=False,
    )
    audio = np.concatenate([pcm, np.zeros(int((TURN_STOP_S + 1.0) * RATE), np.int16)]).astype("<i2").tobytes()
    step = RATE // 50 * 2  # 20 ms of PCM16
    frames = [
        InputAudioRawFrame(audio=audio[i : i + step], sample_rate=RATE, num_channels=1)
        for i in range(0, len(audio), step)
    ]
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    await worker.queue_frames(frames)
    if until_final:
        await asyncio.wait_for(collector.final.wait(), FINAL_TIMEOUT_S)
    await worker.queue_frame(EndFrame())
    await asyncio.wait_for(run, FINAL_TIMEOUT_S)
    return collector.transcripts, collector.errors


def test_pipecat_openai_stt_service(tiny_server, clip_pcm):
    """pipecat's ``OpenAISTTService`` (the HTTP one) with ``base_url`` at oasr, behind pipecat's own
    Silero VAD: one turn, uploaded as the clip plus silence, transcribed as the HTTP route
    transcribes that upload; with ``include_prob_metrics`` (a Whisper model name: pipecat asks for
    ``verbose_json``) its confidence is the first segment's ``exp(avg_logprob)``."""
    _pipecat()
    import openai
    from pipecat.services.openai.stt import OpenAISTTService
    from pipecat.services.whisper.utils import extract_whisper_probability

    uploads: list[bytes] = []

    async def keep_upload(request):  # observes what pipecat sends; the request goes out unchanged
        if request.url.path.endswith("/audio/transcriptions"):
            uploads.append(_uploaded_file(request.headers["content-type"], await request.aread()))

    stt = OpenAISTTService(
        api_key="unused",
        base_url=tiny_server.base_url + "/v1",
        http_client=openai.DefaultAsyncHttpxClient(event_hooks={"request": [keep_upload]}),
        settings=OpenAISTTService.Settings(model=MODEL),
        include_prob_metrics=True,
    )
    transcripts, errors = asyncio.run(_run_pipecat(stt, clip_pcm, until_final=False))

    assert not errors
    assert len(uploads) == len(transcripts) == 1, (uploads, transcripts)
    sent = _wav_samples(uploads[0])
    # the whole clip (the VAD kept its start and every pause), then only silence
    np.testing.assert_array_equal(sent[: len(clip_pcm)], clip_pcm)
    assert not sent[len(clip_pcm) :].any()
    reference = _http(tiny_server, uploads[0], language="en", response_format="verbose_json")
    assert transcripts[0].text == reference.text.strip()
    assert _words(transcripts[0].text) == JFK
    assert extract_whisper_probability(transcripts[0]) == pytest.approx(math.exp(reference.segments[0].avg_logprob))


def test_pipecat_openai_realtime_stt_service(tiny_server, clip_pcm):
    """pipecat's ``OpenAIRealtimeSTTService`` at oasr's ``/v1/realtime``: audio streamed at 24 kHz,
    the turn committed by pipecat's local VAD, the completed transcript read as the HTTP route
    reads the clip."""
    _pipecat()
    if reason := _realtime_missing():
        pytest.skip(reason)
    from pipecat.services.openai.stt import OpenAIRealtimeSTTService

    stt = OpenAIRealtimeSTTService(
        api_key="unused",
        base_url=tiny_server.base_url.replace("http", "ws", 1) + "/v1/realtime",
        settings=OpenAIRealtimeSTTService.Settings(model=MODEL),
    )
    transcripts, errors = asyncio.run(_run_pipecat(stt, clip_pcm, until_final=True))

    assert not errors
    assert len(transcripts) == 1, transcripts
    # resampled to 24 kHz and back on the way, so compared word for word
    assert _words(transcripts[0].text) == _words(_http_text(tiny_server, CLIP.read_bytes(), language="en")) == JFK


# -- LiveKit Agents ---------------------------------------------------------------------------


def _livekit():
    pytest.importorskip("livekit.agents", reason="livekit-agents is not installed (see .ci/run)")
    return pytest.importorskip("livekit.plugins.openai", reason="livekit-plugins-openai is not installed (see .ci/run)")


def _livekit_frames(pcm: np.ndarray, frame_s: float = 0.1) -> list:
    from livekit import rtc

    n = int(RATE * frame_s)
    return [
        rtc.AudioFrame(
            data=pcm[i : i + n].tobytes(), sample_rate=RATE, num_channels=1, samples_per_channel=len(pcm[i : i + n])
        )
        for i in range(0, len(pcm), n)
    ]


def test_livekit_openai_stt_recognize(tiny_server, clip_pcm):
    """LiveKit's ``openai.STT(base_url=...)`` ``recognize()`` (the transcriptions endpoint; no LiveKit
    server involved): the final transcript equals the HTTP route's for the clip, the language read
    back from ``verbose_json``."""
    lk_openai = _livekit()
    from livekit.agents import stt as lk_stt

    async def recognize():
        stt = lk_openai.STT(base_url=tiny_server.base_url + "/v1", api_key="unused", model=MODEL, language="en")
        try:
            return await stt.recognize(_livekit_frames(clip_pcm))
        finally:
            await stt.aclose()

    event = asyncio.run(recognize())
    assert event.type == lk_stt.SpeechEventType.FINAL_TRANSCRIPT
    (alt,) = event.alternatives
    assert alt.text.strip() == _http_text(tiny_server, CLIP.read_bytes(), language="en")
    assert _words(alt.text) == JFK
    assert alt.language == "en"


def test_livekit_openai_stt_realtime_stream(tiny_server, clip_pcm):
    """LiveKit's ``openai.STT(use_realtime=True)`` stream at oasr's ``/v1/realtime`` with its
    ``server_vad`` turn detection (silence long enough to keep the clip one turn)."""
    lk_openai = _livekit()
    if reason := _realtime_missing():
        pytest.skip(reason)
    from livekit.agents import stt as lk_stt
    from livekit.agents.utils import http_context

    async def stream() -> list[str]:
        async with http_context.open():
            stt = lk_openai.STT(
                base_url=tiny_server.base_url + "/v1",
                api_key="unused",
                model=MODEL,
                language="en",
                use_realtime=True,
                turn_detection={
                    "type": "server_vad",
                    "threshold": 0.5,
                    "prefix_padding_ms": 300,
                    "silence_duration_ms": int(TURN_STOP_S * 1000),
                },
            )
            s = stt.stream()
            silence = np.zeros(int((TURN_STOP_S + 1.0) * RATE), np.int16)
            for frame in _livekit_frames(np.concatenate([clip_pcm, silence])):
                s.push_frame(frame)
            finals = []
            try:
                async with asyncio.timeout(FINAL_TIMEOUT_S):
                    async for event in s:
                        if event.type == lk_stt.SpeechEventType.FINAL_TRANSCRIPT:
                            finals.append(event.alternatives[0].text)
                            break
            finally:
                s.end_input()
                await s.aclose()
                await stt.aclose()
            return finals

    finals = asyncio.run(stream())
    assert len(finals) == 1, finals
    assert _words(finals[0]) == _words(_http_text(tiny_server, CLIP.read_bytes(), language="en")) == JFK
