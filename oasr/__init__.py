"""oasr: an open speech-recognition inference engine on PyTorch."""

from __future__ import annotations

import importlib.metadata
import os

from oasr.lazy import lazy_exports

# OpenMP worker threads wait for the next parallel region by spinning, 300,000 rounds by libgomp's
# default, which keeps their cores busy between regions; where other processes want those cores too,
# oasr then slows several-fold. A spin of 10,000 rounds keeps the quiet-machine speed and gives up the
# cores under contention (whisper-base, jfk.wav, greedy, 2 threads on 2 cores: quiet 1.52 s default,
# 1.51 s at 10,000, 1.8-1.9 s never spinning; beside 4 busy processes 9.6-19.9 s default, 5.9-6.4 s at
# 10,000, 5.2 s never spinning). It takes effect when oasr is imported before torch (the CLI and the
# server always are); a value the user set (or OMP_WAIT_POLICY) is kept.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")

try:  # the installed distribution's version (pyproject's `oasr-engine`; not published on PyPI)
    __version__ = importlib.metadata.version("oasr-engine")
except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0.1.0"

__all__ = [
    "ASREngine",
    "EngineConfig",
    "__version__",
    "from_pretrained",
    "list_models",
    "load_diarizer",
    "load_pretrained",
]

# Imported on first use: torch, the models and the engine (audio decoding) load only when asked for,
# so `oasr --help` and `oasr models` start without torch.
_EXPORTS: dict[str, str] = {
    "from_pretrained": "oasr.models",
    "list_models": "oasr.models",
    "load_pretrained": "oasr.models",
    "ASREngine": "oasr.engine",
    "EngineConfig": "oasr.engine",
    "load_diarizer": "oasr.diarization.loader",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
