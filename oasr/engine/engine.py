"""The synchronous engine: many inputs in, typed transcripts out, batched.

``ASREngine`` loads a model, builds the decode strategy its capabilities call for,
and drives it: inputs are admitted a bounded number at a time (audio is decoded
only when a request is admitted), each ``step`` does batched work across every
admitted request, and results come back as they finish. The strategy is driven
through a ``VadSplitter`` (``oasr.engine.chunking``), which cuts ``vad_filter``
requests into independent VAD chunks and stitches their results. ``AsyncEngine``
(``oasr.engine.async_engine``) drives the same strategy from a background thread
for the server.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from oasr.engine.chunking import VadSplitter
from oasr.engine.config import EngineConfig, TranscribeOptions
from oasr.engine.decode.base import (
    DecodeStrategy,
    EngineOverloaded,
    Request,
    RequestCancelled,
    build_decode_strategy,
)
from oasr.engine.diarizing import Diarizing, check_speaker_options
from oasr.engine.faults import with_faults
from oasr.engine.outputs import RequestOutput, Segment
from oasr.engine.punctuating import Punctuating
from oasr.engine.streaming.api import StreamingEngineMixin
from oasr.layers.quant import prepack_int8_, quantize_linears_
from oasr.models.base import BaseAsrModel, check_compute_dtype, parse_dtype
from oasr.models.loaders import LoadedModel, load_pretrained

AudioInput = str | os.PathLike | bytes | np.ndarray | torch.Tensor


def audio_too_short(duration: float, minimum: float) -> ValueError:
    """The error for audio shorter than a ``min_duration_s`` (the CLI's and the server's rule)."""
    from oasr.audio import AudioDecodeError

    # Enough digits that a clip one sample short never reads as equal to the minimum.
    return AudioDecodeError(f"too short to transcribe: audio is {duration:.6f} s long; the minimum is {minimum:g} s")


def _check_loaded_dtype(model: BaseAsrModel, dtype: str | None) -> None:
    """An already loaded model keeps its compute dtype: refuse one its family is not safe in,
    and a ``dtype`` that asks for another (it would be silently ignored otherwise).

    Raises:
        ValueError: naming the family, the dtype and what to do.
    """
    check_compute_dtype(type(model), model.compute_dtype)
    asked = parse_dtype(dtype)
    if asked is not None and asked != model.compute_dtype:
        raise ValueError(
            f"dtype={dtype!r}, but the model passed in was loaded in {model.compute_dtype}; load it with "
            f"load_pretrained(..., dtype={dtype!r}) or leave dtype unset"
        )


class EngineCore:
    """A loaded model and its decode strategy (shared by the sync and async engines).

    Args:
        model: a model argument for ``oasr.load_pretrained`` (directory, bundled name,
            Hub id; None for the default bundled model) or an already ``LoadedModel``.
        config: an ``EngineConfig``; keyword arguments override its fields.

    Attributes:
        strategy: the decode strategy.
        splitter: what the engines drive: the strategy, with ``vad_filter`` requests
            cut into VAD chunks (and, with ``punc_model``, finished transcripts punctuated).
        punctuator: the loaded ``punc_model`` (``oasr.postprocess.punctuation.Punctuator``), or None.
        diarization: the loaded ``diarize_model`` behind its batching service
            (``oasr.diarization.service.DiarizationService``), or None.
    """

    def __init__(
        self,
        model: str | os.PathLike | LoadedModel | None = None,
        config: EngineConfig | None = None,
        **config_overrides: Any,
    ) -> None:
        config = config or EngineConfig()
        if config_overrides:
            config = EngineConfig(**{**config.__dict__, **config_overrides})
        self.config = config
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        if isinstance(model, LoadedModel):
            self.loaded = model
            _check_loaded_dtype(model.model, config.dtype)
        else:
            self.loaded = load_pretrained(
                model,
                architecture=config.architecture,
                device=config.device,
                dtype=config.dtype,  # None / "auto": the family's choice for the device
                quantize=config.quantize,  # as the weights load: no float32 copy of the linear layers
            )
        if config.attention_model is not None or config.att_context_size is not None:
            # In place, before any strategy reads the encoder's geometry.
            self.loaded.model.encoder.set_attention(config.attention_model, config.att_context_size)
        if config.quantize is not None:
            # In place: a LoadedModel passed in is quantized too (and tied heads, which the load leaves).
            quantize_linears_(self.loaded.model, config.quantize)
            # At load, not inside the first request; the encoder's layers pack on a first call with few
            # rows (a streaming chunk), if they get one.
            prepack_int8_(self.loaded.model, skip=("encoder",))
        self.strategy: DecodeStrategy = self.build_strategy()
        self.punctuator = None
        if config.punc_model is not None:
            from oasr.postprocess.punctuation import load_punctuator

            self.punctuator = load_punctuator(config.punc_model, device=config.device)
        self.diarization = None
        if config.diarize_model is not None:
            from oasr.diarization.loader import load_diarizer
            from oasr.diarization.service import DiarizationService

            diarizer = load_diarizer(config.diarize_model, device=config.device, dtype=config.dtype)
            self.diarization = DiarizationService(diarizer, batch_size=config.max_batch_size)
        self.splitter = self.new_splitter()
        self._ids = itertools.count()

    def build_strategy(self) -> DecodeStrategy:
        """A new decode strategy over the loaded model (checks the model's capability)."""
        return with_faults(build_decode_strategy(self.loaded, self.config))

    def new_splitter(self) -> VadSplitter | Punctuating | Diarizing:
        """What the engines drive over ``self.strategy``: the VAD splitter, behind punctuation
        restoration when ``punc_model`` is set, behind diarization when ``diarize_model`` is."""
        splitter: VadSplitter | Punctuating | Diarizing = VadSplitter(self.strategy, self.sampling_rate)
        if self.punctuator is not None:
            splitter = Punctuating(splitter, self.punctuator, always=self.config.punc_always)
        if self.diarization is not None:
            splitter = Diarizing(splitter, self.diarization, self.sampling_rate, self.config.max_audio_s)
        return splitter

    @property
    def model(self):
        return self.loaded.model

    @property
    def sampling_rate(self) -> int:
        spec = self.loaded.feature_spec
        return spec.sampling_rate if spec is not None else 16000

    def make_options(self, **options: Any) -> TranscribeOptions:
        """Validated per-request options.

        Raises:
            TypeError: an unknown option name.
            ValueError: a bad value, or one the strategy cannot honour.
            ImportError: ``vad_filter=True`` without the silero-vad package.
        """
        return check_speaker_options(self.splitter.validate(TranscribeOptions.from_kwargs(**options)), self.diarization)

    def new_request_id(self) -> str:
        return f"req-{next(self._ids)}"


class ASREngine(StreamingEngineMixin, EngineCore):
    """Batched speech recognition over one model.

    Example:
        >>> engine = ASREngine("whisper-base")
        >>> out = engine.transcribe("speech.wav", language="en", beam_size=1)
        >>> out.text, [(s.start, s.end, s.text) for s in out.segments]
    """

    def transcribe(
        self,
        audio: AudioInput | Sequence[AudioInput],
        *,
        on_token: Callable[[str], bool | None] | None = None,
        **options: Any,
    ) -> RequestOutput | list[RequestOutput]:
        """Transcribe one input (returns a ``RequestOutput``) or a list (returns a list in order).

        Args:
            audio: a path, bytes, or a 16 kHz float waveform; or a list of them.
            on_token: for one input, called with each new piece of transcript text as
                it is decoded (never half a character; the pieces concatenate exactly
                to the final ``text``). Returning False cancels the request
                (``RequestCancelled`` is raised). Needs a strategy that streams text
                (Whisper's ``aed``, the ``llm`` one); for several inputs use ``transcribe_iter``.
            options: ``TranscribeOptions`` fields (language, task, beam_size,
                word_timestamps, temperature, initial_prompt, ...).

        Raises:
            ValueError: bad audio (``oasr.audio.AudioDecodeError``) or a bad option value.
            TypeError: an unknown option name.
            ImportError: ``vad_filter=True`` without the silero-vad package.
            RequestCancelled: ``on_token`` returned False.
        """
        single = not isinstance(audio, (list, tuple))
        if on_token is not None and not single:
            raise ValueError(
                "on_token streams one input; for several use transcribe_iter(on_token=...), whose "
                "callback also receives the input's index"
            )
        inputs = [audio] if single else list(audio)
        results: list[RequestOutput | None] = [None] * len(inputs)
        per_input = None if on_token is None else (lambda _index, delta: on_token(delta))
        for index, output in self.transcribe_iter(inputs, on_token=per_input, **options):
            results[index] = output
        return results[0] if single else results  # type: ignore[return-value]

    def transcribe_stream(self, audio: AudioInput, **options: Any) -> SegmentStream:
        """Transcribe one input lazily: iterate the result to get each ``Segment`` as soon as
        it is decoded (faster-whisper's lazy ``segments``); nothing is decoded until then.

        Example:
            >>> stream = engine.transcribe_stream("talk.mp3", language="en")
            >>> for seg in stream:
            ...     print(f"[{seg.start:.2f} --> {seg.end:.2f}] {seg.text}")
            >>> stream.output.language  # the whole RequestOutput, once the loop has ended

        Raises (while iterating): as ``transcribe``.
        """
        return SegmentStream(self, audio, options)

    def transcribe_iter(
        self,
        inputs: Iterable[AudioInput],
        *,
        max_in_flight: int | None = None,
        return_exceptions: bool = False,
        on_token: Callable[[int, str], bool | None] | None = None,
        segments: bool = False,
        min_duration_s: float = 0.0,
        **options: Any,
    ) -> Iterator[tuple[int, RequestOutput | Segment | Exception]]:
        """Yield ``(input index, output)`` as each input finishes.

        At most ``max_in_flight`` inputs (default 4 x max_batch_size) are decoded
        from their containers and held at a time.

        Args:
            return_exceptions: yield ``(index, exception)`` for an input that fails
                (bad audio, a refused request) and carry on with the others, instead
                of raising.
            on_token: ``on_token(index, text)`` with each new piece of an input's
                transcript as it is decoded (UTF-8 safe; an input's pieces concatenate
                to its final ``text``). Returning False cancels that input: its rows are
                freed at once and it ends with ``RequestCancelled``.
            segments: also yield ``(index, Segment)`` for each segment as the step loop
                decodes it, in the input's time order and before its ``RequestOutput``
                (whose ``segments`` are the same objects). A strategy that reports no
                segments while decoding (the ``llm`` one) yields only the output.
            min_duration_s: an input shorter than this fails with ``AudioDecodeError``
                (the server's ``min_duration_s`` rule).

        Raises:
            ValueError: ``on_token`` with a decode strategy that does not stream text.
        """
        if on_token is not None and not self.splitter.streams_text:
            raise ValueError(
                f"on_token needs a decode strategy that streams text; {str(self.strategy.decode_type)!r} "
                f"reports whole segments"
            )
        opts = self.make_options(**options)
        limit = max_in_flight or 4 * self.config.max_batch_size
        pending = enumerate(inputs)
        in_flight: dict[str, int] = {}
        streamed: dict[str, str] = {}  # text delivered to on_token, per request
        exhausted = False
        strategy = self.splitter
        try:
            while True:
                while not exhausted and len(in_flight) < limit:
                    nxt = next(pending, None)
                    if nxt is None:
                        exhausted = True
                        break
                    index, item = nxt
                    try:
                        request = strategy.prepare(Request(self.new_request_id(), item, opts))
                        if request.duration < min_duration_s:
                            request.features.close()
                            raise audio_too_short(request.duration, min_duration_s)
                        self.add_request(request)
                    except Exception as e:
                        if not return_exceptions:
                            raise
                        yield index, e
                        continue
                    in_flight[request.request_id] = index
                if not in_flight:
                    return
                for event in strategy.step():
                    if event.request_id not in in_flight:
                        continue
                    if event.kind == "delta" and on_token is not None:
                        rid = event.request_id
                        streamed[rid] = streamed.get(rid, "") + event.delta
                        if on_token(in_flight[rid], event.delta) is False:
                            strategy.abort(rid)
                            index = in_flight.pop(rid)
                            cancelled = RequestCancelled(f"input {index} was cancelled by on_token", streamed[rid])
                            if not return_exceptions:
                                raise cancelled
                            yield index, cancelled
                    if event.kind == "segment" and segments and event.segment is not None:
                        yield in_flight[event.request_id], event.segment
                    if event.kind == "error":
                        index = in_flight.pop(event.request_id)
                        if not return_exceptions:
                            raise event.error  # type: ignore[misc]
                        yield index, event.error  # type: ignore[misc]
                    if event.kind == "finished":
                        yield in_flight.pop(event.request_id), event.output  # type: ignore[misc]
        finally:
            # However the call ends (error, a caller that stops iterating), free what it admitted.
            for rid in in_flight:
                strategy.abort(rid)

    def add_request(self, request: Request) -> None:
        """Admit a prepared request (raises ``EngineOverloaded`` when full)."""
        if self.splitter.num_unfinished() >= self.config.max_queue_size:
            raise EngineOverloaded(
                f"{self.splitter.num_unfinished()} requests in flight (max_queue_size={self.config.max_queue_size})"
            )
        self.splitter.add_request(request)


class SegmentStream:
    """The lazy result of ``ASREngine.transcribe_stream``: an iterator of ``Segment`` s as
    they are decoded; ``output`` is the whole ``RequestOutput`` once iteration has ended
    (None before). ``close()`` (or dropping a half-read stream) frees the request's rows."""

    def __init__(self, engine: ASREngine, audio: AudioInput, options: dict[str, Any]) -> None:
        self.output: RequestOutput | None = None
        self._events = engine.transcribe_iter([audio], segments=True, **options)
        self._segments = self._run()

    def _run(self) -> Iterator[Segment]:
        yielded = 0
        for _index, item in self._events:
            if isinstance(item, Segment):
                yielded += 1
                yield item
            else:
                self.output = item  # type: ignore[assignment]
                # A strategy that reports its segments only at the end (llm): hand them out now.
                yield from item.segments[yielded:]  # type: ignore[union-attr]

    def __iter__(self) -> Iterator[Segment]:
        return self

    def __next__(self) -> Segment:
        return next(self._segments)

    def close(self) -> None:
        self._segments.close()
        self._events.close()
