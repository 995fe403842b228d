"""Acoustic front ends by ``FeatureSpec.kind``: a waveform in, (frames, features) out.

Each family's front end lives with the family (or in ``oasr.audio`` when several
share it) and is named here lazily, so a checkpoint's ``FeatureSpec`` picks its
front end without importing every family.

No front end hands an encoder NaN or infinite features: the features of every
``Frontend`` subclass (its ``__call__`` and ``compute_batch``, in-tree or a plugin's) pass
:func:`check_features`, which refuses them as bad audio (``AudioDecodeError``, HTTP 400
``invalid_audio``) before any decode work is spent. The sample bound of ``oasr.audio.io``
catches most such audio earlier; this catches what it cannot (a front end that overflows
below it, or a waveform handed to a front end directly).
"""

from __future__ import annotations

import abc
import functools
import importlib
from collections.abc import Callable, Sequence

import numpy as np
import torch

from oasr.audio.io import AudioDecodeError
from oasr.specs import FeatureSpec

_FRONTENDS: dict[str, str] = {
    "kaldi_fbank": "oasr.audio.fbank:KaldiFbank",
    "granite_speech5_mel": "oasr.models.granite_speech5.features:GraniteSpeech5Frontend",
    "funasr_fbank_lfr": "oasr.models.paraformer.frontend:ParaformerFrontend",
    "granite_mel": "oasr.models.granite_speech.features:GraniteSpeechFrontend",
    "lasr_mel": "oasr.models.lasr.features:LasrFrontend",
    "moonshine_waveform": "oasr.models.moonshine_streaming.features:MoonshineWaveformFrontend",
    "parakeet_mel": "oasr.models.parakeet.features:ParakeetFrontend",
    "wav2vec2_waveform": "oasr.models.wav2vec2.features:Wav2Vec2Frontend",
    "whisper_mel": "oasr.audio.whisper_frontend:WhisperMelFrontend",
    "voxtral_realtime_mel": "oasr.models.voxtral_realtime.frontend:VoxtralRealtimeMelFrontend",
}


def check_features(feats: torch.Tensor, what: str) -> torch.Tensor:
    """``feats``, refused when any value is NaN or infinite.

    Args:
        feats: a front end's features, any shape.
        what: the front end, for the message.

    Raises:
        AudioDecodeError: the audio gives non-finite features.
    """
    # One reduction instead of a mask of the whole tensor: a float64 sum of values in float32's
    # range cannot overflow, so it is finite exactly when every value is.
    if feats.numel() and not torch.isfinite(feats.sum(dtype=torch.float64)):
        raise AudioDecodeError(
            f"the audio gives non-finite (NaN / inf) features in the {what} front end (samples far outside [-1, 1]?)"
        )
    return feats


def _checked(method: Callable) -> Callable:
    """``method`` whose features (a tensor, or the first of a tuple) pass ``check_features``."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        check_features(out[0] if isinstance(out, tuple) else out, type(self).__name__)
        return out

    wrapper.checks_features = True
    return wrapper


class Frontend(abc.ABC):
    """Waveform -> features for one checkpoint.

    A subclass's ``__call__`` and ``compute_batch`` are wrapped when the class is made so
    that their features pass :func:`check_features` (see the module notes).

    Attributes a subclass sets:
        sampling_rate: input rate in Hz.
        frame_shift_s: seconds between consecutive feature frames.
        n_features: features per frame.
    """

    sampling_rate: int = 16000
    frame_shift_s: float = 0.01
    n_features: int = 80
    # Which samples each frame reads (``oasr.audio.streaming.Framing``), for a front end whose
    # frames depend on a fixed span of samples: what lets it run on a live stream. None: the
    # frames depend on the whole utterance (a global normalisation), so it cannot stream.
    framing = None

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("__call__", "compute_batch"):
            method = cls.__dict__.get(name)
            if callable(method) and not getattr(method, "checks_features", False):
                setattr(cls, name, _checked(method))

    def num_frames(self, n_samples: int) -> int:
        """Frames the front end gives ``n_samples`` samples (streaming front ends)."""
        raise NotImplementedError(f"{type(self).__name__} does not stream (no framing)")

    @classmethod
    @abc.abstractmethod
    def from_spec(cls, spec: FeatureSpec) -> Frontend:
        """Build from a checkpoint's ``FeatureSpec`` (unknown or bad params raise ``ValueError``)."""

    @abc.abstractmethod
    def __call__(self, waveform: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Features of one utterance, on the waveform's device (a tensor on a GPU gives
        features computed there).

        Shapes:
            waveform: (samples,) float32 mono at ``sampling_rate`` -> (T, n_features) float32
        """

    def compute_batch(self, waveforms: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero-padded features of several utterances.

        Shapes:
            -> feats (B, T_max, n_features), lens (B,) int64
        """
        return pad_features([self(w) for w in waveforms])


def pad_features(feats: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack (T_i, F) tensors into a zero-padded (B, T_max, F) batch with their lengths."""
    if not feats:
        raise ValueError("pad_features needs at least one utterance")
    lens = torch.tensor([f.shape[0] for f in feats], dtype=torch.long)
    out = feats[0].new_zeros(len(feats), int(lens.max()), feats[0].shape[1])
    for i, f in enumerate(feats):
        out[i, : f.shape[0]] = f
    return out, lens


def register_frontend(kind: str, ref: str) -> None:
    """Name the front end (``"module:Class"``) of a feature kind (for out-of-tree families)."""
    _FRONTENDS[kind] = ref


def build_frontend(spec: FeatureSpec) -> Frontend:
    """The front end ``spec`` declares.

    Raises:
        ValueError: an unknown ``spec.kind`` (naming the known ones) or bad params.
    """
    ref = _FRONTENDS.get(spec.kind)
    if ref is None:
        raise ValueError(f"unknown feature kind {spec.kind!r}; known kinds: {sorted(_FRONTENDS)}")
    module, _, name = ref.partition(":")
    cls = getattr(importlib.import_module(module), name)
    return cls.from_spec(spec)


__all__ = ["Frontend", "build_frontend", "check_features", "pad_features", "register_frontend"]
