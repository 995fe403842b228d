"""Shim for running faster-whisper's own suite against the real faster-whisper on oasr's bundled
weights: "tiny" / "tiny.en" become the CTranslate2 directories named in $OASR_FW_MODELS
("tiny=DIR,tiny.en=DIR"), the same weights the drop-in's shim gives its "tiny" (whisper-base)."""

import os

import faster_whisper.transcribe as _t

_MAP = dict(kv.split("=", 1) for kv in os.environ.get("OASR_FW_MODELS", "").split(",") if kv)
_init = _t.WhisperModel.__init__


def _init_mapped(self, model_size_or_path, *args, **kwargs):
    _init(self, _MAP.get(model_size_or_path, model_size_or_path), *args, **kwargs)


_t.WhisperModel.__init__ = _init_mapped
