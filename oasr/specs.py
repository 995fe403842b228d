"""The specs a checkpoint carries besides its weights, and the decode-type names: the bottom of
the package, importable by every layer (audio front ends, tokenizers, layers, models, engine)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class DecodeType(str, enum.Enum):
    """The decode families a checkpoint can serve."""

    CTC = "ctc"
    CTC_AED_RESCORING = "ctc_aed_rescoring"
    TRANSDUCER = "transducer"
    AED = "aed"
    PARAFORMER = "paraformer"
    LLM = "llm"
    MULTITASK = "multitask"  # a prompted encoder-decoder (NeMo's Canary): one pass per clip
    RICH_CTC = "rich_ctc"  # CTC behind prompt rows, tags + text out (FunASR's SenseVoice)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TokenizerSpec:
    """How to build the tokenizer of a checkpoint.

    Attributes:
        kind: "huggingface" (tokenizer.json), "sentencepiece", "table" (a units file),
            "chars" (a character CTC ``vocab.json``) or "none".
        path: the file to load.
        special_ids: ids the decoder emits that are not text (filtered before detokenising).
    """

    kind: str
    path: str | None = None
    special_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class FeatureSpec:
    """The acoustic front end a checkpoint expects.

    Attributes:
        kind: "whisper_mel", "kaldi_fbank", "lasr_mel", "nemo_mel", ...
        sampling_rate: input rate in Hz.
        params: front-end parameters (n_mels, n_fft, hop_length, chunk_length, ...).
    """

    kind: str
    sampling_rate: int = 16000
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DecodingSpec:
    """Decoding defaults a checkpoint carries (e.g. a Hugging Face generation_config).

    ``params`` holds family-specific ids and lists (suppress tokens, language ids,
    alignment heads, ...) that the decode strategy of ``decode_type`` reads.
    """

    decode_type: DecodeType
    params: Mapping[str, Any] = field(default_factory=dict)


__all__ = ["DecodeType", "DecodingSpec", "FeatureSpec", "TokenizerSpec"]
