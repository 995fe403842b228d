"""Drop-in Python APIs of other ASR packages over oasr's engine.

``oasr.compat.faster_whisper``: faster-whisper's ``WhisperModel`` and
``BatchedInferencePipeline`` (``from oasr.compat.faster_whisper import WhisperModel``).
"""
