"""The front-end table (``oasr.audio.frontends``) names the families' front ends by lazy
``"module:Class"`` strings: importing it, or building a shared front end, imports no family.
Every front end's features are finite or the audio is refused (``check_features``)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from oasr.audio.frontends import build_frontend
from oasr.specs import FeatureSpec


def test_the_table_imports_a_family_only_when_its_front_end_is_built():
    code = (
        "import sys\n"
        "from oasr.audio.frontends import build_frontend\n"
        "from oasr.specs import FeatureSpec\n"
        "build_frontend(FeatureSpec('whisper_mel', 16000, {'n_mels': 80}))\n"
        "assert not [m for m in sys.modules if m.startswith('oasr.models')], sorted(sys.modules)\n"
        "build_frontend(FeatureSpec('lasr_mel', 16000, {}))\n"
        "assert 'oasr.models.lasr.features' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_an_unknown_kind_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown feature kind 'nope'.*whisper_mel"):
        build_frontend(FeatureSpec("nope", 16000, {}))


# ---------------------------------------------------------------------------
# No front end hands an encoder NaN / inf features


def _zipformer_fbank() -> dict:
    from oasr.models.zipformer.convert import FBANK_PARAMS

    return dict(FBANK_PARAMS)


# Every family's front end, as its converter declares it.
FRONT_ENDS = {
    "whisper": lambda: FeatureSpec("whisper_mel", 16000, {"n_mels": 80}),
    "qwen3_asr": lambda: FeatureSpec("whisper_mel", 16000, {"n_mels": 128, "min_length": 8000}),
    "qwen2_audio": lambda: FeatureSpec("whisper_mel", 16000, {"n_mels": 128, "pad_to_chunk": True}),
    "wenet": lambda: FeatureSpec("kaldi_fbank", 16000, {"num_mel_bins": 80}),
    "icefall": lambda: FeatureSpec("kaldi_fbank", 16000, _zipformer_fbank()),
    "paraformer": lambda: FeatureSpec("funasr_fbank_lfr", 16000, {}),
    "lasr": lambda: FeatureSpec("lasr_mel", 16000, {}),
    "parakeet": lambda: FeatureSpec("parakeet_mel", 16000, {}),
    "nemotron": lambda: FeatureSpec("parakeet_mel", 16000, {"normalize": False}),
}
F32_MAX = float(np.finfo(np.float32).max)


def _speech() -> np.ndarray:
    from oasr.audio import load_audio
    from tests.conftest import AUDIO_DIR

    return load_audio(AUDIO_DIR / "jfk.wav")[:16000]


def _spiked(value: float) -> np.ndarray:
    x = _speech().copy()
    x[8000] = value
    return x


# Waveforms handed to a front end directly (the audio decoder refuses the first six first).
HUGE = {
    "constant_1e19": lambda: np.full(16000, 1e19, np.float32),
    "constant_1e30": lambda: np.full(16000, 1e30, np.float32),
    "constant_float32_max": lambda: np.full(16000, F32_MAX, np.float32),
    "noise_at_1e19": lambda: (np.random.default_rng(0).standard_normal(16000) * 1e19).astype(np.float32),
    "speech_with_one_1e19_sample": lambda: _spiked(1e19),
    "speech_with_one_float32_max_sample": lambda: _spiked(-F32_MAX),
}
ODD = {
    "all_zero": lambda: np.zeros(16000, np.float32),
    "denormals": lambda: np.full(16000, 1e-40, np.float32),
    "dc_offset": lambda: np.full(16000, 0.5, np.float32),
    "speech_on_a_dc_offset": lambda: _speech() + np.float32(0.4),
}


@pytest.mark.parametrize("wave", list(HUGE) + list(ODD))
@pytest.mark.parametrize("front_end", list(FRONT_ENDS))
def test_every_front_end_gives_finite_features_or_refuses_the_audio(front_end, wave):
    """Samples of 1e19-3.4e38 overflow the float32 spectra of every front end but LASR's into
    NaN / inf features (before the fix, 42 of these 54 huge cases): such features are refused as
    bad audio, never handed on. Silence, denormals and a DC offset give finite features and are
    not refused."""
    from oasr.audio import AudioDecodeError

    frontend = build_frontend(FRONT_ENDS[front_end]())
    x = {**HUGE, **ODD}[wave]()
    for compute in (lambda: frontend(torch.from_numpy(x)), lambda: frontend.compute_batch([x])[0]):
        try:
            feats = compute()
        except AudioDecodeError as e:
            assert wave in HUGE, f"{front_end} refused {wave}: {e}"
            assert "non-finite (NaN / inf) features" in str(e)
            continue
        assert torch.isfinite(feats).all(), f"{front_end} gave non-finite features for {wave}"


def test_the_whisper_long_form_features_are_checked():
    """Whisper's long-form matrix (the AED strategy's features, computed apart from
    ``WhisperMelFrontend.__call__``) is checked too, in memory and streamed."""
    from oasr.audio import AudioDecodeError
    from oasr.audio.stream import InMemoryMel, _compute

    x = np.full(16000, 1e30, np.float32)
    with pytest.raises(AudioDecodeError, match="non-finite"):
        InMemoryMel.from_waveform(x, 80)
    with pytest.raises(AudioDecodeError, match="non-finite"):
        _compute([x[:8000], x[8000:]], 80, 16000, None, memory_frames=0)


def test_a_plugin_front_end_is_checked_too():
    """The check is the ``Frontend`` contract's, not each front end's: a subclass that returns NaN
    (a plugin registered with ``register_frontend``) is refused the same way."""
    from oasr.audio import AudioDecodeError
    from oasr.audio.frontends import Frontend

    class Broken(Frontend):
        @classmethod
        def from_spec(cls, spec):
            return cls()

        def __call__(self, waveform):
            return torch.full((3, self.n_features), float("nan"))

    with pytest.raises(AudioDecodeError, match="non-finite .* in the Broken front end"):
        Broken()(np.zeros(480, np.float32))
    with pytest.raises(AudioDecodeError, match="non-finite"):
        Broken().compute_batch([np.zeros(480, np.float32)])


@pytest.mark.parametrize("front_end", ["wenet", "icefall", "nemotron"])
def test_a_live_stream_of_huge_samples_is_refused(front_end):
    """``FeatureStream`` (the live streams' features) computes through the checked front end."""
    from oasr.audio import AudioDecodeError
    from oasr.audio.streaming import FeatureStream

    stream = FeatureStream(build_frontend(FRONT_ENDS[front_end]()))
    assert torch.isfinite(stream.push(_speech()[:8000])).all()
    with pytest.raises(AudioDecodeError, match="non-finite"):
        stream.push(np.full(8000, 1e30, np.float32))
