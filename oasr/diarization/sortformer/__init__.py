"""NeMo's Sortformer end-to-end diarizer (``SortformerEncLabelModel``, ``.nemo`` archives), offline
and streaming: ``load(path)`` -> ``SortformerDiarizer`` (an ``oasr.diarization.Diarizer``),
``detect(path)``; a live stream from ``SortformerDiarizer.open_stream()`` (``stream.py``)."""

from oasr.diarization.sortformer.diarizer import SortformerDiarizer, detect, load
from oasr.diarization.sortformer.postprocess import PostProcessing
from oasr.diarization.sortformer.stream import SortformerStream, StreamUpdate

__all__ = ["PostProcessing", "SortformerDiarizer", "SortformerStream", "StreamUpdate", "detect", "load"]
