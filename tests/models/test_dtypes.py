"""Compute dtypes and int8 across every family.

* The contract: a model declares its compute dtype (``ComputeDtypeModule.compute_dtype``): set at
  build, followed by casts, kept by int8 quantisation, which leaves no float ``weight`` to read.
* Every registered architecture (tiny configs) runs its encoder (and CTC head) in every dtype and
  quantisation it accepts, close to its float32 run.
* Every family's tiny checkpoint decodes a clip through ``ASREngine`` in every dtype x quantize it
  accepts on CPU, and a dtype it refuses fails at load, naming the family and the dtype.
* ``dtype="auto"`` picks each family's dtype for the device (CUDA resolved at the decision
  function, ``device_supports``, without a GPU).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oasr.layers.quant import Int8Linear, quantize_linears_
from oasr.models import base as contract
from oasr.models.base import BaseAsrModel, check_compute_dtype, select_compute_dtype
from oasr.models.registry import detect_architecture, get_model_info, list_models
from tests.models.tiny_configs import TINY_CONFIGS

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
QUANTIZE = (None, "int8")


def _cls(name: str) -> type[BaseAsrModel]:
    return get_model_info(name).model_class()


def _build(name: str) -> BaseAsrModel:
    torch.manual_seed(0)
    return _cls(name).from_config(TINY_CONFIGS[name]()).eval()


def _accepts(cls: type[BaseAsrModel], dtype: torch.dtype) -> bool:
    try:
        check_compute_dtype(cls, dtype)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------
# The declaration


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_compute_dtype_is_declared_through_casts_and_int8(name):
    model = _build(name)
    assert model.compute_dtype == torch.float32
    model.to(torch.bfloat16)
    assert model.compute_dtype == model.encoder.compute_dtype == torch.bfloat16
    quantize_linears_(model)
    assert model.compute_dtype == torch.bfloat16  # int8 storage does not change the activations
    model.half()
    assert model.compute_dtype == model.encoder.compute_dtype == torch.float16
    model.to("cpu")  # a move keeps it
    assert model.compute_dtype == torch.float16
    model.float()
    assert model.compute_dtype == torch.float32
    # The int8 scales stay float32 through every cast (a half copy would round each channel's step).
    scales = [m.scale.dtype for m in model.modules() if isinstance(m, Int8Linear)]
    assert scales and set(scales) == {torch.float32}


def test_no_code_reads_a_weights_dtype_for_the_compute_dtype():
    """The package asks ``compute_dtype``; a weight's dtype (absent from an int8 layer) never decides it."""
    root = Path(contract.__file__).resolve().parents[1]
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ".weight.dtype" in line or "parameters()).dtype" in line or "buffers()).dtype" in line:
                offenders.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    # Reads of a layer's own storage dtype, which decide no compute dtype: int8 quantisation
    # rounds a checkpoint tensor to the dtype its float layer stores, as a load into it would;
    # the tied output projection picks its CPU float32 kernel when its table is float32.
    storage = ("layers/quant.py:", "layers/embedding.py:")
    assert [o for o in offenders if not o.startswith(storage)] == []


# ---------------------------------------------------------------------------
# Every architecture's forward in every accepted dtype x quantize


def _features(name: str, model: BaseAsrModel) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of one random feature window in the family's input layout, and its length."""
    g = torch.Generator().manual_seed(1)
    cfg = model.config
    if name == "whisper":  # (B, n_mels, frames) of a padded 30-s window
        return torch.randn(1, cfg.n_mels, 2 * cfg.n_audio_ctx, generator=g), torch.tensor([2 * cfg.n_audio_ctx])
    if name == "moonshine":  # (B, samples, 1): one second of the raw waveform
        return 0.1 * torch.randn(1, 16000, 1, generator=g), torch.tensor([16000])
    frames = {"speech_llm": 3000, "voxtral": 3000, "qwen3_asr": 400}.get(name, 240)
    enc_cfg = getattr(model.encoder, "cfg", None) or getattr(model.encoder, "config", None)
    bins = next(
        getattr(c, f)
        for c in (enc_cfg, getattr(cfg, "audio", None), cfg, getattr(cfg, "encoder", None))
        for f in ("input_dim", "num_mel_bins", "input_size", "feature_dim")
        if c is not None and hasattr(c, f)
    )
    return torch.randn(1, frames, bins, generator=g), torch.tensor([frames])


