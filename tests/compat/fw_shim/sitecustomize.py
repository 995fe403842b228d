"""Import shim for faster-whisper's own test suite: ``faster_whisper`` is oasr's drop-in, and
faster-whisper's Hub size "tiny" is the bundled whisper-base (oasr downloads nothing)."""

import sys

import oasr.compat.faster_whisper as fw
from oasr.compat.faster_whisper import audio, feature_extractor, tokenizer, transcribe, utils, vad, version

sys.modules["faster_whisper"] = fw
for _name, _mod in [
    ("audio", audio),
    ("feature_extractor", feature_extractor),
    ("tokenizer", tokenizer),
    ("transcribe", transcribe),
    ("utils", utils),
    ("vad", vad),
    ("version", version),
]:
    sys.modules[f"faster_whisper.{_name}"] = _mod

_init = transcribe.WhisperModel.__init__


def _init_tiny_as_base(self, model_size_or_path, *args, **kwargs):
    _init(self, "base" if model_size_or_path == "tiny" else model_size_or_path, *args, **kwargs)


transcribe.WhisperModel.__init__ = _init_tiny_as_base
