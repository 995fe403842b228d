"""Engine-wide and per-request settings."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from oasr.audio.vad import VadOptions


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs a model.

    Attributes:
        device: "cpu", "cuda", "cuda:1", ...
        dtype: compute dtype ("float32", "float16", "bfloat16"); None keeps float32 on
            CPU and float16 on CUDA.
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
    lm_path: str | None = None
    lm_alpha: float = 0.5
    lm_beta: float = 1.0
    quantize: str | None = None
    step_graphs: bool | None = None
    encoder_batch_size: int | None = None
    sequence_packing: bool | None = None

    def torch_dtype(self) -> torch.dtype:
        if self.dtype is None:
            return torch.float16 if self.device.startswith("cuda") else torch.float32
        table = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
        if self.dtype not in table:
            raise ValueError(f"EngineConfig.dtype={self.dtype!r} is not one of {sorted(table)}")
        return table[self.dtype]

    def __post_init__(self) -> None:
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


@dataclass(frozen=True)
class TranscribeOptions:
    """Per-request decoding options (faster-whisper's names and defaults where they apply).

    Attributes:
        language: ISO code or name; None detects it (multilingual models).
        task: "transcribe" or "translate".
        beam_size: beams at temperature 0 (1 = greedy); None: the decode strategy's own
            default (Whisper: faster-whisper's 5; CTC, transducer, Paraformer: 1, greedy, as
            their references decode by default).
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
        word_timestamps: time every word by cross-attention alignment.
        prepend_punctuations / append_punctuations: punctuation merged into words.
        max_new_tokens: Whisper: the prompt plus this is the decode length limit, of
            which (as in faster-whisper / CTranslate2) at most half is generated, so a
            short prompt gets about (prompt + max_new_tokens) / 2 new tokens per window;
            speech-LLMs: new tokens per request (None: up to the decoder context).
        hotwords: hint phrases: Whisper places them in the previous-text prompt; CTC
            beam search boosts them (phrases separated by commas, semicolons or newlines).
        language_detection_threshold / language_detection_segments: detection settings.
        hallucination_silence_threshold: with word timestamps, skip silences longer
            than this around likely hallucinations.
        clip_timestamps: "start,end,..." seconds (or a list) of the clips to transcribe.
        multilingual: detect the language again in every window.
        seed: RNG seed for sampling (fixed for reproducible fallbacks).
        ctc_weight: CTC + attention rescoring: weight of the CTC score in the
            combined score; None takes the checkpoint's default
            (``DecodingSpec.params["ctc_weight"]``, else 0.5).
        reverse_weight: CTC + attention rescoring: weight of the right-to-left
            decoder's score (0..1); None takes the checkpoint's default
            (``DecodingSpec.params["reverse_weight"]``, else 0.0).
        hotword_weight: CTC decoding with ``hotwords``: bonus (natural log) per token
            of a matched hotword phrase.
        top_k: speech-LLM sampling: keep the k most likely tokens (0 = off).
        top_p: speech-LLM sampling: keep the smallest set of tokens whose probability
            reaches top_p (1.0 = off); must be in (0, 1].
        context: speech-LLM decoding: text placed in the system turn of the prompt to
            bias the transcript (names, terms, the topic).
        vad_filter: cut the audio at speech boundaries with Silero VAD (needs the
            ``vad`` extra) into chunks of at most 30 s of speech, silences left out,
            and decode every chunk as an independent window of one batch (no
            conditioning on the previous chunk's text; ``prefix`` applies to the first
            chunk, ``initial_prompt`` to every chunk; without a ``language`` each chunk
            detects its own). Times are mapped back to the original audio. Audio
            without speech gives an empty transcript.
        vad_parameters: ``oasr.audio.vad.VadOptions`` fields (threshold,
            min_speech_duration_ms, max_speech_duration_s, min_silence_duration_ms,
            speech_pad_ms) overriding its defaults; needs ``vad_filter``.
    """

    language: str | None = None
    task: str = "transcribe"
    beam_size: int | None = None
    best_of: int = 5
    patience: float = 1.0
    length_penalty: float = 1.0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    temperature: float | tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    compression_ratio_threshold: float | None = 2.4
    log_prob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    condition_on_previous_text: bool = True
    prompt_reset_on_temperature: float = 0.5
    initial_prompt: str | tuple[int, ...] | None = None
    prefix: str | None = None
    suppress_blank: bool = True
    suppress_tokens: tuple[int, ...] | None = (-1,)
    without_timestamps: bool = False
    max_initial_timestamp: float = 1.0
    word_timestamps: bool = False
    prepend_punctuations: str = "\"'“¿([{-"
    append_punctuations: str = "\"'.。,，!！?？:：”)]}、"
    max_new_tokens: int | None = None
    hotwords: str | None = None
    language_detection_threshold: float | None = 0.5
    language_detection_segments: int = 1
    hallucination_silence_threshold: float | None = None
    clip_timestamps: str | tuple[float, ...] = "0"
    multilingual: bool = False
    seed: int = 0
    ctc_weight: float | None = None
    reverse_weight: float | None = None
    hotword_weight: float = 1.5
    max_sym_per_frame: int | None = None
    blank_penalty: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    context: str | None = None
    vad_filter: bool = False
    vad_parameters: dict[str, float] | VadOptions | None = None

    @property
    def temperatures(self) -> tuple[float, ...]:
        t = self.temperature
        return tuple(float(x) for x in t) if isinstance(t, (list, tuple)) else (float(t),)

    def __post_init__(self) -> None:
        if self.task not in ("transcribe", "translate"):
            raise ValueError(f"task must be 'transcribe' or 'translate', got {self.task!r}")
        if self.beam_size is not None and self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}")
        if self.best_of < 1:
            raise ValueError(f"best_of must be >= 1, got {self.best_of}")
        if self.patience <= 0:
            raise ValueError(f"patience must be > 0, got {self.patience}")
        if not self.temperatures or not all(t >= 0 for t in self.temperatures):
            raise ValueError(f"temperature must be >= 0 (a value or a non-empty sequence), got {self.temperature!r}")
        for t in self.temperatures:
            # Sampling divides float32 log-probs by t: a t that is 0 or subnormal there (1e-300)
            # would turn the best token's 0 into 0/0 = NaN; one past float32's range into 0.
            if t > 0 and not _FLOAT32.tiny <= t <= _FLOAT32.max:
                raise ValueError(
                    f"temperature {t!r} cannot be represented in float32, which sampling computes in: use 0 "
                    f"(greedy) or a value in [{_FLOAT32.tiny:.3g}, {_FLOAT32.max:.3g}]"
                )
        for name in _FINITE_FIELDS:
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.language_detection_segments < 1:
            raise ValueError("language_detection_segments must be >= 1")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.no_repeat_ngram_size < 0:
            raise ValueError("no_repeat_ngram_size must be >= 0")
        if self.ctc_weight is not None and not self.ctc_weight >= 0:
            raise ValueError(f"ctc_weight must be >= 0, got {self.ctc_weight}")
        if self.reverse_weight is not None and not 0 <= self.reverse_weight <= 1:
            raise ValueError(f"reverse_weight must be in [0, 1], got {self.reverse_weight}")
        if not self.hotword_weight >= 0:
            raise ValueError(f"hotword_weight must be >= 0, got {self.hotword_weight}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1.0 = off), got {self.top_p}")
        if self.vad_parameters is not None:
            if not self.vad_filter:
                raise ValueError("vad_parameters needs vad_filter=True")
            VadOptions.from_parameters(self.vad_parameters)
        if self.vad_filter and not _whole_input(self.clip_timestamps):
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
        if isinstance(language, str) and language.strip().lower() in ("", "auto"):
            kwargs["language"] = None  # detect it (a family without language identification: none forced)
        return cls(**kwargs)

    def replace(self, **changes: Any) -> TranscribeOptions:
        return dataclasses.replace(self, **changes)


_FLOAT32 = torch.finfo(torch.float32)
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


def _whole_input(clips: str | tuple[float, ...]) -> bool:
    """Whether ``clip_timestamps`` leaves the whole input to transcribe (as its default does)."""
    try:
        if isinstance(clips, str):
            points = [float(x) for x in clips.split(",")] if clips.strip() else []
        else:
            points = [float(x) for x in clips]
    except (TypeError, ValueError):
        return False
    return points in ([], [0.0])
