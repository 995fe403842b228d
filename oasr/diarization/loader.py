"""``load_diarizer(path)``: whichever diarization model package reads ``path``.

Each model lives in a package ``oasr.diarization.<name>`` exposing ``detect(path) -> bool`` and
``load(path, *, device, dtype) -> Diarizer``; ``PACKAGES`` names them in the order they are
asked, imported only when a path is matched. (The ``i-speakers`` branch writes the full loader
with the same functions; this one holds the packages of this branch.)
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from oasr.diarization.types import Diarizer

PACKAGES: dict[str, tuple[str, str]] = {
    "nemotron3": (
        "oasr.diarization.nemotron3",
        "transformers' nemotron3_diarization directory (config.json model_type nemotron3_diarization + safetensors)",
    ),
}
"""name -> (module, the layout it reads), asked in this order."""


class DiarizerNotFoundError(ValueError):
    """No diarization package recognises the path (the message names the layouts known)."""


def detect_diarizer(path: str | os.PathLike) -> str | None:
    """The name of the first package whose ``detect`` accepts ``path``, or None."""
    for name, (module, _layout) in PACKAGES.items():
        if importlib.import_module(module).detect(Path(path)):
            return name
    return None


def load_diarizer(path: str | os.PathLike, *, device: str = "cpu", dtype: str | None = None) -> Diarizer:
    """Load the diarization model at ``path`` with the package that reads its layout.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        DiarizerNotFoundError: no package reads it (naming the layouts known).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"diarization model {str(path)!r} does not exist")
    name = detect_diarizer(path)
    if name is None:
        known = "; ".join(f"{n}: {layout}" for n, (_m, layout) in PACKAGES.items())
        raise DiarizerNotFoundError(f"{path} is not a diarization model this oasr reads ({known})")
    return importlib.import_module(PACKAGES[name][0]).load(path, device=device, dtype=dtype)
