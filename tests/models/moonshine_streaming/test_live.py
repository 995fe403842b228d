"""Live streams of Moonshine Streaming (the stateful encoder runtime and the ``llm`` re-decoding
stream search) against transformers, with the same chunks fed: each partial is transformers'
greedy ``generate`` over its encoder's frames so far (the frames the stream had), the final is
``generate`` on the whole clip; through ``ASREngine.open_stream``, ``oasr stream`` and the
WebSocket ``/v1/audio/stream``.

transformers 5.25 has no streaming generate for this model (``generate`` is offline only): its
encoder on the whole clip, cut to the frames a stream has, and its decoder over them is the
reference a live stream can equal."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from tests.models.moonshine_streaming.conftest import hf_generate, hf_inputs

MAX_NEW = 12
CHUNK = 3000  # samples a feed


def _clip(waveforms) -> np.ndarray:
    return waveforms[0][: 80 * 200 + 37]


def _hf_over_frames(hf32, waveform: np.ndarray, frames: int) -> list[int]:
    from transformers.models.moonshine_streaming.modeling_moonshine_streaming import (
        MoonshineStreamingEncoderModelOutput,
    )

    x, mask = hf_inputs(waveform)
    with torch.no_grad():
        enc = hf32.model.encoder(x.float(), attention_mask=mask).last_hidden_state[:, :frames]
        out = MoonshineStreamingEncoderModelOutput(last_hidden_state=enc.clone(), attention_mask=torch.ones(1, frames))
        ids = hf32.generate(encoder_outputs=out, max_new_tokens=MAX_NEW, do_sample=False)[0, 1:].tolist()
    return ids[: ids.index(2)] if 2 in ids else ids


def test_open_stream_partials_and_final_equal_transformers(reference, hf32, engine, waveforms):
    w = _clip(waveforms)
    stream = engine.open_stream(max_new_tokens=MAX_NEW)
    events = []
    for at in range(0, len(w), CHUNK):
        events += stream.feed(w[at : at + CHUNK])
    events += stream.finish()
    partials = [e for e in events if e.type == "partial"]
    finals = [e for e in events if e.type == "final"]
    assert len(partials) >= 2 and len(finals) == 1 and events[-1].type == "done"
    for e in partials:
        want = _hf_over_frames(hf32, w, round(e.end / 0.02))
        assert e.text == reference.tokenizer.decode(want, skip_special_tokens=True).strip()
    assert finals[0].tokens == hf_generate(hf32, w, MAX_NEW)


def test_oasr_stream_and_the_websocket_equal_open_stream(reference, engine, waveforms, monkeypatch, tmp_path):
    import soundfile as sf
    from fastapi.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from oasr.cli.main import main
    from oasr.server.app import create_app
    from oasr.server.settings import ServerSettings

    w = _clip(waveforms)
    stream = engine.open_stream(max_new_tokens=MAX_NEW)
    stream.feed(w)
    want = next(e.text for e in stream.finish() if e.type == "final")

    path = tmp_path / "clip.wav"
    sf.write(path, w, 16000)
    monkeypatch.setattr("sys.stdout", io.StringIO())
    argv = ["stream", str(path), "--model", str(reference.path), "--max-new-tokens", str(MAX_NEW), "-f", "json"]
    assert main(argv) == 0
    assert json.loads(__import__("sys").stdout.getvalue())["text"] == want

    with TestClient(create_app(ServerSettings(model=str(reference.path)))) as client:
        events = []
        with client.websocket_connect("/v1/audio/stream") as ws:
            ws.send_text(json.dumps({"sample_rate": 16000, "sample_format": "float32", "max_new_tokens": MAX_NEW}))
            for at in range(0, len(w), CHUNK):
                ws.send_bytes(w[at : at + CHUNK].astype("<f4").tobytes())
            ws.send_text("done")
            try:
                while True:
                    events.append(ws.receive_json())
            except WebSocketDisconnect:
                pass
    finals = [e["text"] for e in events if e["type"] == "final"]
    assert finals == [want], events


def test_a_chunk_of_part_of_an_encoder_frame_is_refused(reference):
    import oasr

    with pytest.raises(ValueError, match="not a whole number of"):
        oasr.ASREngine(str(reference.path), stream_chunk_ms=105).open_stream()


def test_vad_endpoints_cut_a_stream_into_segments(engine, waveforms):
    """An autoregressive decoder emits no blanks, so a stream is cut at Silero VAD's silences
    (``endpoint_vad``): each segment decodes its own frames and restarts the encoder."""
    w = waveforms[0]
    audio = np.concatenate([w, np.zeros(3 * 16000, dtype=np.float32), w])
    stream = engine.open_stream(max_new_tokens=4, endpoint=True, endpoint_vad=True)
    events = []
    for at in range(0, len(audio), 4000):
        events += stream.feed(audio[at : at + 4000])
    events += stream.finish()
    kinds = [e.type for e in events if e.type != "partial"]
    assert kinds[:2] == ["final", "endpoint"] and kinds[-1] == "done" and kinds.count("final") >= 2
