"""NeMo's local attention for long audio (``self_attention_model: rel_pos_local_attn``), held to
NeMo itself: a rel_pos checkpoint switched by ``EngineConfig.attention_model`` /
``att_context_size`` as NeMo's ``change_attention_model`` switches it, and a ``.nemo`` whose config
carries it, on a multi-minute input (encoder output in float64, greedy tokens, the engine's text
against NeMo's ``transcribe()``); and the banded attention's memory, which grows linearly with the
input where full attention's grows with its square. NeMo tests skip where ``nemo-toolkit`` is absent.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import oasr
from oasr.models.base import LoadError
from oasr.models.loaders import load_pretrained
from oasr.models.parakeet import ParakeetConfig, ParakeetEncoderConfig
from oasr.models.parakeet.model import ParakeetCtcModel
from tests.models.parakeet.conftest import ctc_collapse, parity

CONTEXT = [128, 128]
MINUTES = 2.0


def _nemo():
    return pytest.importorskip(
        "nemo.collections.asr", reason="nemo-toolkit is not installed (the reference of the local-attention tests)"
    )


@pytest.fixture(scope="module")
def local_ctc(tmp_path_factory):
    """(rel_pos .nemo, the same model saved after change_attention_model, NeMo's model switched to
    local attention, in float64 with exact float64 filters)."""
    _nemo()
    from tests.models.parakeet import nemo_reference
    from tests.models.parakeet.test_nemo_archive import _exact_filters

    root = tmp_path_factory.mktemp("nemo_local")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path, ref = nemo_reference.build("ctc", root)
        ref.change_attention_model("rel_pos_local_attn", CONTEXT)
        local_path = root / "ctc_local.nemo"
        ref.save_to(str(local_path))
    return path, local_path, _exact_filters(ref.double().eval().requires_grad_(False))


@pytest.fixture(scope="module")
def long_wave(waveforms) -> np.ndarray:
    """A few minutes of speech: the test clips in a random order at random gains, with pauses."""
    g = np.random.default_rng(7)
    n = int(MINUTES * 60 * 16000)
    pieces, total = [], 0
    while total < n:
        clip = waveforms[int(g.integers(len(waveforms)))] * g.uniform(0.3, 1.5)
        pause = np.zeros(int(g.integers(1600, 16000)), dtype=np.float32)
        pieces += [clip, pause]
        total += len(clip) + len(pause)
    return np.concatenate(pieces)[:n].astype(np.float32)


@torch.no_grad()
def test_switched_and_saved_local_attention_equal_nemos_on_minutes_of_audio(local_ctc, long_wave):
    from tests.models.parakeet.test_nemo_archive import _nemo_features

    path, local_path, ref = local_ctc
    feats, n = _nemo_features(ref, long_wave)
    want_enc, want_len = ref.encoder(audio_signal=feats.transpose(1, 2), length=n)
    assert int(want_len[0]) >= MINUTES * 60 * 12.5  # 80-ms frames, far past the 256-frame band
    log_probs = ref.decoder(encoder_output=want_enc)
    hyp = ref.decoding.ctc_decoder_predictions_tensor(log_probs, decoder_lengths=want_len, return_hypotheses=True)[0]
    want_tokens = ctc_collapse([int(t) for t in hyp.y_sequence], ref.tokenizer.vocab_size)
    assert len(want_tokens) > 50, "the comparison is vacuous without labels"

    switched = load_pretrained(path).model.double()
    switched.encoder.set_attention("rel_pos_local_attn", tuple(CONTEXT))
    saved = load_pretrained(local_path)
    assert saved.model.encoder.config.attention_model == "rel_pos_local_attn"
    assert saved.model.encoder.config.att_context_size == tuple(CONTEXT)
    for model in (switched, saved.model.double()):
        enc, enc_len = model.encode_offline(feats, n)
        assert int(enc_len[0]) == int(want_len[0])
        cos, err = parity(enc, want_enc.transpose(1, 2))
        assert cos > 1 - 1e-12 and err < 1e-6, (cos, err)
        best = model.ctc_log_probs(enc).argmax(dim=-1)[0]
        assert ctc_collapse(best[: int(enc_len[0])], model.blank_id) == want_tokens


def test_engine_option_decodes_minutes_in_one_pass_as_nemo_transcribe(local_ctc, long_wave):
    path, _, ref = local_ctc
    engine = oasr.ASREngine(
        str(path),
        dtype="float32",
        attention_model="rel_pos_local_attn",
        att_context_size=tuple(CONTEXT),
        ctc_window_s=MINUTES * 60 + 1,
    )
    out = engine.transcribe(long_wave)
    with torch.no_grad():
        (hyp,) = ref.float().transcribe([long_wave], batch_size=1, verbose=False)
    ref.double()
    want = ctc_collapse([int(t) for t in hyp.y_sequence], engine.model.blank_id)
    assert [t for seg in out.segments for t in seg.tokens] == want
    assert out.text.strip() == hyp.text.strip()


def test_a_local_attention_without_context_is_refused(local_ctc, tmp_path):
    path, _, _ = local_ctc
    with pytest.raises(ValueError, match=r"rel_pos_local_attn.*att_context_size"):
        oasr.ASREngine(str(path), attention_model="rel_pos_local_attn")
    with pytest.raises(ValueError, match="att_context_size"):
        oasr.ASREngine(str(path), attention_model="rel_pos_local_attn", att_context_size=(-1, 128))

    from tests.models.parakeet.test_nemo_archive import _repack

    def edit(cfg):
        cfg["encoder"]["global_tokens"] = 1

    with pytest.raises(LoadError, match=r"encoder\.global_tokens=1"):
        load_pretrained(_repack(path, tmp_path / "global.nemo", edit))


# -- memory: no NeMo needed --------------------------------------------------------------------


class LargestAllocation(TorchDispatchMode):
    """Records the largest tensor any operation returns (bytes) while active."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and not t._is_view():
                self.largest = max(self.largest, t.numel() * t.element_size())
        return out