def _outputs(model: BaseAsrModel, feats: torch.Tensor, lens: torch.Tensor) -> list[torch.Tensor]:
    """The encoder's states, and the CTC head's log-probs where the model has one, in float32."""
    with torch.no_grad():
        hidden, _ = model.encode_offline(feats.to(model.compute_dtype), lens)
        out = [hidden.float()]
        if hasattr(model, "ctc_log_probs"):
            out.append(model.ctc_log_probs(hidden).float())
    return out


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return F.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0).item()


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_every_architecture_runs_every_accepted_dtype_and_int8_close_to_float32(name):
    reference = _build(name)
    feats, lens = _features(name, reference)
    want = _outputs(reference, feats, lens)
    for dtype in DTYPES:
        for quantize in QUANTIZE:
            if not _accepts(type(reference), dtype):
                continue
            model = _build(name).to(dtype)
            if quantize:
                quantize_linears_(model)
            got = _outputs(model, feats, lens)
            for g, w in zip(got, want, strict=True):
                assert torch.isfinite(g).all(), (name, dtype, quantize)
                # Half precision and per-channel int8 each round by < 1 %: the tiny model's outputs
                # stay within a few percent of float32 in angle.
                assert _cos(g, w) > 0.98, (name, dtype, quantize, _cos(g, w))


# ---------------------------------------------------------------------------
# Every family's checkpoint through ASREngine


def _family_checkpoints() -> dict[str, Callable[[Path], tuple[Path, list[str]]]]:
    from tests.surfaces.test_default_decoding import FAMILIES

    def parakeet_tdt(d: Path) -> tuple[Path, list[str]]:
        from tests.models.parakeet.test_transducer import _save

        _save(d, "tdt")
        return d, []

    return {**FAMILIES, "parakeet-tdt": parakeet_tdt}


FAMILY_CHECKPOINTS = _family_checkpoints()
# A random tiny Whisper rarely stops: one greedy pass of a few tokens is enough to exercise every layer.
REQUEST_OPTIONS = {"whisper": {"temperature": 0.0, "max_new_tokens": 8, "language": "en"}}


@pytest.fixture(scope="module")
def clip(audio_dir) -> np.ndarray:
    from oasr.audio import load_audio

    return load_audio(audio_dir / "jfk.wav")[: 3 * 16000]


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILY_CHECKPOINTS))
def test_every_family_decodes_in_every_dtype_and_quantize_it_accepts(family, tmp_path, clip):
    """The whole load -> request path: a combination a family accepts decodes offline (and
    streamed, where the checkpoint streams) with no request failing on a layer's dtype; one it
    refuses fails when the engine is built, naming family and dtype."""
    import oasr

    path, flags = FAMILY_CHECKPOINTS[family](tmp_path / family)
    kwargs = dict(zip([f.lstrip("-").replace("-", "_") for f in flags[::2]], flags[1::2], strict=True))
    cls = _cls(kwargs.get("architecture") or detect_architecture(path)[0])
    tried = 0
    for dtype in DTYPES:
        name = str(dtype).removeprefix("torch.")
        for quantize in QUANTIZE:
            if not _accepts(cls, dtype):
                with pytest.raises(ValueError, match=rf"\({cls.architecture}\) does not run in {name}"):
                    oasr.ASREngine(str(path), device="cpu", dtype=name, quantize=quantize, **kwargs)
                continue
            engine = oasr.ASREngine(str(path), device="cpu", dtype=name, quantize=quantize, **kwargs)
            assert engine.model.compute_dtype == dtype
            if quantize:
                assert any(isinstance(m, Int8Linear) for m in engine.model.modules())
            out = engine.transcribe(clip, **REQUEST_OPTIONS.get(family, {}))
            assert isinstance(out.text, str), (family, dtype, quantize)
            if engine.model.encoder.streaming_kind != "none":
                with engine.open_stream() as stream:
                    stream.feed(clip)
                    events = stream.finish()
                assert [e.type for e in events][-2:] == ["final", "done"], (family, dtype, quantize, events[-1])
            tried += 1
    assert tried >= 4  # float32 and one half dtype at least, each with and without int8


# ---------------------------------------------------------------------------
# dtype="auto" and refusals


@pytest.fixture
def gpu(monkeypatch):
    """A CUDA device as the decision function sees it: bfloat16 when ``gpu.ampere``."""

    class Gpu:
        ampere = True

    state = Gpu()

    def supports(device: torch.device, dtype: torch.dtype) -> bool:
        assert device.type == "cuda"
        return dtype != torch.bfloat16 or state.ampere

    monkeypatch.setattr(contract, "device_supports", supports)
    return state


@pytest.mark.parametrize("name", list_models())
def test_auto_is_float32_on_cpu(name):
    assert select_compute_dtype(_cls(name), None, "cpu") == torch.float32
    assert select_compute_dtype(_cls(name), "auto", None) == torch.float32


