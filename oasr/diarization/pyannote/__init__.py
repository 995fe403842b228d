"""pyannote.audio 4's speaker-diarization pipeline: PyanNet segmentation, WeSpeaker ResNet embeddings,
VBx / agglomerative clustering (see ``pipeline.py`` for the life of a batch, ``checkpoint.py`` for the
folder layout it reads: ``config.yaml`` + ``segmentation/``, ``embedding/``, ``plda/``).

Released pipelines it reads once downloaded: ``pyannote/speaker-diarization-community-1`` (VBx, as
is) and ``pyannote/speaker-diarization-3.1`` (agglomerative; its config names the models by hub id,
so point ``segmentation`` / ``embedding`` at the downloaded ``segmentation-3.0`` and
``wespeaker-voxceleb-resnet34-LM`` folders).
"""

from __future__ import annotations

from pathlib import Path

import torch

from oasr.diarization.pyannote.checkpoint import (
    PIPELINE_CLASS,
    find_config,
    read_model_checkpoint,
    read_pipeline_config,
)
from oasr.diarization.pyannote.pipeline import Analysis, PyannoteDiarizer

__all__ = ["Analysis", "PyannoteDiarizer", "detect", "load"]


def detect(path: str | Path) -> bool:
    """Whether ``path`` (a folder or its ``config.yaml``) holds a pyannote SpeakerDiarization pipeline."""
    config = find_config(path)
    if config is None:
        return False
    try:
        text = config.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return PIPELINE_CLASS in text


def load(
    path: str | Path, *, device: str | torch.device = "cpu", dtype: torch.dtype | str | None = None
) -> PyannoteDiarizer:
    """Load a pipeline folder (or its config file) as pyannote 4 lays it out.

    Args:
        path: the folder holding ``config.yaml`` (or the YAML file itself).
        device: where the segmentation and embedding models run.
        dtype: their compute dtype, a torch dtype or its name ("float32" by default; "float64" for
            reference comparisons).
    """
    if isinstance(dtype, str):
        if not isinstance(getattr(torch, dtype, None), torch.dtype) or not getattr(torch, dtype).is_floating_point:
            raise ValueError(f"dtype must name a torch float dtype (float32, float64, ...), got {dtype!r}")
        dtype = getattr(torch, dtype)
    from oasr.diarization.pyannote.clustering import PLDA
    from oasr.diarization.pyannote.embedding import build_wespeaker
    from oasr.diarization.pyannote.segmentation import build_pyannet

    config = read_pipeline_config(path)
    segmentation, powerset, window_s = build_pyannet(read_model_checkpoint(config.segmentation))
    embedding = build_wespeaker(read_model_checkpoint(config.embedding))
    plda = PLDA.load(config.plda) if config.plda is not None else None
    return PyannoteDiarizer(
        config,
        segmentation,
        powerset,
        window_s,
        embedding,
        plda,
        device=torch.device(device),
        dtype=dtype or torch.float32,
    )
