"""NeMo's Sortformer end-to-end diarizer (``SortformerEncLabelModel``, ``.nemo`` archives), offline:
``load(path)`` -> ``SortformerDiarizer`` (an ``oasr.diarization.Diarizer``), ``detect(path)``."""

from oasr.diarization.sortformer.diarizer import SortformerDiarizer, detect, load
from oasr.diarization.sortformer.postprocess import PostProcessing

__all__ = ["PostProcessing", "SortformerDiarizer", "detect", "load"]
