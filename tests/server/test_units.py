"""Pieces of the server without a model: the form policy, the SSE deltas, settings
and the command line."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from starlette.datastructures import FormData, Headers, UploadFile

from oasr.engine.decode.base import StepEvent
from oasr.engine.outputs import RequestOutput, Segment
from oasr.server.protocol import FormError, TranscriptionRequest, TranslationRequest, parse_form
from oasr.server.settings import ServerSettings


def _upload(name: str = "a.wav") -> UploadFile:
    return UploadFile(io.BytesIO(b"RIFF"), filename=name, headers=Headers({"content-type": "audio/wav"}))


def _form(*items) -> FormData:
    return FormData([("file", _upload()), *items])


def test_parse_form_defaults_and_lists():
    req, upload = parse_form(_form(("model", "m")), TranscriptionRequest)
    assert upload.filename == "a.wav"
    assert (req.model, req.response_format, req.temperature, req.stream, req.granularities) == (
        "m",
        "json",
        None,  # not given: the decode strategy's own default
        False,
        (),
    )
    req, _ = parse_form(
        _form(
            ("model", "m"),
            ("timestamp_granularities[]", "word"),
            ("timestamp_granularities", "segment"),
            ("timestamp_granularities[]", "word"),
            ("stream", "true"),
            ("temperature", "0.25"),
            ("language", ""),
            ("prompt", ""),
        ),
        TranscriptionRequest,
    )
    assert req.granularities == ("word", "segment") and req.stream is True and req.temperature == 0.25
    assert req.language is None and req.prompt is None


@pytest.mark.parametrize(
    "items, cls, param, code",
    [
        ((("model", "m"), ("foo", "1")), TranscriptionRequest, "foo", "unknown_parameter"),
        ((("model", "m"), ("include[]", "logprobs")), TranscriptionRequest, "include", "unsupported_parameter"),
        ((("model", "m"), ("languages[]", "en")), TranscriptionRequest, "languages", "unsupported_parameter"),
        ((("model", "m"), ("language", "en")), TranslationRequest, "language", "unsupported_parameter"),
        ((("model", "m"), ("stream", "true")), TranslationRequest, "stream", "unsupported_parameter"),
        ((("model", "m"), ("temperature", "-1")), TranscriptionRequest, "temperature", "invalid_value"),
        ((("model", "m"), ("temperature", "inf")), TranscriptionRequest, "temperature", "invalid_value"),
        ((("model", "m"), ("response_format", "xml")), TranscriptionRequest, "response_format", None),
        ((("model", "m"), ("known_speaker_names[]", "a")), TranslationRequest, "known_speaker_names", None),
        ((("model", "m"), ("model", "n")), TranscriptionRequest, "model", "invalid_value"),
        ((), TranscriptionRequest, "model", "missing"),
    ],
)
def test_parse_form_refusals(items, cls, param, code):
    with pytest.raises(FormError) as e:
        parse_form(_form(*items), cls)
    assert e.value.param == param
    if code:
        assert e.value.code == code


def test_parse_form_file_rules():
    with pytest.raises(FormError) as e:
        parse_form(FormData([("model", "m")]), TranscriptionRequest)
    assert (e.value.param, e.value.code) == ("file", "missing")
    with pytest.raises(FormError) as e:
        parse_form(FormData([("model", "m"), ("file", "text")]), TranscriptionRequest)
    assert e.value.param == "file"
    with pytest.raises(FormError):
        parse_form(FormData([("model", "m"), ("file", _upload()), ("file", _upload())]), TranscriptionRequest)


class _Metrics:
    class cancelled:  # noqa: N801 - a stand-in for the prometheus counter
        n = 0

        @classmethod
        def inc(cls):
            cls.n += 1


class _Serving:
    metrics = _Metrics()

    def engine_error(self, exc, filename):
        from oasr.server.errors import APIError

        return APIError(500, str(exc))


def _segment(i: int, text: str) -> Segment:
    return Segment(id=i, seek=0, start=float(i), end=float(i + 1), text=text)


@pytest.mark.parametrize(
    "texts",
    [
        [" And so my fellow Americans", " ask not"],
        ["   ", "  Hello", " world ", "   ", " again  "],
        [" a\n", "b"],
        ["", ""],
        [" only one "],
    ],
)
def test_stream_deltas_concatenate_to_the_final_text(texts):
    from oasr.server.serving import _TranscriptStream

    segments = [_segment(i, t) for i, t in enumerate(texts)]
    final = RequestOutput("r", "".join(texts).strip(), segments)
    events = [StepEvent("r", "segment", segment=s) for s in segments] + [StepEvent("r", "finished", output=final)]

    async def rest():
        for e in events[1:]:
            yield e

    async def collect():
        stream = _TranscriptStream(_Serving(), events[0], rest(), "a.wav")
        out = [chunk async for chunk in stream.body()]
        await stream.close({})
        return out, stream.completed

    chunks, completed = asyncio.run(collect())
    assert completed
    assert all(c.startswith(b"data: ") and c.endswith(b"\n\n") for c in chunks)
    assert chunks[-1] == b"data: [DONE]\n\n"
    payloads = [json.loads(c[6:]) for c in chunks[:-1]]
    deltas = [p["delta"] for p in payloads if p["type"] == "transcript.text.delta"]
    assert payloads[-1] == {"type": "transcript.text.done", "text": final.text, "finish_reason": "stop"}
    assert "".join(deltas) == final.text
    assert all(deltas)  # no empty deltas


def test_settings():
    assert ServerSettings(model="tiny.en").model_names == ("tiny.en",)
    assert ServerSettings(model="tiny.en", served_model_names=("a", "b")).model_names == ("a", "b")
    assert ServerSettings().model_names == ("whisper-base",)
    assert ServerSettings(max_upload_mb=1.5).max_upload_bytes == 1572864
    for bad in ({"max_upload_mb": 0}, {"max_queue": 0}, {"request_timeout_s": 0}, {"served_model_names": ("",)}):
        with pytest.raises(ValueError):
            ServerSettings(**bad)


def test_cli_arguments():
    from oasr.cli.main import build_parser
    from oasr.cli.serve import settings_from_args

    args = build_parser().parse_args(
        [
            "serve",
            "--model",
            "tiny.en",
            "--served-model-name",
            "a",
            "b",
            "--port",
            "0",
            "--api-key",
            "k",
            "--max-upload-mb",
            "3",
            "--max-queue",
            "9",
            "--request-timeout",
            "2.5",
            "--beam-size",
            "2",
            "--max-batch-size",
            "4",
            "--device",
            "cpu",
        ]
    )
    s = settings_from_args(args)
    assert (s.model, s.served_model_names, s.port, s.api_key) == ("tiny.en", ("a", "b"), 0, "k")
    assert (s.max_upload_mb, s.max_queue, s.request_timeout_s, s.max_batch_size) == (3, 9, 2.5, 4)
    assert s.decode_options() == {"beam_size": 2}  # only what was given: the rest is the strategy's default
    assert s.engine_kwargs()["max_queue_size"] == 9
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--port", "70000"])
