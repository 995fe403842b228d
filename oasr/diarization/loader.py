"""``load_diarizer(path)``: whichever diarization model package reads ``path``.

Each model lives in a package ``oasr.diarization.<name>`` that exposes ``detect(path) -> bool``
(does this directory or file hold my layout?) and ``load(path, *, device, dtype) -> Diarizer``.
``PACKAGES`` names them, in the order they are asked; a package is imported only when a path is
being matched, so ``oasr --help`` and an engine without a diarizer never import one.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

from oasr.diarization.types import Diarizer

PACKAGES: dict[str, tuple[str, str]] = {
    "nemotron3": (
        "oasr.diarization.nemotron3",
        "transformers' nemotron3_diarization directory (config.json model_type nemotron3_diarization + safetensors)",
    ),
    "pyannote": (
        "oasr.diarization.pyannote",
        "a pyannote.audio 4 pipeline directory (config.yaml + its segmentation and embedding checkpoints)",
    ),
    "sortformer": ("oasr.diarization.sortformer", "a NeMo Sortformer archive (.nemo, SortformerEncLabelModel)"),
}
"""name -> (module, the layout it reads), asked in this order."""


class DiarizerNotFoundError(ValueError):
    """No diarization package recognises the path (the message names the layouts known)."""


def register_diarizer(name: str, module: str, layout: str) -> None:
    """Add a diarization package (asked after the built-in ones) by its module path."""
    if name in PACKAGES:
        raise ValueError(f"a diarization package named {name!r} is already registered ({PACKAGES[name][0]})")
    PACKAGES[name] = (module, layout)


def _import(module: str) -> ModuleType | None:
    """The package, or None when it is not part of this install (another import error propagates)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and (module == e.name or module.startswith(e.name + ".")):
            return None
        raise


def detect_diarizer(path: str | os.PathLike) -> str | None:
    """The name of the first package whose ``detect`` accepts ``path``, or None."""
    for name, (module, _layout) in PACKAGES.items():
        package = _import(module)
        if package is not None and package.detect(Path(path)):
            return name
    return None


def load_diarizer(path: str | os.PathLike, *, device: str = "cpu", dtype: str | None = None) -> Diarizer:
    """Load the diarization model at ``path`` with the package that reads its layout.

    Args:
        path: a model directory or file (``.nemo`` archive).
        device: torch device the model runs on.
        dtype: compute dtype (None: the package's choice for the device).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        DiarizerNotFoundError: no package reads it (naming the layouts known).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"diarization model {str(path)!r} does not exist")
    name = detect_diarizer(path)
    if name is None:
        known = "; ".join(
            f"{n}: {layout}" + ("" if _import(module) is not None else " (not in this install)")
            for n, (module, layout) in PACKAGES.items()
        )
        raise DiarizerNotFoundError(f"{str(path)!r} is not a diarization model oasr reads; known layouts: {known}")
    package = _import(PACKAGES[name][0])
    assert package is not None
    return package.load(path, device=device, dtype=dtype)


__all__ = ["PACKAGES", "DiarizerNotFoundError", "detect_diarizer", "load_diarizer", "register_diarizer"]