def test_auto_on_cuda_is_the_familys_dtype(gpu):
    assert select_compute_dtype(_cls("qwen3_asr"), "auto", "cuda") == torch.bfloat16  # the checkpoint's, not fp16
    assert select_compute_dtype(_cls("qwen3_asr"), None, "cuda:1") == torch.bfloat16
    assert select_compute_dtype(_cls("speech_llm"), None, "cuda") == torch.bfloat16
    assert select_compute_dtype(_cls("whisper"), None, "cuda") == torch.float16
    gpu.ampere = False  # a GPU without native bfloat16 (V100, T4): never float16 for Qwen3-ASR
    assert select_compute_dtype(_cls("qwen3_asr"), None, "cuda") == torch.float32
    assert select_compute_dtype(_cls("speech_llm"), None, "cuda") == torch.float16


@pytest.mark.parametrize("name", list_models())
def test_every_family_declares_safe_dtypes(name, gpu):
    cls = _cls(name)
    assert cls.safe_dtypes and all(d.is_floating_point for d in cls.safe_dtypes)
    assert torch.float32 in cls.safe_dtypes
    assert select_compute_dtype(cls, None, "cuda") == cls.safe_dtypes[0]
    for dtype in (torch.float32, torch.float64, *cls.safe_dtypes):
        check_compute_dtype(cls, dtype)
    if set(DTYPES) - set(cls.safe_dtypes):
        assert cls.unsafe_dtype_reason, f"{name} refuses a dtype without saying why"


def test_an_unsafe_explicit_dtype_is_refused_on_every_device(gpu):
    for device in ("cpu", "cuda"):
        with pytest.raises(ValueError, match=r"Qwen3-ASR \(qwen3_asr\) does not run in float16: .*overflow"):
            select_compute_dtype(_cls("qwen3_asr"), "float16", device)
    assert select_compute_dtype(_cls("qwen3_asr"), "bfloat16", "cpu") == torch.bfloat16
    assert select_compute_dtype(_cls("whisper"), torch.bfloat16, "cuda") == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        select_compute_dtype(_cls("whisper"), "float8", "cpu")


def test_engine_refuses_a_loaded_model_in_an_unsafe_or_other_dtype():
    import oasr
    from oasr.models.loaders import LoadedModel

    model = _build("qwen3_asr").half()
    loaded = LoadedModel(model, None, None, None, None, None, "", "test", "tiny")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Qwen3-ASR .* does not run in float16"):
        oasr.ASREngine(loaded)
    loaded.model = _build("qwen3_asr")
    with pytest.raises(ValueError, match="loaded in torch.float32; load it with"):
        oasr.ASREngine(loaded, dtype="bfloat16")


def test_engine_config_refuses_an_unknown_dtype():
    from oasr.engine.config import EngineConfig

    with pytest.raises(ValueError, match="EngineConfig.dtype='fp8'"):
        EngineConfig(dtype="fp8")
    assert EngineConfig(dtype="auto").dtype == "auto"


# ---------------------------------------------------------------------------
# Qwen3-ASR through every surface: int8 decodes, float16 is refused at load


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    from tests.models.qwen3_asr.conftest import save_checkpoint

    path = tmp_path_factory.mktemp("qwen3_asr_tiny")
    save_checkpoint(path)
    gen = path / "generation_config.json"  # a random LM rarely stops: the checkpoint's own cap
    gen.write_text(json.dumps({**(json.loads(gen.read_text()) if gen.is_file() else {}), "max_new_tokens": 12}))
    return path


@pytest.fixture(scope="module")
def clip_wav(audio_dir) -> Path:
    return audio_dir / "jfk.wav"


def test_qwen3_asr_int8_decodes_in_python_and_the_cli(qwen3_dir, clip, clip_wav, capsys):
    import oasr
    from oasr.cli.main import main

    for dtype in (None, "bfloat16"):
        engine = oasr.ASREngine(str(qwen3_dir), quantize="int8", dtype=dtype)
        assert engine.model.compute_dtype == (torch.bfloat16 if dtype else torch.float32)
        assert isinstance(engine.transcribe(clip).text, str)
    capsys.readouterr()
    assert main(["transcribe", str(clip_wav), "--model", str(qwen3_dir), "--device", "cpu", "--quantize", "int8"]) == 0


@pytest.mark.parametrize("command", ["transcribe", "serve"])
def test_qwen3_asr_float16_is_refused_at_load_by_every_surface(qwen3_dir, clip_wav, command, capsys):
    import oasr
    from oasr.cli.main import main

    with pytest.raises(ValueError, match=r"Qwen3-ASR \(qwen3_asr\) does not run in float16"):
        oasr.ASREngine(str(qwen3_dir), dtype="float16")
    with pytest.raises(ValueError, match=r"Qwen3-ASR \(qwen3_asr\) does not run in float16"):
        oasr.load_pretrained(qwen3_dir, dtype=torch.float16)
    argv = ["--model", str(qwen3_dir), "--device", "cpu", "--dtype", "float16"]
    argv = [command, str(clip_wav), *argv] if command == "transcribe" else [command, *argv]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Qwen3-ASR (qwen3_asr) does not run in float16" in err and "bfloat16 or float32" in err