def _largest_allocation(model: ParakeetCtcModel, frames: int) -> int:
    feats = torch.randn(1, frames, model.encoder.config.num_mel_bins)
    with torch.no_grad(), LargestAllocation() as mode:
        model.encode_offline(feats, torch.tensor([frames]))
    return mode.largest


def test_local_attention_memory_grows_linearly_with_length():
    """The largest tensor the encoder allocates, at 1x, 2x and 4x the length: linear with local
    attention (the (T, Q + left + right) scores), quadratic with full attention."""
    enc = ParakeetEncoderConfig(
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        subsampling_conv_channels=4,
        num_mel_bins=16,
    )
    model = ParakeetCtcModel(ParakeetConfig(encoder=enc, vocab_size=8)).eval()
    lengths = (4 * 1024, 8 * 1024, 16 * 1024)  # 512 ... 2048 encoder frames
    full = [_largest_allocation(model, n) for n in lengths]
    model.encoder.set_attention("rel_pos_local_attn", (128, 128))
    local = [_largest_allocation(model, n) for n in lengths]
    assert full[2] / full[0] > 12, full  # (T, T) scores: 16x for 4x the audio
    assert local[2] / local[0] < 4.5 and local[1] / local[0] < 2.3, local
    assert local[2] < full[2] / 3, (local, full)


@pytest.mark.parametrize("command", ["transcribe", "stream", "serve"])
def test_the_attention_flags_reach_the_engine_config(command):
    from oasr.cli.common import engine_extras
    from oasr.cli.main import build_parser

    inputs = [] if command == "serve" else ["x.wav"]
    flags = ["--attention-model", "rel_pos_local_attn", "--att-context-size", "128,64", "--window-seconds", "3600"]
    args = build_parser().parse_args([command, *inputs, *flags])
    assert engine_extras(args) == {
        "attention_model": "rel_pos_local_attn",
        "att_context_size": (128, 64),
        "ctc_window_s": 3600.0,
    }
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, *inputs, "--att-context-size", "128"])
