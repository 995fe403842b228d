"""The decode-strategy interface the engine drives, and the factory that picks one.

A strategy owns everything family-specific about turning audio into text for one
decode family (windows and prompts for an AED, frames for CTC, ...). The engine
only admits requests and calls ``step`` until nothing is left: each step does a
bounded amount of batched work across all admitted requests (encode the windows
that are ready, join new rows into the running decode, advance it one token) and
returns what finished. Sync ``ASREngine`` and the async server drive the same
strategies, so there is one implementation of decoding.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar

from oasr.engine.config import EngineConfig, StrategyOptions, TranscribeOptions
from oasr.engine.outputs import RequestOutput, Segment
from oasr.languages import resolve_language
from oasr.models.base import DecodeType
from oasr.models.interfaces import CapabilityError, require_capability
from oasr.models.loaders import LoadedModel


class EngineOverloaded(RuntimeError):
    """The engine's queue is full; retry later."""


class RequestCancelled(RuntimeError):
    """The caller cancelled a request (an ``on_token`` callback returned False).

    Attributes:
        partial_text: the transcript text delivered before the cancellation.
    """

    def __init__(self, message: str, partial_text: str = "") -> None:
        super().__init__(message)
        self.partial_text = partial_text


@dataclass
class Request:
    """One transcription request.

    Attributes:
        request_id: unique within the engine.
        source: the audio: a path, bytes, a binary file object, or a waveform at the
            model's sampling rate.
        options: decoding options (validated).
        features: what ``DecodeStrategy.prepare`` made of ``source`` (set by it).
        duration: seconds of audio (set by ``prepare``).
    """

    request_id: str
    source: Any
    options: TranscribeOptions
    features: Any = None
    duration: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepEvent:
    """Something a step produced for one request.

    kind is "segment" (a finished segment), "delta" (new transcript text, for
    strategies that stream tokens: ``delta`` holds it; the deltas of a request
    concatenate exactly to its final ``output.text``), "finished" (the final output)
    or "error" (the request failed; ``error`` holds the exception).
    """

    request_id: str
    kind: str
    output: RequestOutput | None = None
    segment: Segment | None = None
    error: BaseException | None = None
    delta: str = ""


class DecodeStrategy(abc.ABC):
    """Batched decoding of one decode family over a loaded model.

    Class attributes:
        streams_text: ``step`` reports transcript text as it is decoded ("delta"
            events), which is what ``on_token`` callbacks need.
        packs_rows: the strategy can encode its batches as packed rows
            (``EngineConfig.sequence_packing``).
        stops_early: with timestamps, a window's segments may end well before its
            speech does (an autoregressive decoder that emits end-of-text early), so
            the VAD splitter decodes such an untranscribed tail once more.
    """

    decode_type: DecodeType
    options_class: ClassVar[type[StrategyOptions]] = StrategyOptions
    """The options this strategy reads beyond the common core, with its defaults (its reference's)."""
    prompt_option: ClassVar[str | None] = None
    """The option a free-text prompt (OpenAI's ``prompt`` field) becomes: ``initial_prompt``
    for Whisper, ``context`` (the system turn) for a speech-LLM; None: the strategy takes none."""
    streams_text: bool = False
    packs_rows: ClassVar[bool] = False
    stops_early: ClassVar[bool] = False

    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        self.loaded = loaded
        self.model = loaded.model
        self.config = config
        self.languages = loaded.languages
        """The languages a request may name (``LoadedModel.languages``); ``validate`` resolves to one."""
        if config.sequence_packing and not self.packs_rows:
            raise ValueError(f"sequence_packing=True: the {str(self.decode_type)!r} strategy pads its encoder batches")

    @property
    def model_name(self) -> str:
        """How messages name the model (its family, else its class)."""
        return getattr(self.model, "family", None) or type(self.model).__name__

    @property
    def word_timing_modes(self) -> tuple[str, ...]:
        """How this strategy can time words ("attention", "ctc", ...); () if it cannot."""
        return ()

    def validate(self, options: TranscribeOptions) -> TranscribeOptions:
        """Check (and normalise) a request's options before admission.

        ``language`` becomes the entry of ``self.languages`` it names, or None for none
        (``oasr.languages.resolve_language``), for every strategy alike.

        Raises:
            ValueError: an option this strategy / checkpoint cannot honour
                (``oasr.languages.LanguageError`` for the language).
            OptionNotTaken: a set option this strategy does not read.
        """
        options = self.options_class.resolve(options, str(self.decode_type))
        language = resolve_language(options.language, self.languages, model=self.model_name)
        if language != options.language:
            options = options.replace(language=language)
        if options.word_timestamps and not self.word_timing_modes:
            raise ValueError(
                f"word_timestamps=True is not available: {type(self.model).__name__} decoded by "
                f"{str(self.decode_type)!r} cannot time words"
            )
        return options

    def prepare(self, request: Request) -> Request:
        """Decode and featurise the request's audio.

        Runs outside the engine loop (any thread, concurrently with ``step``), so
        a long upload's decoding never stalls the running batch. Must not touch
        the strategy's mutable state.

        Raises:
            ValueError: bad audio (``oasr.audio.AudioDecodeError``).
        """
        return request

    @abc.abstractmethod
    def add_request(self, request: Request) -> None:
        """Admit a prepared request (its options already validated)."""

    @abc.abstractmethod
    def step(self) -> list[StepEvent]:
        """Do one round of batched work; return what finished."""

    @abc.abstractmethod
    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is; True if it was known."""

    @abc.abstractmethod
    def num_unfinished(self) -> int:
        """Requests admitted and not yet finished."""

    def stats(self) -> dict[str, float]:
        """Counters for metrics (running batch size, joins, ...)."""
        return {}


def build_decode_strategy(loaded: LoadedModel, config: EngineConfig) -> DecodeStrategy:
    """Pick and build the strategy for the configured (or default) decode type, from the
    decode-strategy registry (``oasr.engine.decode.registry``: built-ins and plugins).

    The model's capability is checked here, once, so a checkpoint that advertises
    what it cannot serve fails at engine construction naming the missing members.

    Raises:
        CapabilityError: the model cannot serve the decode type, or no strategy is
            registered for it.
    """
    from oasr.engine.decode.registry import decode_strategy_class, list_decode_strategies

    model = loaded.model
    decode_type = str(config.decode_type or model.decode_type)
    require_capability(model, decode_type)
    try:
        cls = decode_strategy_class(decode_type)
    except KeyError:
        raise CapabilityError(
            f"no decode strategy is registered for {decode_type!r}; registered: {list_decode_strategies()}"
        ) from None
    return cls(loaded, config)
