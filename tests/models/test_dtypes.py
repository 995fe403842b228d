"""Compute dtypes and int8 across every family.

* The contract: a model declares its compute dtype (``ComputeDtypeModule.compute_dtype``): set at
  build, followed by casts, kept by int8 quantisation, which leaves no float ``weight`` to read.
* Every registered architecture (tiny configs) runs its encoder (and CTC head) in every dtype and
  quantisation, close to its float32 run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from oasr.layers.quant import Int8Linear, quantize_linears_
from oasr.models import base as contract
from oasr.models.base import BaseAsrModel
from oasr.models.registry import get_model_info
from tests.models.tiny_configs import TINY_CONFIGS

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
QUANTIZE = (None, "int8")


def _build(name: str) -> BaseAsrModel:
    torch.manual_seed(0)
    return get_model_info(name).model_class().from_config(TINY_CONFIGS[name]()).eval()


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
    frames = {"speech_llm": 3000, "qwen3_asr": 400}.get(name, 240)
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
            model = _build(name).to(dtype)
            if quantize:
                quantize_linears_(model)
            got = _outputs(model, feats, lens)
            for g, w in zip(got, want, strict=True):
                assert torch.isfinite(g).all(), (name, dtype, quantize)
                # Half precision and per-channel int8 each round by < 1 %: the tiny model's outputs
                # stay within a few percent of float32 in angle.
                assert _cos(g, w) > 0.98, (name, dtype, quantize, _cos(g, w))
