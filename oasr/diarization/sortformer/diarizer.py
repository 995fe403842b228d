"""The Sortformer diarizer: a ``.nemo`` archive of NeMo's ``SortformerEncLabelModel`` (or its
unpacked directory) loaded as an ``oasr.diarization.Diarizer``.

``load(path)`` reads the archive (``models/formats/nemo.read_nemo``), maps its config
(``config.py``) and its tensors onto ``SortformerModel`` (strict: a tensor the model lacks or
leaves unfilled is an error, except NeMo's saved mel filterbank and window, which oasr computes,
and ``sortformer_modules.hidden_to_spks``, which NeMo's forward never uses).

``diarize`` runs what NeMo's ``diarize()`` runs: for an offline archive, each waveform scaled by
``1 / (max + eps)`` (NeMo scales by the whole batch's maximum; oasr by each row's, which is what
NeMo gives a row alone), the mel front end, the offline forward; for a streaming archive
(``streaming_mode: true``), the unscaled waveform and the streaming forward (``streaming.py``);
then the post-processing (``postprocess.py``) per speaker slot. Slots are named ``SPEAKER_00``...
in order of their first turn; ``num_speakers`` / ``max_speakers`` keep the slots that speak
longest.

``stream(mode)`` / ``open_stream(**settings)`` (streaming archives) return a live
``SortformerStream`` (``stream.py``): audio in, speaker-turn events out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oasr.diarization.sortformer.config import TARGET, SortformerConfig, StreamingParams, config_from_nemo
from oasr.diarization.sortformer.model import SortformerModel
from oasr.diarization.sortformer.postprocess import PostProcessing, speech_segments
from oasr.diarization.sortformer.streaming import streaming_forward
from oasr.diarization.types import Diarization, SpeakerConstraints, SpeakerTurn, most_active_slots, speaker_label
from oasr.models.base import FULL_PRECISION, FeatureSpec, LoadError, parse_dtype
from oasr.models.formats.nemo import (
    NEMO_COMPUTED_PREFIXES,
    NEMO_ENCODER_RENAMES,
    is_nemo_checkpoint,
    nemo_target,
    read_nemo,
    rename,
)
from oasr.models.parakeet.features import ParakeetFrontend

# The live streams' settings by name (``SortformerDiarizer.stream(mode)``): the archive's own, and
# those of NeMo's voice-agent streaming diarizer (``nemo.agents.voice_agent``'s ``DiarizationConfig``:
# 0.48 s chunks with 0.56 s of look-ahead, a 188-frame FIFO and speaker cache).
STREAMING_MODES: dict[str, dict[str, int]] = {
    "archive": {},
    "voice_agent": {
        "chunk_len": 6,
        "chunk_left_context": 1,
        "chunk_right_context": 7,
        "fifo_len": 188,
        "spkcache_len": 188,
    },
}

# Checkpoint tensors the model does not hold: the mel filterbank / window (computed) and the
# two-layer head NeMo builds but never runs (``hidden_to_spks``).
UNUSED_PREFIXES = (*NEMO_COMPUTED_PREFIXES, "sortformer_modules.hidden_to_spks.")


def detect(path: str | PathLike) -> bool:
    """Whether ``path`` is a ``.nemo`` archive (or unpacked directory) of a Sortformer diarizer."""
    path = Path(path)
    return is_nemo_checkpoint(path) and nemo_target(path) == TARGET


def load(
    path: str | PathLike,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | str | None = None,
    streaming: Mapping[str, Any] | None = None,
    postprocessing: PostProcessing | Mapping[str, Any] | str | PathLike | None = None,
) -> SortformerDiarizer:
    """Load a Sortformer ``.nemo`` archive.

    Args:
        device: where the model runs.
        dtype: float32 (default) or float64 (reference checks).
        streaming: changes to the archive's streaming settings (``StreamingParams`` names:
            ``chunk_len``, ``chunk_right_context``, ``fifo_len``, ``spkcache_update_period``,
            ``spkcache_len``, ...), as NeMo's model cards set them for each latency.
        postprocessing: NeMo's post-processing parameters (a ``PostProcessing``, a mapping of
            them, or a NeMo post-processing YAML); None: NeMo's defaults.

    Raises:
        LoadError: not a Sortformer archive, a config oasr does not implement, or tensors that
            do not fit the model (naming them).
        ValueError: a dtype other than float32 / float64, or a bad streaming / post-processing value.
    """
    path = Path(path)
    ckpt = read_nemo(path)
    config, features = config_from_nemo(ckpt.config, str(path))
    if streaming:
        params = config.streaming.replace(**dict(streaming))
        params.check(config.num_speakers)
        config = SortformerConfig(**{**vars(config), "streaming": params})
    dtype = parse_dtype(dtype) or torch.float32
    if dtype not in FULL_PRECISION:
        raise ValueError(f"Sortformer runs in {[str(d) for d in FULL_PRECISION]}, not {dtype}")
    model = SortformerModel(config)
    state = rename(
        {k: v for k, v in ckpt.state_dict.items() if not k.startswith(UNUSED_PREFIXES)}, NEMO_ENCODER_RENAMES
    )
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(k for k in set(state) - set(own) if not k.endswith("num_batches_tracked"))
    if missing or unexpected:
        raise LoadError(f"{path}: tensors missing from the checkpoint {missing}, not in the model {unexpected}")
    for name, tensor in state.items():
        if name in own and own[name].shape != tensor.shape:
            raise LoadError(f"{path}: {name} is {tuple(tensor.shape)} in the checkpoint, {tuple(own[name].shape)} here")
    model.load_state_dict({k: v for k, v in state.items() if k in own})
    model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)
    if postprocessing is None:
        post = PostProcessing()
    elif isinstance(postprocessing, PostProcessing):
        post = postprocessing
    elif isinstance(postprocessing, Mapping):
        post = PostProcessing.from_mapping(postprocessing)
    else:
        post = PostProcessing.from_yaml(postprocessing)
    return SortformerDiarizer(model, features, post, dtype=dtype, source=str(path))


class SortformerDiarizer:
    """A loaded Sortformer: ``oasr.diarization.Diarizer`` over NeMo's ``SortformerEncLabelModel``.

    Attributes:
        sampling_rate: 16 kHz (the archive's).
        max_speakers: the output slots (4 for the releases).
        frame_s: seconds per output frame (80 ms for the releases).
    """

    def __init__(
        self,
        model: SortformerModel,
        features: FeatureSpec,
        postprocessing: PostProcessing,
        dtype: torch.dtype = torch.float32,
        source: str = "",
    ) -> None:
        self.model = model
        self.feature_spec = features
        self.frontend = ParakeetFrontend.from_spec(features, dtype=dtype)
        self.postprocessing = postprocessing
        self.source = source
        self.config = model.config
        self.sampling_rate = self.frontend.sampling_rate
        self.max_speakers: int | None = model.config.num_speakers
        self.frame_s = self.frontend.frame_shift_s * model.subsampling_factor

    @property
    def streaming(self) -> StreamingParams | None:
        """The streaming settings of a streaming archive (None: an offline one)."""
        return self.config.streaming if self.config.streaming_mode else None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return self.frontend.dtype

    def _rows(self, audios: Sequence[np.ndarray]) -> list[torch.Tensor]:
        if isinstance(audios, np.ndarray) and audios.ndim == 1:
            raise TypeError("diarize takes a sequence of waveforms (a batch); wrap one waveform in a list")
        rows = []
        for i, audio in enumerate(audios):
            x = torch.as_tensor(np.asarray(audio)).to(self.dtype)
            if x.ndim != 1:
                raise ValueError(f"waveform {i}: expected 1-D mono samples, got shape {tuple(x.shape)}")
            if x.numel() == 0:
                raise ValueError(f"waveform {i} is empty")
            if not bool(torch.isfinite(x).all()):
                raise ValueError(f"waveform {i} holds NaN or infinite samples")
            if not self.config.streaming_mode:  # NeMo's process_signal, per row
                x = (1 / (x.max() + self.config.eps)) * x
            rows.append(x)
        return rows

    @torch.no_grad()
    def speaker_probabilities(self, audios: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Each recording's speaker probabilities, (frames, max_speakers), one frame per ``frame_s``,
        slots in order of arrival (NeMo's ``forward`` for the archive's mode)."""
        rows = self._rows(audios)
        if not rows:
            return []
        feats, lens = self.frontend.compute_batch(rows)
        feats, lens = feats.to(self.device), lens.to(self.device)
        if self.config.streaming_mode:
            probs, n = streaming_forward(self.model, self.config.streaming, feats, lens)
        else:
            probs, n = self.model(feats, lens)
        return [probs[i, : int(n[i])].double().cpu().numpy() for i in range(len(rows))]

    def segments(self, probs: np.ndarray) -> list[list[tuple[float, float]]]:
        """NeMo's post-processed segments of each slot (``diarize()``'s lines, per slot)."""
        unit = self.model.subsampling_factor
        return [speech_segments(probs[:, s], unit, self.postprocessing) for s in range(probs.shape[1])]

    def diarize(
        self,
        audios: Sequence[np.ndarray],
        *,
        num_speakers: int | None = None,
        min_speakers: int | None = None,
        max_speakers: int | None = None,
    ) -> list[Diarization]:
        """Who spoke when in each recording (16 kHz mono float32 waveforms)."""
        keep = SpeakerConstraints(num_speakers, min_speakers, max_speakers).kept(self.config.num_speakers)
        out = []
        for audio, probs in zip(audios, self.speaker_probabilities(audios)):
            out.append(self.to_diarization(self.segments(probs), len(audio) / self.sampling_rate, keep))
        return out

    @staticmethod
    def to_diarization(
        segments: Sequence[Sequence[tuple[float, float]]], duration: float, keep: int | None = None
    ) -> Diarization:
        """Turns of each slot's segments, slots named by first turn; with ``keep``, only the
        ``keep`` slots that speak longest (ties: the earlier slot)."""
        slots = [s for s in range(len(segments)) if segments[s]]
        kept = most_active_slots({s: sum(e - b for b, e in segments[s]) for s in slots}, keep)
        if kept is not None:
            slots = [s for s in slots if s in kept]
        order = sorted(slots, key=lambda s: (segments[s][0][0], s))
        names = {s: speaker_label(i) for i, s in enumerate(order)}
        turns = [SpeakerTurn(b, e, names[s]) for s in slots for b, e in segments[s]]
        return Diarization(turns, duration, [names[s] for s in order])

    @property
    def stream(self):
        """``stream(mode=None) -> SortformerStream`` for a streaming archive (``mode``: a name of
        ``STREAMING_MODES``; None: the archive's settings); None for an offline archive, which the
        live surfaces read as "does not stream"."""
        return self._stream if self.config.streaming_mode else None

    def _stream(self, mode: str | None = None):
        if mode is not None and mode not in STREAMING_MODES:
            raise ValueError(f"unknown streaming mode {mode!r}; a Sortformer has {sorted(STREAMING_MODES)}")
        return self.open_stream(**STREAMING_MODES.get(mode or "archive", {}))

    def open_stream(self, **streaming: Any):
        """A live stream (``stream.SortformerStream``) of a streaming archive; ``streaming``
        changes its settings (``StreamingParams`` names) for this stream only.

        Raises:
            ValueError: an offline archive, or a bad setting.
        """
        from oasr.diarization.sortformer.stream import SortformerStream

        if not self.config.streaming_mode:
            raise ValueError(
                f"{self.source or 'this Sortformer'} is an offline archive (streaming_mode is off); "
                "diarize it offline, or load a streaming Sortformer"
            )
        params = self.config.streaming.replace(**streaming) if streaming else self.config.streaming
        params.check(self.config.num_speakers)
        return SortformerStream(self, params)
