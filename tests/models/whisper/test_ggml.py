"""oasr's whisper.cpp (ggml) writer: q8_0 blocks, the file read back by a reader written here
from whisper.cpp's loader, refusals, and whisper.cpp itself (pywhispercpp, CrispASR) running
the files oasr writes from tiny.en, against oasr's own greedy decode."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from oasr.metrics import normalize_text
from oasr.models.bundled import bundled_path
from oasr.models.whisper import ggml
from tests.conftest import AUDIO_DIR

needs_tiny_en = pytest.mark.skipif(
    bundled_path("whisper-tiny.en") is None, reason="whisper-tiny.en is not installed (oasr's whisper-tiny-en extra)"
)
JFK = AUDIO_DIR / "jfk.wav"
TYPE_SIZE = {0: 4, 1: 2}  # ggml_type -> bytes per value (f32, f16); q8_0 (8) is 34 bytes per 32


def read_ggml(path) -> dict:
    """Header, mel filters, vocabulary and ``{name: (ggml type, shape, raw bytes)}`` of a ggml file."""
    data = memoryview(open(path, "rb").read())
    pos = 0

    def ints(n: int) -> tuple[int, ...]:
        nonlocal pos
        out = struct.unpack_from(f"<{n}i", data, pos)
        pos += 4 * n
        return out

    magic, *hparams = ints(12)
    n_mels, n_bins = ints(2)
    filters = np.frombuffer(data[pos : pos + 4 * n_mels * n_bins], dtype="<f4").reshape(n_mels, n_bins)
    pos += filters.nbytes
    words = []
    for _ in range(ints(1)[0]):
        (n,) = ints(1)
        words.append(bytes(data[pos : pos + n]))
        pos += n
    tensors = {}
    while pos < len(data):
        n_dims, n_name, ttype = ints(3)
        shape = tuple(reversed(ints(n_dims)))
        name = bytes(data[pos : pos + n_name]).decode()
        pos += n_name
        count = int(np.prod(shape))
        size = count // 32 * 34 if ttype == 8 else count * TYPE_SIZE[ttype]
        tensors[name] = (ttype, shape, bytes(data[pos : pos + size]))
        pos += size
    return {"magic": magic, "hparams": hparams, "filters": filters, "words": words, "tensors": tensors}


def test_q8_0_blocks_are_a_half_scale_and_32_rounded_int8():
    x = np.concatenate([np.arange(32, dtype=np.float32) - 16.0, np.zeros(32, np.float32)])
    raw = ggml.quantize_q8_0(x)
    assert len(raw) == 2 * 34
    d = np.frombuffer(raw[:2], dtype="<f2")[0]
    assert d == np.float16(16.0 / 127)
    q = np.frombuffer(raw[2:34], dtype=np.int8)
    assert q[0] == -127 and q[16] == 0 and q[31] == round(15 * 127 / 16)
    assert raw[34:] == bytes(34)  # an all-zero block: scale 0, values 0
    # round half away from zero, as C's roundf (numpy's round is half to even)
    half = np.array([127.0, 0.5, -0.5, 1.5, 2.5] + [0.0] * 27, dtype=np.float32)  # scale 1
    assert np.frombuffer(ggml.quantize_q8_0(half)[2:7], dtype=np.int8).tolist() == [127, 1, -1, 2, 3]
    w = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    back = ggml.dequantize_q8_0(ggml.quantize_q8_0(w), w.shape)
    scale = np.abs(w.reshape(-1, 32)).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(back - w).reshape(-1, 32) <= 0.51 * scale + 1e-3 * scale)


def test_names_are_openai_whispers():
    assert ggml.ggml_name("decoder.layers.3.encoder_attn.k_proj.weight") == "decoder.blocks.3.cross_attn.key.weight"
    assert ggml.ggml_name("encoder.layers.0.fc2.bias") == "encoder.blocks.0.mlp.2.bias"
    assert ggml.ggml_name("encoder.layer_norm.weight") == "encoder.ln_post.weight"
    assert ggml.ggml_name("decoder.embed_positions.weight") == "decoder.positional_embedding"


def test_a_checkpoint_whisper_cpp_cannot_hold_is_refused(hf_dir, tmp_path):
    # the tiny reference has MLPs of 2 x its width; whisper.cpp builds them at 4 x
    with pytest.raises(ValueError, match="MLP widths"):
        ggml.write_ggml(hf_dir, tmp_path / "x.bin", "f16")
    assert not list(tmp_path.iterdir())  # no half-written file
    with pytest.raises(ValueError, match="--type"):
        ggml.write_ggml(hf_dir, tmp_path / "x.bin", "q4_0")


# ---------------------------------------------------------------------------
# tiny.en: the file read back, and whisper.cpp running it


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory) -> dict:
    if bundled_path("whisper-tiny.en") is None:
        pytest.skip("whisper-tiny.en is not installed")
    out = tmp_path_factory.mktemp("ggml")
    return {t: ggml.write_ggml("whisper-tiny.en", out / f"ggml-tiny.en-{t}.bin", t) for t in ggml.FILE_TYPES}


@pytest.fixture(scope="module")
def oasr_text() -> str:
    import oasr

    engine = oasr.ASREngine("whisper-tiny.en", device="cpu", num_threads=1)
    return engine.transcribe(str(JFK), beam_size=1, temperature=0.0, language="en", without_timestamps=True).text


@pytest.mark.real_weights
@needs_tiny_en
def test_the_file_holds_every_tensor_at_whisper_cpps_type(tiny_files):
    from oasr.models.loaders import resolve_model_path
    from oasr.models.registry import load_checkpoint_bundle

    bundle, _ = load_checkpoint_bundle(resolve_model_path("whisper-tiny.en"))
    state = {ggml.ggml_name(k): v.float().numpy() for k, v in bundle.state_dict.items()}
    try:
        import whisper

        openai_filters = np.load(Path(whisper.__file__).parent / "assets" / "mel_filters.npz")["mel_80"]
    except ImportError:
        openai_filters = None
    for file_type, ftype in (("f32", 0), ("f16", 1), ("q8_0", 2007)):
        f = read_ggml(tiny_files[file_type])
        assert f["magic"] == 0x67676D6C
        assert f["hparams"] == [51864, 1500, 384, 6, 4, 448, 384, 6, 4, 80, ftype]
        assert f["filters"].shape == (80, 201)
        if openai_filters is not None:  # the bank whisper.cpp's own converter copies from openai-whisper
            np.testing.assert_allclose(f["filters"], openai_filters, atol=1e-7)
        assert len(f["words"]) == 50256 and f["words"][1212] == b"This" and f["words"][220] == b" "
        assert set(f["tensors"]) == set(state)
        for name, (ttype, shape, raw) in f["tensors"].items():
            want = state[name]
            if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
                assert shape == (want.shape[0], 1)
                want = want.reshape(shape)
            assert shape == want.shape, name
            if ttype == 8:
                got = ggml.dequantize_q8_0(raw, shape)
                assert np.abs(got - want).max() <= np.abs(want).max() / 127, name
            else:
                got = np.frombuffer(raw, dtype="<f4" if ttype == 0 else "<f2").reshape(shape)
                assert np.array_equal(got.astype(np.float32), want), name  # the checkpoint is f16: exact
            if want.ndim == 1 or "positional" in name or name.endswith("conv1.bias") or name.endswith("conv2.bias"):
                assert ttype == 0, name
            elif want.ndim == 3:
                assert ttype == (0 if file_type == "f32" else 1), name
            else:
                assert ttype == {"f32": 0, "f16": 1, "q8_0": 8}[file_type], name


@pytest.mark.real_weights
@pytest.mark.slow
@needs_tiny_en
def test_whisper_cpp_transcribes_oasrs_files_as_oasr_does(tiny_files, oasr_text):
    pytest.importorskip("pywhispercpp")
    import soundfile as sf
    from pywhispercpp.model import Model

    audio, _ = sf.read(str(JFK), dtype="float32")
    options = {"language": "en", "no_timestamps": True, "temperature": 0.0, "temperature_inc": 0.0}
    # f16 and q8_0 (pywhispercpp's whisper.cpp 1.8.5 cannot run f32 convolution kernels on the CPU)
    for file_type in ("f16", "q8_0"):
        model = Model(str(tiny_files[file_type]), redirect_whispercpp_logs_to=None, n_threads=1, **options)
        text = " ".join(s.text.strip() for s in model.transcribe(audio))
        assert normalize_text(text, "en") == normalize_text(oasr_text, "en"), file_type


@pytest.mark.real_weights
@pytest.mark.slow
@needs_tiny_en
def test_crispasr_on_the_f32_file_gives_oasrs_text(tiny_files, oasr_text):
    crispasr = pytest.importorskip("crispasr")
    import soundfile as sf

    audio, _ = sf.read(str(JFK), dtype="float32")
    model = crispasr.CrispASR(str(tiny_files["f32"]))
    try:
        segments = model.transcribe_pcm(audio, language="en", decode_options={"n_threads": 1})
    finally:
        model.close()
    assert "".join(s.text for s in segments).strip() == oasr_text.strip()
