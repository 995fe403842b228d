"""Nemotron 3 Diarization's settings, read from the directory transformers' ``save_pretrained``
writes: ``config.json`` (``model_type`` ``nemotron3_diarization``: ``audio_config``,
``head_config``, ``streaming_config`` and the offline chunking), and the processor's
``processor_config.json`` (its ``feature_extractor`` entry, the NeMo-style log-mel of
``NemotronAsrStreamingFeatureExtractor``, and the streaming modes) or a hub release's
``preprocessor_config.json``. Field names are transformers'; defaults are transformers'
(those of the released ``nvidia/Nemotron-3-Diarization``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oasr.models.base import LoadError
from oasr.models.formats.hf import feature_extractor_config, read_json, read_json_if_present

MODEL_TYPE = "nemotron3_diarization"
# transformers' Nemotron3DiarizationProcessor's modes: name -> (chunk_length, chunk_right_context) in encoder frames.
DEFAULT_STREAMING_MODES = {"low_latency": (9, 4), "very_low_latency": (6, 2), "ultra_low_latency": (3, 1)}
DEFAULT_STREAMING_MODE = "low_latency"


@dataclass(frozen=True)
class CachePolicy:
    """The Arrival-Order Speaker Cache and its FIFO queue (``streaming_config``), with the FIFO
    sizes of one mode: offline (``config.fifo_length`` / ``speaker_cache_update_period``) or
    streaming (``streaming_config``'s own).

    Attributes:
        fifo_length: encoder frames the FIFO queue holds.
        update_period: frames moved at least from the FIFO to the cache when the FIFO overflows.
        cache_length: frames the speaker cache holds once compressed.
        silence_frames: cache slots per speaker kept for the learned silence embedding.
        prediction_score_threshold: lower clamp of the probabilities before their logs (frame scores).
        latest_frames_score_boost: score bonus of the frames just moved into the cache.
        strong_boost_rate, weak_boost_rate, min_positive_scores_rate: fractions of a speaker's
            cache budget (see ``model.compress_cache``).
        num_speakers: output slots.
        subsampling_factor: probability frames per encoder frame.
    """

    fifo_length: int
    update_period: int
    cache_length: int
    silence_frames: int
    prediction_score_threshold: float
    latest_frames_score_boost: float
    strong_boost_rate: float
    weak_boost_rate: float
    min_positive_scores_rate: float
    num_speakers: int
    subsampling_factor: int


@dataclass(frozen=True)
class Nemotron3DiarizationConfig:
    """The architecture and the chunking of both modes.

    Attributes:
        hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim: the
            transformer encoder (pre-LayerNorm blocks, rotary attention, GELU MLP).
        hidden_act: the MLP's activation.
        rope_theta, partial_rotary_factor: rotary positions on the first
            ``head_dim * partial_rotary_factor`` channels of each head.
        num_mel_bins: log-mel bins per feature frame.
        subsampling_factor: feature frames stacked into one encoder frame.
        head_hidden_size: width of the speaker head.
        num_speakers: output slots, ordered by arrival.
        chunk_length, chunk_left_context, chunk_right_context: offline chunking, encoder frames.
        offline: the cache policy with the offline FIFO sizes.
        streaming: the cache policy with the streaming FIFO sizes.
    """

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_act: str
    rope_theta: float
    partial_rotary_factor: float
    num_mel_bins: int
    subsampling_factor: int
    head_hidden_size: int
    num_speakers: int
    chunk_length: int
    chunk_left_context: int
    chunk_right_context: int
    offline: CachePolicy
    streaming: CachePolicy

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Nemotron3DiarizationConfig:
        """From ``config.json``'s object (transformers' field names and defaults).

        Raises:
            ValueError: a rope type other than the default, or sizes that do not fit together.
        """
        audio = dict(data.get("audio_config") or {})
        head = dict(data.get("head_config") or {})
        stream = dict(data.get("streaming_config") or {})
        rope = dict(audio.get("rope_parameters") or {})
        if rope.get("rope_type", "default") != "default":
            raise ValueError(
                f"nemotron3_diarization: rope_type {rope['rope_type']!r} is not supported (only 'default')"
            )
        hidden = int(audio.get("hidden_size", 512))
        heads = int(audio.get("num_attention_heads", 8))
        if hidden % heads:
            raise ValueError(f"nemotron3_diarization: hidden_size {hidden} is not a multiple of {heads} heads")
        factor = int(audio.get("subsampling_factor", 8))
        speakers = int(head.get("num_speakers", 8))
        for name, value in (
            ("head_config.audio_hidden_size", int(head.get("audio_hidden_size", hidden))),
            ("head_config.subsampling_factor", int(head.get("subsampling_factor", factor))),
            ("streaming_config.subsampling_factor", int(stream.get("subsampling_factor", factor))),
        ):
            if value != (hidden if name.endswith("hidden_size") else factor):
                raise ValueError(f"nemotron3_diarization: {name} {value} does not match the audio_config")
        if int(stream.get("num_speakers", speakers)) != speakers:
            raise ValueError("nemotron3_diarization: streaming_config.num_speakers does not match head_config")

        def policy(fifo_length: int, update_period: int) -> CachePolicy:
            return CachePolicy(
                fifo_length=fifo_length,
                update_period=update_period,
                cache_length=int(stream.get("speaker_cache_length", 264)),
                silence_frames=int(stream.get("speaker_cache_silence_frames_per_speaker", 1)),
                prediction_score_threshold=float(stream.get("prediction_score_threshold", 0.25)),
                latest_frames_score_boost=float(stream.get("latest_frames_score_boost", 0.05)),
                strong_boost_rate=float(stream.get("strong_boost_rate", 0.75)),
                weak_boost_rate=float(stream.get("weak_boost_rate", 1.5)),
                min_positive_scores_rate=float(stream.get("min_positive_scores_rate", 0.5)),
                num_speakers=speakers,
                subsampling_factor=factor,
            )

        offline = policy(int(data.get("fifo_length", 40)), int(data.get("speaker_cache_update_period", 300)))
        streaming = policy(int(stream.get("fifo_length", 264)), int(stream.get("speaker_cache_update_period", 222)))
        if offline.cache_length < (1 + offline.silence_frames) * speakers:
            raise ValueError(
                f"nemotron3_diarization: speaker_cache_length {offline.cache_length} is below "
                f"(1 + silence frames) * num_speakers = {(1 + offline.silence_frames) * speakers}"
            )
        cfg = cls(
            hidden_size=hidden,
            intermediate_size=int(audio.get("intermediate_size", 2048)),
            num_layers=int(audio.get("num_hidden_layers", 31)),
            num_heads=heads,
            num_kv_heads=int(audio.get("num_key_value_heads") or heads),
            head_dim=int(audio.get("head_dim") or hidden // heads),
            hidden_act=str(audio.get("hidden_act", "gelu")),
            rope_theta=float(rope.get("rope_theta", 10000.0)),
            partial_rotary_factor=float(rope.get("partial_rotary_factor", 1.0)),
            num_mel_bins=int(audio.get("num_mel_bins", 128)),
            subsampling_factor=factor,
            head_hidden_size=int(head.get("hidden_size", 192)),
            num_speakers=speakers,
            chunk_length=int(data.get("chunk_length", 340)),
            chunk_left_context=int(data.get("chunk_left_context", 0)),
            chunk_right_context=int(data.get("chunk_right_context", 40)),
            offline=offline,
            streaming=streaming,
        )
        if not 0 <= cfg.chunk_right_context < cfg.chunk_length or cfg.chunk_left_context < 0:
            raise ValueError(
                f"nemotron3_diarization: chunk_right_context {cfg.chunk_right_context} must be in [0, chunk_length "
                f"{cfg.chunk_length}) and chunk_left_context {cfg.chunk_left_context} >= 0"
            )
        return cfg


@dataclass(frozen=True)
class FeatureConfig:
    """The log-mel front end (``NemotronAsrStreamingFeatureExtractor``'s fields)."""

    feature_size: int = 128
    sampling_rate: int = 16000
    hop_length: int = 160
    n_fft: int = 512
    win_length: int = 400
    preemphasis: float | None = 0.97


@dataclass(frozen=True)
class Checkpoint:
    """Everything a directory says: the model, its front end and its streaming modes."""

    model: Nemotron3DiarizationConfig
    features: FeatureConfig
    streaming_modes: dict[str, tuple[int, int]]
    streaming_mode: str


def is_checkpoint(path: str | Path) -> bool:
    """Does ``path`` hold a transformers ``nemotron3_diarization`` directory?"""
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return False
    try:
        return read_json(cfg).get("model_type") == MODEL_TYPE
    except LoadError:
        return False


def read_checkpoint(directory: str | Path) -> Checkpoint:
    """The settings of a ``save_pretrained`` directory.

    Raises:
        LoadError: not a ``nemotron3_diarization`` directory, or settings that do not fit.
    """
    directory = Path(directory)
    data = read_json(directory / "config.json") if (directory / "config.json").is_file() else {}
    if data.get("model_type") != MODEL_TYPE:
        raise LoadError(f"{directory}: no config.json with model_type {MODEL_TYPE!r}")
    try:
        model = Nemotron3DiarizationConfig.from_dict(data)
    except ValueError as e:
        raise LoadError(f"{directory}: {e}") from None
    fe, fe_file = feature_extractor_config(directory)
    if fe_file is None:
        raise LoadError(f"{directory}: no feature-extractor config (processor_config.json or preprocessor_config.json)")
    features = FeatureConfig(**{k: fe[k] for k in FeatureConfig.__dataclass_fields__ if k in fe})
    if features.feature_size != model.num_mel_bins:
        raise LoadError(
            f"{fe_file}: feature_size {features.feature_size} does not match num_mel_bins {model.num_mel_bins}"
        )
    if fe.get("mel_filters_dtype", "float32") != "float32":
        raise LoadError(f"{fe_file}: mel_filters_dtype {fe['mel_filters_dtype']!r} is not supported (only float32)")
    proc = read_json_if_present(directory / "processor_config.json")
    modes = {
        str(k): (int(v[0]), int(v[1])) for k, v in (proc.get("streaming_modes") or DEFAULT_STREAMING_MODES).items()
    }
    mode = str(proc.get("streaming_mode", DEFAULT_STREAMING_MODE))
    if mode not in modes:
        raise LoadError(f"{directory}: streaming_mode {mode!r} is not one of its streaming_modes {sorted(modes)}")
    for name, (length, right) in modes.items():
        if length < 1 or right < 0:
            raise LoadError(f"{directory}: streaming mode {name!r} needs chunk_length >= 1, right context >= 0")
    return Checkpoint(model=model, features=features, streaming_modes=modes, streaming_mode=mode)
