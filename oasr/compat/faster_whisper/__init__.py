"""faster-whisper's Python API over ``oasr.ASREngine``: change the import, keep the code.

    from oasr.compat.faster_whisper import BatchedInferencePipeline, WhisperModel, decode_audio

The package mirrors faster-whisper 1.2's public modules: ``transcribe`` (``WhisperModel``,
``BatchedInferencePipeline``, the result dataclasses), ``audio`` (``decode_audio``), ``vad``
(``VadOptions``, ``get_speech_timestamps``, ``collect_chunks``), ``tokenizer`` (``Tokenizer``),
``feature_extractor`` and ``utils`` (``available_models``, ``download_model``,
``format_timestamp``). ``transcribe``'s docstring says how each argument maps onto oasr.
"""

from oasr.compat.faster_whisper.audio import decode_audio
from oasr.compat.faster_whisper.transcribe import (
    BatchedInferencePipeline,
    Segment,
    TranscriptionInfo,
    TranscriptionOptions,
    WhisperModel,
    Word,
)
from oasr.compat.faster_whisper.utils import available_models, download_model, format_timestamp
from oasr.compat.faster_whisper.version import __version__

__all__ = [
    "BatchedInferencePipeline",
    "Segment",
    "TranscriptionInfo",
    "TranscriptionOptions",
    "WhisperModel",
    "Word",
    "__version__",
    "available_models",
    "decode_audio",
    "download_model",
    "format_timestamp",
]
