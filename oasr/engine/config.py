"""Engine-wide and per-request settings."""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from oasr.audio.vad import VadOptions
from oasr.languages import DETECT

# EngineConfig.dtype's values (None is "auto": the model family's choice for the device).
ENGINE_DTYPES: tuple[str | None, ...] = (None, "auto", "float32", "float16", "bfloat16")


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs a model.

    Attributes:
        device: "cpu", "cuda", "cuda:1", ...
        dtype: compute dtype ("float32", "float16", "bfloat16"); None or "auto": the model
            family's choice for the device (``BaseAsrModel.safe_dtypes``): float32 on CPU,
            and on CUDA the family's preferred half dtype the GPU has (float16 for Whisper
            and the CTC / transducer families, bfloat16 for Qwen3-ASR and Qwen2-Audio). A
            dtype the family is not safe in (float16 for Qwen3-ASR) is refused at load.
        num_threads: intra-op CPU threads (0 leaves torch's default).
        max_batch_size: encoder windows per batch, and decode rows (times the beam)
            per running batch.
        decode_type: decode family to use; None is the model's default.
        architecture: load the checkpoint as this registered architecture (e.g. an icefall
            hybrid as "transducer" rather than the auto-detected "zipformer"); None detects it.
        max_queue_size: requests admitted but not finished before ``add_request``
            refuses with ``EngineOverloaded``.
        ctc_window_s: CTC decoding: the longest stretch of audio encoded in one pass
            (bounds attention memory); longer inputs are cut at the quietest 100 ms of
            the last third of each window and the windows decoded independently.
        max_audio_s: longer inputs are refused with ``oasr.audio.AudioTooLong``, for every
            family and path (plain, VAD, streamed answers): checked from the container's
            header before decoding and counted while decoding, so a header that lies cannot
            get past it. None: no limit (a speech-LLM keeps its own, shorter one).
        lm_path: CTC decoding: an n-gram LM (ARPA or KenLM binary) fused into prefix
            beam search at word boundaries (needs the ``kenlm`` package, the ``lm``
            extra); None for no LM.
        lm_alpha: weight of the LM's natural-log word probabilities.
        lm_beta: bonus per word (word insertion bonus) under the LM.
        quantize: "int8" stores the linear layers' weights as per-channel int8
            (``oasr.layers.quant``): a quarter of the memory, and on CPU int8 GEMMs
            for the decoder's small-row products; None keeps the load dtype.
        step_graphs: record the decoder's step into CUDA graphs, one per batch shape, and
            replay them (``oasr.models.decoders.graphs``). None: on for CUDA devices when
            the decoder supports it. True on a CPU runs the same fixed-shape steps
            without recording them (a check of that path, not a speed-up); False
            always steps eagerly.
        encoder_batch_size: windows per encoder call (the decoder still batches
            ``max_batch_size`` rows). None: 1 on a CPU, where one 30-s window's products
            already fill the cores and a batch of 8 only adds ~350 MB of activations
            (measured: whisper-base, 2 threads, 8 windows one by one 6.6 s and +0 MB peak
            against 7.7 s and +352 MB as one batch), and ``max_batch_size`` on a GPU.
        sequence_packing: CTC decoding: run a batch whose windows differ in length through
            the encoder packed end to end (``BaseAsrModel.forward_offline_packed``), so no
            GEMM or convolution is spent on padding; attention still runs per row. Batches
            that would pad less than ``PACK_MIN_PADDING`` of their frames stay padded.
            None: on when the model supports it (measured on 2 CPU cores, 8 windows of
            2-20 s, 88 s of audio: Parakeet-CTC-0.6B shape 1.46x, LASR 1.39x the padded
            batch, identical text); True requires a model that does; False always pads.
        stream_chunk_ms: streaming: the encoder chunk in ms of audio, mapped per family
            (WeNet: 40-ms units, ``decoding_chunk_size``; causal Zipformer: 20-ms units,
            icefall's ``chunk_size``) and refused where it does not divide; None: the
            family's default.
        stream_left_chunks: streaming: chunks of attention history (None: all of it; refused
            by encoders whose history the weights fix).
        max_streams: streaming: concurrent live streams (slots of the encoder cache); one
            more is refused with ``EngineOverloaded``.
        stream_cache_mb: streaming: the most memory a paged encoder's K/V pool takes; a stream
            that would need more is refused at admission, or fails alone when its unbounded
            history outgrows the pool. None: room for every slot's whole window.
        attention_model: the encoder's attention, switched at load as NeMo's
            ``change_attention_model`` does (the weights serve each): ``rel_pos_local_attn``,
            local attention within ``att_context_size`` (e.g. (128, 128)), whose memory grows
            linearly with the audio, so that with a long ``ctc_window_s`` an hour decodes in one
            pass; ``rel_pos``: full context. None: the checkpoint's. Refused by encoders that
            have no such choice.
        att_context_size: (left, right) encoder frames each query attends to: the band of
            ``attention_model``, or, for a cache-aware checkpoint trained with several, which of
            its contexts runs (the lookahead, offline and streaming: NeMo's
            ``set_default_att_context_size``). None: the checkpoint's default (its first).
        punc_model: a FunASR CT-Transformer punctuation model directory (``ct-punc``) applied to
            every finished transcript without punctuation (``oasr.engine.punctuating``): its
            text, its segments' and its words' text. A request's segments then go out when it
            finishes. None: no punctuation restoration.
        punc_always: with ``punc_model``, punctuate transcripts that already have punctuation
            marks too (by default they are left as the model wrote them).
        diarize_model: a diarization model (``oasr.diarization.loader.load_diarizer``: a
            directory or ``.nemo`` archive) run on every request's audio, batched across requests
            (``oasr.engine.diarizing``): words and segments get speakers. None: no diarization.
    """

    device: str = "cpu"
    dtype: str | None = None
    num_threads: int = 0
    max_batch_size: int = 8
    decode_type: str | None = None
    architecture: str | None = None
    max_queue_size: int = 1024
    ctc_window_s: float = 30.0
    max_audio_s: float | None = 4 * 3600.0
    stream_chunk_ms: float | None = None
    stream_left_chunks: int | None = None
    max_streams: int = 256
    stream_cache_mb: float | None = 1024.0
    lm_path: str | None = None
    lm_alpha: float = 0.5
    lm_beta: float = 1.0
    quantize: str | None = None
    step_graphs: bool | None = None
    encoder_batch_size: int | None = None
    sequence_packing: bool | None = None
    attention_model: str | None = None
    att_context_size: tuple[int, int] | None = None
    punc_model: str | None = None
    punc_always: bool = False
    diarize_model: str | None = None

    def __post_init__(self) -> None:
        if self.punc_always and self.punc_model is None:
            raise ValueError("EngineConfig.punc_always needs a punc_model to punctuate with")
        if self.att_context_size is not None:
            context = tuple(self.att_context_size)
            if len(context) != 2 or not all(isinstance(c, int) and not isinstance(c, bool) for c in context):
                raise ValueError(f"EngineConfig.att_context_size must be (left, right) integers, got {context!r}")
            object.__setattr__(self, "att_context_size", context)  # frozen: the tuple of what was given
        if self.dtype not in ENGINE_DTYPES:
            raise ValueError(f"EngineConfig.dtype={self.dtype!r} is not one of {ENGINE_DTYPES}")
        if self.max_batch_size < 1:
            raise ValueError(f"EngineConfig.max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.encoder_batch_size is not None and self.encoder_batch_size < 1:
            raise ValueError(f"EngineConfig.encoder_batch_size must be >= 1 or None, got {self.encoder_batch_size}")
        if self.num_threads < 0:
            raise ValueError(f"EngineConfig.num_threads must be >= 0, got {self.num_threads}")
        if self.quantize is not None and self.quantize not in ("int8",):
            raise ValueError(f"EngineConfig.quantize must be None or 'int8', got {self.quantize!r}")
        if not self.ctc_window_s >= 1.0:
            raise ValueError(f"EngineConfig.ctc_window_s must be >= 1 s, got {self.ctc_window_s}")
        if self.max_audio_s is not None and not self.max_audio_s > 0:
            raise ValueError(f"EngineConfig.max_audio_s must be > 0 or None, got {self.max_audio_s}")


class _Unset:
    """The value of a ``TranscribeOptions`` field the caller did not set: the decode strategy's own
    default applies (``StrategyOptions``). Falsy, and equal only to itself."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()

MAX_BEAM_SIZE = 64
"""The widest beam any decode strategy takes unless its options class declares its own
``max_beam_size`` (the bound every surface shares: Python, CLI, HTTP, WebSocket)."""


TRANSDUCER_SEARCHES = ("greedy", "malsd", "maes", "beam", "modified_beam")
"""Every transducer search a ``search`` option may name (a model runs some of them)."""


def is_set(value: Any) -> bool:
    """Whether an option value was given (is not ``UNSET``)."""
    return value is not UNSET


@dataclass(frozen=True)
class CommonOptions:
    """The options every decode strategy reads (their defaults are the same for all).

    Attributes:
        language: an ISO 639-1 / 639-3 code, an English name (any case) or a locale
            (``pt-BR``, ``de_DE``), resolved against the model's languages
            (``oasr.languages.resolve_language``: ``LanguageError``, a ValueError, for one it
            lacks); None (or "auto" / "none" / "") detects it where the model can (a family
            without language identification then uses its default prompt, or none).
        task: "transcribe" or "translate" (where the model can translate).
        word_timestamps: time every word (how depends on the strategy: cross-attention
            alignment, CTC / transducer frames, CIF peaks).
        hotwords: hint phrases (separated by commas, semicolons or newlines): Whisper places
            them in the previous-text prompt; CTC beam search boosts them.
        clip_timestamps: "start,end,..." seconds (or a list) of the clips to transcribe; "0"
            is the whole input.
        vad_filter: cut the audio at speech boundaries with Silero VAD (needs the ``vad``
            extra) into chunks of at most 30 s of speech, silences left out, and decode every
            chunk as an independent window of one batch (no conditioning on the previous
            chunk's text; ``prefix`` applies to the first chunk, ``initial_prompt`` to every
            chunk; without a ``language`` each chunk detects its own). Times are mapped back
            to the original audio. Audio without speech gives an empty transcript.
        vad_parameters: ``oasr.audio.vad.VadOptions`` fields (threshold,
            min_speech_duration_ms, max_speech_duration_s, min_silence_duration_ms,
            speech_pad_ms) overriding its defaults; needs ``vad_filter``.
        diarize: who spoke when (``EngineConfig.diarize_model``, ``oasr.engine.diarizing``): None
            diarizes when the engine has a diarizer; True needs one; False skips it.
        num_speakers / min_speakers / max_speakers: the number of speakers, or bounds on it
            (None: the diarizer decides); need a diarizer.
        known_speakers: ``{name: reference audio}`` (a path, bytes or a 16 kHz waveform, 2 to 10 s
            each, at most 4): found speakers whose voice matches a reference are named after it
            (``oasr.diarization.service``); needs a diarizer that embeds voices.
    """

    language: str | None = None
    task: str = "transcribe"
    word_timestamps: bool = False
    hotwords: str | None = None
    clip_timestamps: str | tuple[float, ...] = "0"
    vad_filter: bool = False
    vad_parameters: dict[str, float] | VadOptions | None = None
    diarize: bool | None = None
    num_speakers: int | None = None
    min_speakers: int | None = None
    max_speakers: int | None = None
    known_speakers: dict[str, Any] | None = None


@dataclass(frozen=True)
class TranscribeOptions(CommonOptions):
    """One request's decoding options: the common core (``CommonOptions``) plus every decode
    strategy's own options, in one validated value that travels with the request.

    A strategy option the caller did not set is ``UNSET``; the strategy's ``validate``
    (``StrategyOptions.resolve``) fills it with that strategy's default and refuses a set
    option it does not take, naming the strategies that do. Each default is written once, in
    the strategy's options dataclass: ``WhisperOptions`` (faster-whisper's defaults),
    ``CtcOptions``, ``TransducerOptions``, ``ParaformerOptions``, ``LlmOptions`` (the
    checkpoint's generation config). What each field means (faster-whisper's names where
    they apply):

    Attributes:
        beam_size: beams at temperature 0 (1 = greedy).
        best_of: independent samples at temperature > 0.
        patience: beam search patience factor.
        length_penalty: exponential length penalty of beam scores.
        repetition_penalty: > 1 penalises tokens already generated.
        no_repeat_ngram_size: forbid repeating n-grams of this size (0 = off).
        temperature: one temperature or the fallback sequence.
        compression_ratio_threshold: gzip ratio above which a decode is retried hotter.
        log_prob_threshold: average log-prob below which a decode is retried hotter.
        no_speech_threshold: no-speech probability above which (with a low log-prob)
            a window is treated as silence.
        condition_on_previous_text: prompt each window with the previous text.
        prompt_reset_on_temperature: stop conditioning after a decode hotter than this.
        initial_prompt: text (or token ids) to prompt the first window with.
        prefix: text the first window's transcript starts with.
        suppress_blank: suppress a leading blank at the first step.
        suppress_tokens: ids to suppress; -1 expands to the non-speech symbols.
        without_timestamps: sample text tokens only (segments then span whole windows).
        max_initial_timestamp: the first timestamp is at most this (seconds).
        prepend_punctuations / append_punctuations: punctuation merged into words.
        max_new_tokens: Whisper: the prompt plus this is each window's decode length limit,
            of which (as in faster-whisper / CTranslate2) at most half is generated; speech-LLMs:
            new tokens per request (None: the checkpoint's generation config's, else a budget
            that follows the audio's duration, ``oasr.engine.decode.llm.default_token_budget``).
            Either way capped by the context; a result cut by it has ``finish_reason="length"``.
        language_detection_threshold / language_detection_segments: detection settings.
        hallucination_silence_threshold: with word timestamps, skip silences longer
            than this around likely hallucinations.
        multilingual: detect the language again in every window.
        seed: RNG seed of the sampled decodes (Whisper's temperature fallback and ``best_of``,
            a speech-LLM at temperature > 0): the same seed replays the same samples; None
            draws a fresh seed for every request (vLLM's and faster-whisper's behaviour).
        ctc_weight: CTC + attention rescoring: weight of the CTC score (None: the
            checkpoint's ``DecodingSpec.params["ctc_weight"]``, else 0.5).
        reverse_weight: CTC + attention rescoring: weight of the right-to-left decoder's
            score, 0..1 (None: the checkpoint's, else 0.0).
        hotword_weight: CTC decoding (and icefall's transducer beam) with ``hotwords``: bonus
            (natural log) per token of a matched hotword phrase; for a NeMo checkpoint (CTC, and
            the transducer's malsd search), the weight of its boosting tree (NeMo's
            ``boosting_tree_alpha``; unset: the archive's when above 0, else 1.5).
        max_sym_per_frame: transducer greedy search: symbols per encoder frame (None: the
            model's own rule).
        blank_penalty: transducer: subtracted from the blank logit before the search.
        search: transducer: which search ("greedy", NeMo's "malsd" / "maes" / "beam", icefall's
            "modified_beam"; the model names those it runs); None: the checkpoint's (a NeMo
            archive's ``decoding.strategy``), else greedy for ``beam_size`` 1 and the model's
            first beam search for a wider beam.
        top_k: speech-LLM sampling: keep the k most likely tokens (0 = off).
        top_p: speech-LLM sampling: keep the smallest set of tokens whose probability
            reaches top_p, in (0, 1] (1.0 = off).
        context: speech-LLM decoding: text placed in the system turn of the prompt to bias
            the transcript (names, terms, the topic); Canary 2: the decoder context (text in
            the target language before the prompt).
        target_language: Canary: the language of the output (one of the model's); a target other
            than ``language`` is speech translation (AST). Unset with ``task="translate"``:
            English, as OpenAI's translations; else the spoken language.
        punctuation: Canary: punctuation and capitalisation (``<|pnc|>`` / ``<|nopnc|>``; unset:
            the archive's ``prompt_defaults``, else on, as NeMo's default).
        itn: Canary 2: inverse text normalisation (``<|itn|>`` / ``<|noitn|>``; unset: the
            archive's ``prompt_defaults``, else off).
    """

    beam_size: int = UNSET
    best_of: int = UNSET
    patience: float = UNSET
    length_penalty: float = UNSET
    repetition_penalty: float | None = UNSET
    no_repeat_ngram_size: int = UNSET
    temperature: float | tuple[float, ...] | None = UNSET
    compression_ratio_threshold: float | None = UNSET
    log_prob_threshold: float | None = UNSET
    no_speech_threshold: float | None = UNSET
    condition_on_previous_text: bool = UNSET
    prompt_reset_on_temperature: float = UNSET
    initial_prompt: str | tuple[int, ...] | None = UNSET
    prefix: str | None = UNSET
    suppress_blank: bool = UNSET
    suppress_tokens: tuple[int, ...] | None = UNSET
    without_timestamps: bool = UNSET
    max_initial_timestamp: float = UNSET
    prepend_punctuations: str = UNSET
    append_punctuations: str = UNSET
    max_new_tokens: int | None = UNSET
    language_detection_threshold: float | None = UNSET
    language_detection_segments: int = UNSET
    hallucination_silence_threshold: float | None = UNSET
    multilingual: bool = UNSET
    seed: int | None = UNSET
    ctc_weight: float | None = UNSET
    reverse_weight: float | None = UNSET
    hotword_weight: float = UNSET
    max_sym_per_frame: int | None = UNSET
    blank_penalty: float = UNSET
    search: str | None = UNSET
    top_k: int | None = UNSET
    top_p: float | None = UNSET
    context: str | None = UNSET
    target_language: str | None = UNSET
    punctuation: bool | None = UNSET
    itn: bool | None = UNSET

    @property
    def temperatures(self) -> tuple[float, ...]:
        """``temperature`` as a sequence (() when unset or None)."""
        t = self.temperature
        if t is UNSET or t is None:
            return ()
        return tuple(float(x) for x in t) if isinstance(t, (list, tuple)) else (float(t),)

    def given(self) -> dict[str, Any]:
        """The strategy options that were set (the common core left out)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in COMMON_FIELDS and getattr(self, f.name) is not UNSET
        }

    def __post_init__(self) -> None:
        def given(name: str) -> bool:
            value = getattr(self, name)
            return value is not UNSET and value is not None

        if self.task not in ("transcribe", "translate"):
            raise ValueError(f"task must be 'transcribe' or 'translate', got {self.task!r}")
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if given(name) and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if given("beam_size") and self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}")
        if given("best_of") and self.best_of < 1:
            raise ValueError(f"best_of must be >= 1, got {self.best_of}")
        if given("patience") and not self.patience > 0:
            raise ValueError(f"patience must be > 0, got {self.patience}")
        if given("temperature"):
            temps = self.temperatures
            if not temps or not all(t >= 0 for t in temps):
                raise ValueError(
                    f"temperature must be >= 0 (a value or a non-empty sequence), got {self.temperature!r}"
                )
            for t in temps:
                # Sampling divides float32 log-probs by t: a t that is 0 or subnormal there (1e-300)
                # would turn the best token's 0 into 0/0 = NaN; one past float32's range into 0.
                if t > 0 and not _FLOAT32.tiny <= t <= _FLOAT32.max:
                    raise ValueError(
                        f"temperature {t!r} cannot be represented in float32, which sampling computes in: use 0 "
                        f"(greedy) or a value in [{_FLOAT32.tiny:.3g}, {_FLOAT32.max:.3g}]"
                    )
        for name in _FINITE_FIELDS:
            if given(name) and not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)!r}")
        if given("max_new_tokens") and self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if given("seed") and (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, numbers.Integral)
            or not _INT64_MIN <= self.seed <= _INT64_MAX
        ):
            raise ValueError(f"seed must be an integer in [-2**63, 2**63 - 1] or None, got {self.seed!r}")
        if given("language_detection_segments") and self.language_detection_segments < 1:
            raise ValueError("language_detection_segments must be >= 1")
        if given("repetition_penalty") and not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if given("no_repeat_ngram_size") and self.no_repeat_ngram_size < 0:
            raise ValueError("no_repeat_ngram_size must be >= 0")
        if given("ctc_weight") and not self.ctc_weight >= 0:
            raise ValueError(f"ctc_weight must be >= 0, got {self.ctc_weight}")
        if given("reverse_weight") and not 0 <= self.reverse_weight <= 1:
            raise ValueError(f"reverse_weight must be in [0, 1], got {self.reverse_weight}")
        if given("hotword_weight") and not self.hotword_weight >= 0:
            raise ValueError(f"hotword_weight must be >= 0, got {self.hotword_weight}")
        if given("max_sym_per_frame") and self.max_sym_per_frame < 1:
            raise ValueError(f"max_sym_per_frame must be >= 1, got {self.max_sym_per_frame}")
        if given("search") and self.search not in TRANSDUCER_SEARCHES:
            raise ValueError(f"search must be one of {list(TRANSDUCER_SEARCHES)} or None, got {self.search!r}")
        for name in ("itn", "punctuation"):  # prompt switches: "no" would be true
            if given(name) and not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if given("top_k") and self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if given("top_p") and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1.0 = off), got {self.top_p}")
        if self.vad_parameters is not None:
            if not self.vad_filter:
                raise ValueError("vad_parameters needs vad_filter=True")
            VadOptions.from_parameters(self.vad_parameters)
        if self.vad_filter and not whole_input(self.clip_timestamps):
            raise ValueError(
                f"clip_timestamps={self.clip_timestamps!r} cannot be combined with vad_filter=True "
                f"(VAD picks the stretches to transcribe)"
            )

    def vad_options(self) -> VadOptions:
        """The VAD settings of a ``vad_filter`` request (defaults overridden by ``vad_parameters``)."""
        return VadOptions.from_parameters(self.vad_parameters)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> TranscribeOptions:
        """Build from keyword options, refusing unknown names with the list of known ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown transcribe option(s) {unknown}; known options: {sorted(known)}")
        for key in ("suppress_tokens", "temperature", "clip_timestamps", "initial_prompt"):
            if isinstance(kwargs.get(key), list):
                kwargs[key] = tuple(kwargs[key])
        language = kwargs.get("language")
        if isinstance(language, str) and language.strip().lower() in DETECT:
            kwargs["language"] = None  # detect it (a family without language identification: none forced)
        return cls(**kwargs)

    def replace(self, **changes: Any) -> TranscribeOptions:
        return dataclasses.replace(self, **changes)


COMMON_FIELDS = frozenset(f.name for f in dataclasses.fields(CommonOptions))


class OptionNotTaken(TypeError, ValueError):
    """A set option that the chosen decode strategy does not read (a ``TypeError`` as for an
    unknown keyword, and a ``ValueError`` as for any refused value: HTTP 400, CLI exit 2)."""


@dataclass(frozen=True)
class StrategyOptions:
    """Base of a decode strategy's options dataclass: its fields are the ``TranscribeOptions``
    fields the strategy reads beyond the common core, with the strategy's defaults.

    A strategy names its dataclass in ``DecodeStrategy.options_class``; ``resolve`` is what its
    ``validate`` starts with.
    """

    hints: ClassVar[dict[str, str]] = {}
    """What to use instead of an option the strategy does not take, by option name (added to the
    refusal)."""

    max_beam_size: ClassVar[int] = MAX_BEAM_SIZE
    """The widest ``beam_size`` the strategy takes (a strategy may declare its own): a beam's cost
    grows with its width, and every request sharing its batches, or stream sharing its steps, pays it."""

    @classmethod
    def field_names(cls) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(cls))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Each field's default (the strategy's, written once, here)."""
        out = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        return out

    @classmethod
    def resolve(cls, options: TranscribeOptions, strategy: str) -> TranscribeOptions:
        """``options`` with this strategy's defaults in place of its unset fields.

        Raises:
            OptionNotTaken: a set option that this strategy does not read (the message names
                the registered strategies that do).
        """
        own = cls.field_names()
        foreign = sorted(set(options.given()) - own)
        if foreign:
            raise OptionNotTaken(
                "; ".join(
                    f"{name}: {_not_taken(name, strategy)}" + (f"; {cls.hints[name]}" if name in cls.hints else "")
                    for name in foreign
                )
            )
        fill = {name: value for name, value in cls.defaults().items() if getattr(options, name) is UNSET}
        options = options.replace(**fill) if fill else options
        beam = options.beam_size if "beam_size" in own else None
        if is_set(beam) and beam is not None and beam > cls.max_beam_size:
            raise ValueError(f"beam_size={beam}: the {strategy!r} decoding takes beams of at most {cls.max_beam_size}")
        return options


def _not_taken(name: str, strategy: str) -> str:
    from oasr.engine.decode.registry import strategies_taking

    takers = [repr(t) for t in strategies_taking(name)]
    if not takers:
        return f"the {strategy!r} decoding does not take it (no decode strategy does)"
    named = takers[0] if len(takers) == 1 else ", ".join(takers[:-1]) + " and " + takers[-1]
    return f"the {strategy!r} decoding does not take it (only {named} decoding does)"


_FLOAT32 = torch.finfo(torch.float32)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1  # a seed is a 64-bit integer, as for vLLM and torch
# Integer options: a float (JSON's 1e400 is inf, 2.5 a fraction) is refused here, not at an int() deep in a
# search (``seed`` has its own check below, with its 64-bit range).
_INT_FIELDS = (
    "beam_size",
    "best_of",
    "no_repeat_ngram_size",
    "max_new_tokens",
    "language_detection_segments",
    "max_sym_per_frame",
    "top_k",
)
# Float options that must be finite when set (NaN passes every comparison-based range check).
_FINITE_FIELDS = (
    "patience",
    "length_penalty",
    "repetition_penalty",
    "compression_ratio_threshold",
    "log_prob_threshold",
    "no_speech_threshold",
    "prompt_reset_on_temperature",
    "max_initial_timestamp",
    "language_detection_threshold",
    "hallucination_silence_threshold",
    "ctc_weight",
    "reverse_weight",
    "hotword_weight",
    "blank_penalty",
    "top_p",
)


def whole_input(clips: str | tuple[float, ...]) -> bool:
    """Whether ``clip_timestamps`` leaves the whole input to transcribe (as its default does)."""
    try:
        if isinstance(clips, str):
            points = [float(x) for x in clips.split(",")] if clips.strip() else []
        else:
            points = [float(x) for x in clips]
    except (TypeError, ValueError):
        return False
    return points in ([], [0.0])
