"""A toy out-of-tree family and decode strategy, registered only through oasr's entry points.

The "toy" architecture reads a directory with ``toy.json`` (``{"threshold": ...}``) and
``scale.npy``-free weights (one scalar tensor saved in ``toy.pt``); its decode type
"toy_energy" writes one word per whole second of audio: ``loud`` when the second's RMS times
the model's ``scale`` exceeds the threshold, else ``quiet``. Nothing under ``oasr/engine/``
knows about either: the test installs them as a distribution's entry points.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from oasr.audio import load_audio
from oasr.engine.decode.base import DecodeStrategy, Request, StepEvent
from oasr.engine.outputs import RequestOutput, Segment
from oasr.models.base import BaseAsrModel, FeatureSpec
from oasr.models.configs import ModelConfig

DECODE_TYPE = "toy_energy"


@dataclass
class ToyConfig(ModelConfig):
    threshold: float = 0.02


class ToyModel(BaseAsrModel):
    architecture = "toy"
    capabilities = frozenset({DECODE_TYPE})
    default_decode_type = DECODE_TYPE

    def __init__(self, config: ToyConfig) -> None:
        super().__init__(config)
        self.scale = nn.Parameter(torch.ones(()))


class ToyConverter:
    architecture = "toy"
    expected_unused_prefixes: tuple[str, ...] = ()
    capability_drop_hints: dict[str, str] = {}
    auto_detect = True

    def can_load(self, path: Path) -> bool:
        return (Path(path) / "toy.json").is_file()

    def load(self, path: Path):
        from oasr.models.registry import CheckpointBundle

        path = Path(path)
        config = ToyConfig(**json.loads((path / "toy.json").read_text()))
        state = torch.load(path / "toy.pt", weights_only=True)
        return CheckpointBundle(
            architecture="toy",
            config=config,
            state_dict=state,
            features=FeatureSpec(kind="waveform", sampling_rate=16000),
            source=str(path),
            format="toy",
        )


class ToyEnergyStrategy(DecodeStrategy):
    """One word per whole second: its RMS (times the model's scale) against the threshold."""

    decode_type = DECODE_TYPE

    def __init__(self, loaded, config) -> None:
        super().__init__(loaded, config)
        self.pending: dict[str, Request] = {}

    def prepare(self, request: Request) -> Request:
        if request.features is None:
            request.features = load_audio(request.source, 16000, max_duration_s=self.config.max_audio_s)
            request.duration = len(request.features) / 16000
        return request

    def add_request(self, request: Request) -> None:
        if request.request_id in self.pending:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        self.pending[request.request_id] = self.prepare(request)

    def step(self) -> list[StepEvent]:
        events = []
        scale, threshold = float(self.model.scale), self.model.config.threshold
        for rid, request in list(self.pending.items()):
            audio = np.asarray(request.features)
            words = []
            for s in range(len(audio) // 16000):
                rms = float(np.sqrt(np.mean(np.square(audio[s * 16000 : (s + 1) * 16000], dtype=np.float64))))
                words.append("loud" if rms * scale > threshold else "quiet")
            text = " ".join(words)
            seg = Segment(id=1, seek=0, start=0.0, end=float(len(words)), text=text, tokens=[])
            out = RequestOutput(request_id=rid, text=text, segments=[seg] if text else [], duration=request.duration)
            events.append(StepEvent(rid, "segment", segment=seg))
            events.append(StepEvent(rid, "finished", output=out))
            del self.pending[rid]
        return events

    def abort(self, request_id: str) -> bool:
        return self.pending.pop(request_id, None) is not None

    def num_unfinished(self) -> int:
        return len(self.pending)


def register_models() -> None:
    """The ``oasr.models`` entry point: the architecture, and what its decode type needs of a
    model (the model layer checks that when it loads a checkpoint)."""
    from oasr.models.interfaces import register_capability
    from oasr.models.registry import register_model

    register_capability(DECODE_TYPE, ("scale",), "the toy strategy scales each second's RMS by the model's scale")
    register_model("toy", ToyModel, (ToyConverter,), overwrite=True)


def register_strategies() -> None:
    """The ``oasr.decode_strategies`` entry point."""
    from oasr.engine.decode.registry import register_decode_strategy

    register_decode_strategy(DECODE_TYPE, ToyEnergyStrategy, overwrite=True)
