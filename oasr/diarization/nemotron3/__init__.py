"""NVIDIA's Nemotron 3 Diarization (transformers' ``nemotron3_diarization``): an end-to-end
streaming diarizer for up to 8 speakers ordered by arrival, offline (``load(path).diarize``) and
live (``load(path).stream()``). Reads the directory transformers' ``save_pretrained`` writes (the
layout of the released ``nvidia/Nemotron-3-Diarization``)."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["Nemotron3Diarizer", "detect", "load"]

_MODULES = {
    "Nemotron3Diarizer": "oasr.diarization.nemotron3.diarizer",
    "detect": "oasr.diarization.nemotron3.diarizer",
    "load": "oasr.diarization.nemotron3.diarizer",
}
# torch loads with the model; `detect` on a path should not pay for more than the config sniff.
__getattr__ = lazy_exports(__name__, _MODULES)
