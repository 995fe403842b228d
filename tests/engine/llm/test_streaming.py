"""UTF-8-safe transcript deltas: never half a character, the preamble never leaks, and
the deltas concatenate exactly to the final text, through ``ASREngine`` (``on_token``),
``AsyncEngine.stream`` and the server's SSE stream."""

from __future__ import annotations

import asyncio
import io
import json
import wave

import numpy as np
import pytest

from oasr.engine import ASREngine
from oasr.engine.async_engine import AsyncEngine
from oasr.engine.decode.deltas import TextStream, complete_utf8_prefix
from oasr.tokenizers import Control
from tests.engine.llm.conftest import make_loaded

TEXT = "héllo 中文 ok"


def test_complete_utf8_prefix():
    data = "aé中😀".encode()
    cuts = [complete_utf8_prefix(data[:n]) for n in range(len(data) + 1)]
    # Every cut lands on a character boundary, and a complete prefix is kept whole.
    boundaries = {len("aé中😀"[:i].encode()) for i in range(5)}
    assert all(c in boundaries for c in cuts)
    assert cuts == [max(b for b in boundaries if b <= n) for n in range(len(data) + 1)]
    # A stray continuation byte or an invalid lead byte is not held back (it is an error, not a prefix).
    assert complete_utf8_prefix(b"ab\x80") == 3
    assert complete_utf8_prefix(b"ab\xff") == 3


def test_text_stream_splits_on_characters_and_holds_the_preamble():
    pieces = [b"language ", b"Chinese", b"<asr_text>", b"h\xc3", b"\xa9llo ", b"\xe4", b"\xb8", b"\xad", b"!"]

    def parse(text):
        if "<asr_text>" in text:
            pre, _, post = text.rpartition("<asr_text>")
            return pre.removeprefix("language "), post
        return None, text

    stream = TextStream(lambda ids: b"".join(pieces[i] for i in ids), parse, hold_until_language=True)
    deltas = [stream.push(i) for i in range(len(pieces))]
    language, text, last = stream.finish()
    assert (language, text, last) == ("Chinese", "héllo 中!", "")
    assert deltas == ["", "", "", "h", "éllo ", "", "", "中", "!"]
    # Without the hold (a forced language) the text streams from the first piece.
    forced = TextStream(lambda ids: b"".join(pieces[3:][i] for i in ids), parse, hold_until_language=False)
    assert "".join(forced.push(i) for i in range(len(pieces) - 3)) + forced.finish()[2] == "héllo 中!"


def _script(tokenizer, text: str) -> list[int]:
    return tokenizer.encode_prompt([Control(text)]) + [tokenizer.token_to_id("<|im_end|>")]


def _split_tokens(tokenizer, ids) -> int:
    """How many of ``ids`` are not whole UTF-8 on their own (a character split across tokens)."""
    n = 0
    for i in ids:
        try:
            tokenizer.decode_bytes([i]).decode("utf-8")
        except UnicodeDecodeError:
            n += 1
    return n


@pytest.mark.parametrize("forced", [False, True])
def test_deltas_concatenate_to_the_final_text(tokenizer, clips, forced):
    script_text = TEXT if forced else f"language Chinese<asr_text>{TEXT}"
    script = _script(tokenizer, script_text)
    assert _split_tokens(tokenizer, script) >= 4  # é and both CJK characters are split
    engine = ASREngine(make_loaded(tokenizer, script=script), max_batch_size=2)
    deltas: list[str] = []
    out = engine.transcribe(clips[1], language="zh" if forced else None, on_token=deltas.append)
    assert out.text == TEXT and out.language == "zh"
    assert "".join(deltas) == out.text
    assert all(d and "\ufffd" not in d for d in deltas)
    assert len(deltas) >= 4  # streamed, not delivered in one piece
    assert not any("language" in d or "<asr_text>" in d for d in deltas)
    assert out.segments[0].tokens == script[:-1] and out.segments[0].end == pytest.approx(len(clips[1]) / 16000)


def test_cut_mid_character_and_empty_answer(tokenizer, clips):
    # max_new_tokens stops inside a character: the final text ends in U+FFFD and the
    # deltas still concatenate to it (the incomplete bytes are sent only at the end).
    script = _script(tokenizer, "中文")
    engine = ASREngine(make_loaded(tokenizer, script=script), max_batch_size=2)
    deltas: list[str] = []
    out = engine.transcribe(clips[0], language="zh", max_new_tokens=4, on_token=deltas.append)
    assert out.text == "中\ufffd" and "".join(deltas) == out.text and deltas[0] == "中"
    # "language None": empty audio gives empty text, no segment, no delta.
    silent = ASREngine(make_loaded(tokenizer, script=_script(tokenizer, "language None")), max_batch_size=2)
    deltas = []
    out = silent.transcribe(clips[0], on_token=deltas.append)
    assert (out.text, out.segments, deltas, out.language) == ("", [], [], None)


def test_async_stream_deltas(tokenizer, clips):
    script = _script(tokenizer, f"language French<asr_text>{TEXT}")
    engine = AsyncEngine(make_loaded(tokenizer, script=script), max_batch_size=3)

    async def run():
        options = engine.make_options()
        collected = []
        async for event in engine.stream(clips[2], options):
            collected.append(event)
        plain = await asyncio.gather(*(engine.transcribe(c, options) for c in clips[:3]))
        return collected, plain

    try:
        events, plain = asyncio.run(run())
    finally:
        engine.shutdown()
    kinds = [e.kind for e in events]
    assert kinds[-1] == "finished" and set(kinds[:-1]) == {"delta"}
    assert "".join(e.delta for e in events[:-1]) == events[-1].output.text == TEXT
    assert events[-1].output.language == "fr"
    assert [o.text for o in plain] == [TEXT] * 3


def _wav_bytes(samples: np.ndarray, rate: int = 16000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def test_server_streams_deltas_over_sse(tokenizer, clips):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from oasr.server.app import create_app
    from oasr.server.settings import ServerSettings

    script = _script(tokenizer, f"language Chinese<asr_text> {TEXT} ")
    engine = AsyncEngine(make_loaded(tokenizer, script=script), max_batch_size=2)
    try:
        app = create_app(ServerSettings(served_model_names=("tiny-llm",)), engine=engine)
        with TestClient(app) as client:
            files = {"file": ("a.wav", _wav_bytes(clips[1]), "audio/wav")}
            r = client.post("/v1/audio/transcriptions", data={"model": "tiny-llm", "stream": "true"}, files=files)
            assert r.status_code == 200, r.text
            payloads = [line[len("data: ") :] for line in r.text.splitlines() if line.startswith("data: ")]
            assert payloads[-1] == "[DONE]"
            events = [json.loads(p) for p in payloads[:-1]]
            deltas = [e["delta"] for e in events if e["type"] == "transcript.text.delta"]
            done = [e["text"] for e in events if e["type"] == "transcript.text.done"]
            assert done == [TEXT] and "".join(deltas) == TEXT and len(deltas) >= 4
            plain = client.post("/v1/audio/transcriptions", data={"model": "tiny-llm"}, files=files)
            assert plain.json()["text"] == TEXT
            bad = client.post(
                "/v1/audio/transcriptions", data={"model": "tiny-llm", "language": "klingon"}, files=files
            )
            assert bad.status_code == 400 and "klingon" in bad.text
    finally:
        engine.shutdown()
