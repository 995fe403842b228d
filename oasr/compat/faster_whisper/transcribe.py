"""faster-whisper's Python API over ``oasr.ASREngine``: change the import, keep the code.

    from oasr.compat.faster_whisper import BatchedInferencePipeline, WhisperModel

    model = WhisperModel("base", compute_type="int8", cpu_threads=4)
    segments, info = model.transcribe("audio.wav", beam_size=5, word_timestamps=True)
    for segment in segments:  # decoded on first iteration
        print(segment.start, segment.end, segment.text)

Every argument of faster-whisper 1.2's ``WhisperModel``, ``WhisperModel.transcribe``,
``WhisperModel.detect_language`` and ``BatchedInferencePipeline.transcribe`` is accepted,
with its default; the few oasr cannot honour raise ``ValueError`` naming the argument.

How it maps:

* ``model_size_or_path``: a faster-whisper size name resolves to oasr's bundled weights
  ("base" -> ``whisper-base``, "tiny.en" -> ``whisper-tiny.en``; others are not bundled);
  anything else is a local checkpoint directory (CTranslate2 / faster-whisper, Hugging
  Face or openai-whisper layouts). Nothing is downloaded.
* ``compute_type``: float32 / float16 / bfloat16 set the dtype; int8, int8_float32,
  int8_float16, int8_bfloat16 quantise the linear layers to int8 (``quantize="int8"``)
  over that dtype; "default" / "auto" are oasr's ``dtype="auto"`` for Whisper (float32 on
  CPU, float16 on CUDA: the first of ``WhisperModel.safe_dtypes``).
  int16 has no oasr kernel and is refused.
* ``cpu_threads`` -> ``num_threads`` (0: torch's default); ``num_workers`` -> the engine's
  batch size (faster-whisper's concurrent transcriptions share one batched engine here).
* ``transcribe``: the language is detected first (as faster-whisper does), the segments are
  decoded when the generator is iterated and each is yielded as soon as its window is decoded; ``log_progress``
  shows a tqdm bar in audio seconds. ``vad_filter`` cuts speech as faster-whisper does
  (``vad.get_speech_timestamps``: its Silero v6.0, bundled, and its span rule), with its
  sequential defaults (2 s of silence ends speech), and maps times back through the cut
  silences with its ``SpeechTimestampsMap``.
* ``BatchedInferencePipeline.transcribe``: faster-whisper's batched rule: the speech (the
  same VAD, with faster-whisper's batched ``vad_parameters`` handling, ``neg_threshold``
  included) or the given ``clip_timestamps`` is packed into chunks of at most 30 s, every
  chunk is decoded once as one window, all chunks in batches; without timestamps a chunk is
  one segment spanning the chunk.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from oasr.compat.faster_whisper.utils import _MODEL_SIZES

SAMPLING_RATE = 16000
CHUNK_LENGTH = 30  # seconds: Whisper's window (the encoder's fixed input)

MODEL_SIZES: tuple[str, ...] = _MODEL_SIZES  # faster-whisper's size names

# compute_type -> (oasr dtype, quantize)
_COMPUTE_TYPES: dict[str, tuple[str | None, str | None]] = {
    "default": (None, None),
    "auto": (None, None),
    "float32": ("float32", None),
    "float16": ("float16", None),
    "bfloat16": ("bfloat16", None),
    "int8": ("float32", "int8"),
    "int8_float32": ("float32", "int8"),
    "int8_float16": ("float16", "int8"),
    "int8_bfloat16": ("bfloat16", "int8"),
}

_DEFAULT_TEMPERATURES = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
_PREPEND = "\"'“¿([{-"
_APPEND = "\"'.。,，!！?？:：”)]}、"


@dataclass
class Word:
    start: float
    end: float
    word: str
    probability: float

    def _asdict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Segment:
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: list[Word] | None
    temperature: float | None

    def _asdict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class TranscriptionOptions:
    beam_size: int
    best_of: int
    patience: float
    length_penalty: float
    repetition_penalty: float
    no_repeat_ngram_size: int
    log_prob_threshold: float | None
    no_speech_threshold: float | None
    compression_ratio_threshold: float | None
    condition_on_previous_text: bool
    prompt_reset_on_temperature: float
    temperatures: list[float]
    initial_prompt: str | Iterable[int] | None
    prefix: str | None
    suppress_blank: bool
    suppress_tokens: list[int] | None
    without_timestamps: bool
    max_initial_timestamp: float
    word_timestamps: bool
    prepend_punctuations: str
    append_punctuations: str
    multilingual: bool
    max_new_tokens: int | None
    clip_timestamps: str | list[float] | list[dict] | None
    hallucination_silence_threshold: float | None
    hotwords: str | None


@dataclass
class TranscriptionInfo:
    language: str | None
    language_probability: float
    duration: float
    duration_after_vad: float
    all_language_probs: list[tuple[str, float]] | None
    transcription_options: TranscriptionOptions
    vad_options: Any


def _resolve_model(name: str) -> str:
    from oasr.models.bundled import is_bundled_name

    if name in MODEL_SIZES and not is_bundled_name(name):
        raise ValueError(
            f"model_size_or_path={name!r}: oasr downloads nothing and bundles only 'base' (whisper-base) and "
            f"'tiny.en' (whisper-tiny.en); pass a local checkpoint directory (e.g. a faster-whisper / "
            f"CTranslate2 or Hugging Face download of {name})"
        )
    return name


def _device(device: str, device_index: int | list[int]) -> str:
    if isinstance(device_index, (list, tuple)):
        if len(device_index) != 1:
            raise ValueError(
                f"device_index={device_index!r}: oasr runs one engine on one device; pass one index "
                f"(run one WhisperModel per device for several)"
            )
        device_index = device_index[0]
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        return f"cuda:{int(device_index)}"
    if device == "cpu":
        return "cpu"
    raise ValueError(f"device={device!r}: expected 'auto', 'cpu' or 'cuda'")


def _refuse(**unsupported: Any) -> None:
    """Raise naming every argument set to a value oasr cannot honour (values are pre-filtered)."""
    if unsupported:
        names = ", ".join(f"{k}={v!r}" for k, v in unsupported.items())
        raise ValueError(f"oasr's faster-whisper drop-in cannot honour {names}")


def _fw_vad_options(vad_parameters: Any):
    """faster-whisper's sequential ``VadOptions`` (this package's) from a dict, or from a
    ``VadOptions`` of this package, of faster-whisper or of oasr."""
    from oasr.compat.faster_whisper.vad import VadOptions

    if vad_parameters is None:
        return VadOptions()
    if isinstance(vad_parameters, dict):
        params = vad_parameters
    elif dataclasses.is_dataclass(vad_parameters):
        params = dataclasses.asdict(vad_parameters)
    else:
        raise ValueError(f"vad_parameters must be a dict or a VadOptions, got {type(vad_parameters).__name__}")
    known = {f.name for f in dataclasses.fields(VadOptions)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"unknown vad_parameters {unknown}; known: {sorted(known)}")
    return VadOptions(**params)


def _batched_vad_options(vad_parameters: Any):
    """The batched pipeline's VAD options, as faster-whisper makes them: none given, its batched
    defaults (160 ms of silence ends speech, spans of at most ``CHUNK_LENGTH``); a dict, over
    ``VadOptions``' own defaults with ``max_speech_duration_s`` set to ``CHUNK_LENGTH`` (a given
    one is dropped); a ``VadOptions``, as given."""
    if vad_parameters is None:
        return _fw_vad_options({"max_speech_duration_s": CHUNK_LENGTH, "min_silence_duration_ms": 160})
    if isinstance(vad_parameters, dict):
        params = {k: v for k, v in vad_parameters.items() if k != "max_speech_duration_s"}
        return _fw_vad_options({**params, "max_speech_duration_s": CHUNK_LENGTH})
    return _fw_vad_options(vad_parameters)


def _load(audio: str | BinaryIO | np.ndarray) -> np.ndarray:
    from oasr.audio import load_audio

    if isinstance(audio, np.ndarray):
        return np.ascontiguousarray(audio, dtype=np.float32).reshape(-1)
    if isinstance(audio, (io.IOBase,)) or hasattr(audio, "read"):
        return load_audio(audio.read())  # type: ignore[union-attr]
    return load_audio(audio)


def _convert_segment(
    seg: Any, segment_id: int, chunk: Any = None, *, offset: float | None = None, seek: int | None = None
) -> Segment:
    """An oasr segment as faster-whisper's. Its times are mapped through ``chunk`` when given
    (a given clip: its start added, rounded to 3 decimals, as faster-whisper does), else moved by
    ``offset`` (a batched chunk's place in the joined speech: the segment's times rounded to 3
    decimals, its words' to 2, as faster-whisper's are before ``_restore``). Its ``seek`` is
    ``seek`` when given (a batched chunk's offset), else the frame in the decoded audio."""

    def t(x: float, is_end: bool = False, digits: int = 3) -> float:
        if chunk is not None:
            return round(chunk.to_global(x, is_end=is_end), 3)
        return x if offset is None else round(offset + x, digits)

    words = None
    if seg.words is not None:
        words = [Word(t(w.start, digits=2), t(w.end, True, 2), w.word, w.probability) for w in seg.words]
    return Segment(
        id=segment_id,
        seek=seg.seek if seek is None else seek,
        start=t(seg.start),
        end=t(seg.end, True),
        text=seg.text,
        tokens=list(seg.tokens),
        avg_logprob=seg.avg_logprob,
        compression_ratio=seg.compression_ratio,
        no_speech_prob=seg.no_speech_prob,
        words=words,
        temperature=seg.temperature,
    )


def _restore(segment: Segment, ts_map: Any) -> Segment:
    """faster-whisper's mapping of a segment's times in the joined speech back to the original
    audio (``SpeechTimestampsMap``, 2 decimals): each word through the span holding its middle,
    the segment from its first word's start to its last word's end; without words, its start
    and end each through the span holding it."""
    if segment.words:
        for w in segment.words:
            index = ts_map.get_chunk_index((w.start + w.end) / 2)
            w.start = ts_map.get_original_time(w.start, index)
            w.end = ts_map.get_original_time(w.end, index)
        segment.start, segment.end = segment.words[0].start, segment.words[-1].end
    else:
        segment.start = ts_map.get_original_time(segment.start)
        segment.end = ts_map.get_original_time(segment.end, is_end=True)
    return segment


def _progress(segments: Iterator[Segment], duration: float, enabled: bool) -> Iterator[Segment]:
    if not enabled:
        yield from segments
        return
    from tqdm import tqdm

    done = 0.0
    with tqdm(total=round(duration, 2), unit="seconds", disable=False) as bar:
        for seg in segments:
            step = round(max(0.0, min(seg.end, duration) - done), 2)
            done += step
            bar.update(step)
            yield seg
        bar.update(round(duration - done, 2))


class WhisperModel:
    """faster-whisper's ``WhisperModel`` on ``oasr.ASREngine`` (see the module docstring)."""

    def __init__(
        self,
        model_size_or_path: str,
        device: str = "auto",
        device_index: int | list[int] = 0,
        compute_type: str = "default",
        cpu_threads: int = 0,
        num_workers: int = 1,
        download_root: str | None = None,
        local_files_only: bool = False,
        files: dict | None = None,
        revision: str | None = None,
        use_auth_token: str | bool | None = None,
        **model_kwargs: Any,
    ) -> None:
        # download_root / local_files_only only steer downloads, and oasr downloads nothing.
        refused = {"files": files, "revision": revision, "use_auth_token": use_auth_token}
        _refuse(**{k: v for k, v in refused.items() if v is not None}, **model_kwargs)
        if compute_type not in _COMPUTE_TYPES:
            raise ValueError(f"compute_type={compute_type!r}: oasr supports {sorted(_COMPUTE_TYPES)}")
        if cpu_threads < 0 or num_workers < 1:
            raise ValueError(f"cpu_threads must be >= 0 and num_workers >= 1, got {cpu_threads}, {num_workers}")
        from oasr.engine import ASREngine

        dtype, quantize = _COMPUTE_TYPES[compute_type]
        self.engine = ASREngine(
            _resolve_model(str(model_size_or_path)),
            architecture="whisper",
            device=_device(device, device_index),
            dtype=dtype,
            quantize=quantize,
            num_threads=cpu_threads,
            max_batch_size=max(8, num_workers),
        )
        tok = getattr(self.engine.strategy, "tok", None)
        if tok is None:
            raise ValueError(f"{model_size_or_path!r} is not a Whisper checkpoint this drop-in can drive")
        self._tok = tok

    @property
    def supported_languages(self) -> list[str]:
        if not self._tok.special.is_multilingual:
            return ["en"]
        return list(dict.fromkeys(self._tok.id_to_language.values()))

    # -- language detection --------------------------------------------------------------

    def _detect(self, audio: np.ndarray, segments: int, threshold: float | None) -> tuple[str, float, list]:
        if not self._tok.special.is_multilingual:
            return "en", 1.0, [("en", 1.0)]
        window = audio[: segments * CHUNK_LENGTH * SAMPLING_RATE]
        if window.size == 0:
            return self._detect_empty()
        out = self.engine.transcribe(
            window,
            language=None,
            beam_size=1,
            temperature=0.0,
            max_new_tokens=1,
            without_timestamps=True,
            condition_on_previous_text=False,
            compression_ratio_threshold=None,
            log_prob_threshold=None,
            no_speech_threshold=None,
            language_detection_segments=segments,
            language_detection_threshold=threshold,
        )
        probs = sorted((out.language_probs or {}).items(), key=lambda kv: -kv[1])
        return out.language, float(out.language_probability or 0.0), probs

    def _detect_empty(self) -> tuple[str, float, list]:
        """faster-whisper's language of no audio: detected on the features of nothing (one frame
        of log-mel of its 160-sample padding, then the window padded with zeros)."""
        import torch

        from oasr.compat.faster_whisper.audio import pad_or_trim

        strategy = self.engine.strategy
        # the frame of 160 zero samples, taken from a longer silence (oasr's STFT needs > 200 samples)
        silence = self.feature_extractor(np.zeros(CHUNK_LENGTH * SAMPLING_RATE // 100, np.float32), padding=0)
        mel = pad_or_trim(silence[:, :1], 3000)
        model = self.engine.model
        param = next(model.parameters())
        with torch.inference_mode():
            enc, _ = model.encode_offline(torch.from_numpy(mel)[None].to(param.device, param.dtype))
            probs = strategy._detect(enc)[0]
        ranked = sorted(probs.items(), key=lambda kv: -kv[1])
        return ranked[0][0], float(ranked[0][1]), ranked

    def detect_language(
        self,
        audio: np.ndarray | None = None,
        features: np.ndarray | None = None,
        vad_filter: bool = False,
        vad_parameters: dict | Any = None,
        language_detection_segments: int = 1,
        language_detection_threshold: float = 0.5,
    ) -> tuple[str, float, list[tuple[str, float]]]:
        """The language of ``audio``: (code, probability, [(code, probability), ...] best first)."""
        if features is not None:
            _refuse(features="<log-mel features>")
        if audio is None:
            raise ValueError("detect_language needs audio (oasr computes its own features)")
        wave = _load(audio)
        if vad_filter:
            wave = self._speech_only(wave, _fw_vad_options(vad_parameters))[0]
        return self._detect(wave, language_detection_segments, language_detection_threshold)

    def _speech_only(self, wave: np.ndarray, vad: Any) -> tuple[np.ndarray, Any]:
        """The speech of ``wave`` joined in order (faster-whisper's spans), and the
        ``SpeechTimestampsMap`` that maps times in it back to ``wave`` (None when there is no speech)."""
        from oasr.compat.faster_whisper.vad import SpeechTimestampsMap, get_speech_timestamps

        spans = get_speech_timestamps(wave, vad) if wave.size else []
        if not spans:
            return np.zeros(0, np.float32), None
        speech = np.concatenate([wave[s["start"] : s["end"]] for s in spans])
        return speech, SpeechTimestampsMap(spans, SAMPLING_RATE)

    @property
    def hf_tokenizer(self):
        """The model's Hugging Face ``tokenizers.Tokenizer`` (a copy of the engine's)."""
        from tokenizers import Tokenizer as HFTok

        return HFTok.from_str(self._tok.tokenizer._tok.to_str())

    @property
    def feature_extractor(self):
        """faster-whisper's ``FeatureExtractor`` with this model's mel bands."""
        from oasr.compat.faster_whisper.feature_extractor import FeatureExtractor

        return FeatureExtractor(feature_size=self.engine.model.config.n_mels)

    # -- transcription -------------------------------------------------------------------

    def transcribe(
        self,
        audio: str | BinaryIO | np.ndarray,
        language: str | None = None,
        task: str = "transcribe",
        log_progress: bool = False,
        beam_size: int = 5,
        best_of: int = 5,
        patience: float = 1,
        length_penalty: float = 1,
        repetition_penalty: float = 1,
        no_repeat_ngram_size: int = 0,
        temperature: float | list[float] | tuple[float, ...] = _DEFAULT_TEMPERATURES,
        compression_ratio_threshold: float | None = 2.4,
        log_prob_threshold: float | None = -1.0,
        no_speech_threshold: float | None = 0.6,
        condition_on_previous_text: bool = True,
        prompt_reset_on_temperature: float = 0.5,
        initial_prompt: str | Iterable[int] | None = None,
        prefix: str | None = None,
        suppress_blank: bool = True,
        suppress_tokens: list[int] | None = [-1],  # noqa: B006 - faster-whisper's signature
        without_timestamps: bool = False,
        max_initial_timestamp: float = 1.0,
        word_timestamps: bool = False,
        prepend_punctuations: str = _PREPEND,
        append_punctuations: str = _APPEND,
        multilingual: bool = False,
        vad_filter: bool = False,
        vad_parameters: dict | Any = None,
        max_new_tokens: int | None = None,
        chunk_length: int | None = None,
        clip_timestamps: str | list[float] = "0",
        hallucination_silence_threshold: float | None = None,
        hotwords: str | None = None,
        language_detection_threshold: float | None = 0.5,
        language_detection_segments: int = 1,
    ) -> tuple[Iterator[Segment], TranscriptionInfo]:
        """Transcribe ``audio`` (a path, a binary file object, or 16 kHz float samples).

        Returns:
            a generator of ``Segment`` (decoded when first iterated) and the ``TranscriptionInfo``.
        """
        options = self._options(locals())
        wave = _load(audio)
        duration = wave.shape[0] / SAMPLING_RATE
        vad = ts_map = None
        speech = wave
        if vad_filter:  # faster-whisper: the speech joined, decoded in order as one recording
            vad = _fw_vad_options(vad_parameters)
            speech, ts_map = self._speech_only(wave, vad)
        vad_options = vad if vad is not None else vad_parameters
        info = self._info(
            language, speech, duration, options, vad_options, language_detection_segments, language_detection_threshold
        )
        language = info.language
        if speech.shape[0] == 0:  # faster-whisper: no audio (or no speech) gives no segments
            return iter(()), info
        engine_options = self._engine_options(options, task, language, language_detection_threshold)
        engine_options.update(language_detection_segments=language_detection_segments)
        engine_options["clip_timestamps"] = clip_timestamps

        def segments() -> Iterator[Segment]:
            # Each segment as its window is decoded (faster-whisper's lazy generator); with VAD the
            # times in the joined speech are mapped back through the removed silences.
            for seg in self.engine.transcribe_stream(speech, **engine_options):
                segment = _convert_segment(seg, seg.id)
                yield segment if ts_map is None else _restore(segment, ts_map)

        return _progress(segments(), duration, log_progress), info

    def _info(
        self,
        language: str | None,
        speech: np.ndarray,
        duration: float,
        options: TranscriptionOptions,
        vad_options: Any,
        segments: int,
        threshold: float | None,
    ) -> TranscriptionInfo:
        """The ``TranscriptionInfo`` of a call, detecting the language of ``speech`` (the audio
        left after VAD) when none is given, as faster-whisper does before decoding. A given
        language is reported as the code it resolves to (``"German"`` -> ``"de"``; faster-whisper
        takes codes only), and one the model lacks is a ``ValueError`` before any decoding."""
        probability, all_probs = 1.0, None
        if language is not None:
            language = self.engine.make_options(language=language).language
        if language is None:
            if not self._tok.special.is_multilingual:
                language = "en"
            elif speech.shape[0] == 0:  # no audio (or no speech): no segments follow
                language, probability, all_probs = self._detect_empty()
            else:
                language, probability, all_probs = self._detect(speech, segments, threshold)
        return TranscriptionInfo(
            language=language,
            language_probability=probability,
            duration=duration,
            duration_after_vad=speech.shape[0] / SAMPLING_RATE,
            all_language_probs=all_probs,
            transcription_options=options,
            vad_options=vad_options,
        )

    def _options(self, args: dict[str, Any]) -> TranscriptionOptions:
        if args.get("chunk_length") not in (None, CHUNK_LENGTH):
            _refuse(chunk_length=args["chunk_length"])
        temperature = args["temperature"]
        temps = list(temperature) if isinstance(temperature, (list, tuple)) else [temperature]
        fields = {f.name for f in dataclasses.fields(TranscriptionOptions)} - {"temperatures"}
        return TranscriptionOptions(temperatures=temps, **{k: args[k] for k in fields})

    def _engine_options(
        self, o: TranscriptionOptions, task: str, language: str | None, threshold: float | None
    ) -> dict[str, Any]:
        suppress = o.suppress_tokens
        return dict(
            language=None if o.multilingual else language,
            task=task,
            beam_size=o.beam_size,
            best_of=o.best_of,
            patience=o.patience,
            length_penalty=o.length_penalty,
            repetition_penalty=o.repetition_penalty,
            no_repeat_ngram_size=o.no_repeat_ngram_size,
            temperature=tuple(o.temperatures),
            compression_ratio_threshold=o.compression_ratio_threshold,
            log_prob_threshold=o.log_prob_threshold,
            no_speech_threshold=o.no_speech_threshold,
            condition_on_previous_text=o.condition_on_previous_text,
            prompt_reset_on_temperature=o.prompt_reset_on_temperature,
            initial_prompt=o.initial_prompt
            if isinstance(o.initial_prompt, (str, type(None)))
            else tuple(o.initial_prompt),
            prefix=o.prefix,
            suppress_blank=o.suppress_blank,
            suppress_tokens=None if suppress is None else tuple(suppress),
            without_timestamps=o.without_timestamps,
            max_initial_timestamp=o.max_initial_timestamp,
            word_timestamps=o.word_timestamps,
            prepend_punctuations=o.prepend_punctuations,
            append_punctuations=o.append_punctuations,
            multilingual=o.multilingual,
            max_new_tokens=o.max_new_tokens,
            hallucination_silence_threshold=o.hallucination_silence_threshold,
            hotwords=o.hotwords,
            language_detection_threshold=threshold,
        )


class BatchedInferencePipeline:
    """faster-whisper's ``BatchedInferencePipeline``: chunks of <= 30 s, each decoded once, in batches."""

    def __init__(self, model: WhisperModel) -> None:
        self.model = model

    def transcribe(
        self,
        audio: str | BinaryIO | np.ndarray,
        language: str | None = None,
        task: str = "transcribe",
        log_progress: bool = False,
        beam_size: int = 5,
        best_of: int = 5,
        patience: float = 1,
        length_penalty: float = 1,
        repetition_penalty: float = 1,
        no_repeat_ngram_size: int = 0,
        temperature: float | list[float] | tuple[float, ...] = _DEFAULT_TEMPERATURES,
        compression_ratio_threshold: float | None = 2.4,
        log_prob_threshold: float | None = -1.0,
        no_speech_threshold: float | None = 0.6,
        condition_on_previous_text: bool = True,
        prompt_reset_on_temperature: float = 0.5,
        initial_prompt: str | Iterable[int] | None = None,
        prefix: str | None = None,
        suppress_blank: bool = True,
        suppress_tokens: list[int] | None = [-1],  # noqa: B006 - faster-whisper's signature
        without_timestamps: bool = True,
        max_initial_timestamp: float = 1.0,
        word_timestamps: bool = False,
        prepend_punctuations: str = _PREPEND,
        append_punctuations: str = _APPEND,
        multilingual: bool = False,
        vad_filter: bool = True,
        vad_parameters: dict | Any = None,
        max_new_tokens: int | None = None,
        chunk_length: int | None = None,
        clip_timestamps: list[dict] | None = None,
        hallucination_silence_threshold: float | None = None,
        batch_size: int = 8,
        hotwords: str | None = None,
        language_detection_threshold: float | None = 0.5,
        language_detection_segments: int = 1,
    ) -> tuple[Iterator[Segment], TranscriptionInfo]:
        """As ``WhisperModel.transcribe``, with faster-whisper's batched chunking.

        ``clip_timestamps``: ``[{"start": s, "end": e}, ...]`` in seconds, each decoded as one
        chunk; otherwise ``vad_filter`` cuts the speech, or audio under 30 s is one chunk.
        ``batch_size`` bounds the chunks decoded together (the engine's batch, at most).
        """
        from oasr.audio.vad import SpeechChunk, merge_spans
        from oasr.compat.faster_whisper.vad import SpeechTimestampsMap, get_speech_timestamps

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        m = self.model
        args = dict(locals())
        args["clip_timestamps"] = clip_timestamps
        options = m._options(args)
        wave = _load(audio)
        duration = wave.shape[0] / SAMPLING_RATE
        vad = ts_map = None
        if clip_timestamps:
            if not isinstance(clip_timestamps, list) or not all(
                isinstance(c, dict) and {"start", "end"} <= set(c) for c in clip_timestamps
            ):
                raise ValueError('clip_timestamps must be a list of {"start": seconds, "end": seconds} dicts')
            chunks = []
            for c in clip_timestamps:
                a, b = int(c["start"] * SAMPLING_RATE), int(c["end"] * SAMPLING_RATE)
                b = min(b, a + CHUNK_LENGTH * SAMPLING_RATE, wave.shape[0])
                if not 0 <= a < b:
                    raise ValueError(f"clip_timestamps entry {c!r} holds no audio of the {duration:.2f}-s input")
                chunks.append(SpeechChunk(((a, b),), SAMPLING_RATE))
        elif vad_filter:  # faster-whisper's spans (its Silero v6.0 and span rule), packed into chunks
            vad = _batched_vad_options(vad_parameters)
            spans = get_speech_timestamps(wave, vad) if wave.size else []
            ts_map = SpeechTimestampsMap(spans, SAMPLING_RATE)
            chunks = merge_spans([(s["start"], s["end"]) for s in spans], SAMPLING_RATE, CHUNK_LENGTH)
        elif duration < CHUNK_LENGTH:
            chunks = [SpeechChunk(((0, wave.shape[0]),), SAMPLING_RATE)] if wave.size else []
            ts_map = SpeechTimestampsMap([{"start": 0, "end": wave.shape[0]}], SAMPLING_RATE)
        else:
            raise RuntimeError("No clip timestamps found. Set 'vad_filter' to True or provide 'clip_timestamps'.")
        pieces = [c.audio(wave) for c in chunks]
        speech = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        vad_options = vad if vad is not None else vad_parameters
        info = m._info(
            language, speech, duration, options, vad_options, language_detection_segments, language_detection_threshold
        )
        language = info.language
        if not pieces:
            return iter(()), info
        engine_options = m._engine_options(options, task, language, language_detection_threshold)
        # Each chunk is one window decoded once: no previous text to condition on.
        engine_options.update(condition_on_previous_text=False)

        # A chunk's offset: where it starts in the given clip, or else in the joined speech, whose
        # times are mapped back to the audio as faster-whisper does; its seek: that, in frames, truncated.
        if ts_map is None:
            offsets = [c.start for c in chunks]
        else:
            offsets = list(np.cumsum([0, *(c.num_samples for c in chunks[:-1])]) / SAMPLING_RATE)

        def segments() -> Iterator[Segment]:
            done: dict[int, Any] = {}
            nxt, seg_id = 0, 0
            limit = min(batch_size, m.engine.config.max_batch_size)
            for index, out in m.engine.transcribe_iter(pieces, max_in_flight=limit, **engine_options):
                done[index] = out
                while nxt in done:  # yield in time order as the chunks finish
                    segs = done.pop(nxt).segments
                    # faster-whisper decodes a chunk once: keep its first window, not a tail the
                    # engine's seek rule decoded again after the last word (where Whisper hallucinates)
                    first = segs[0].seek if segs else 0
                    for seg in (s for s in segs if s.seek == first):
                        seg_id += 1
                        seek = int(offsets[nxt] * 100)
                        if ts_map is None:
                            segment = _convert_segment(seg, seg_id, chunks[nxt], seek=seek)
                        else:
                            segment = _convert_segment(seg, seg_id, offset=offsets[nxt], seek=seek)
                        if without_timestamps:  # one segment spanning the chunk, to its last sample
                            segment.end = round(offsets[nxt] + chunks[nxt].duration, 3)
                        yield segment if ts_map is None else _restore(segment, ts_map)
                    nxt += 1

        return _progress(segments(), duration, log_progress), info


def get_suppressed_tokens(tokenizer, suppress_tokens: list[int] | None) -> tuple[int, ...]:
    """faster-whisper's suppressed ids for ``suppress_tokens`` (``[-1]``: the non-speech symbols)."""
    from oasr.compat.faster_whisper.tokenizer import _suppressed

    return _suppressed(tokenizer, suppress_tokens)
