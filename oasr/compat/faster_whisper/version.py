"""The faster-whisper release whose API this drop-in follows."""

__version__ = "1.2.1"
