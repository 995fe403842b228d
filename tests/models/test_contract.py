"""The model contract, checked against every registered architecture built tiny on CPU."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import oasr.layers
from oasr.models import list_models
from oasr.models.base import BaseAsrModel, BaseEncoder, DecodeType, StreamingNotSupported
from oasr.models.interfaces import (
    CAPABILITIES,
    CapabilityError,
    missing_members,
    require_capability,
    validate_capabilities,
)
from oasr.models.registry import get_model_info
from tests.models.tiny_configs import TINY_CONFIGS

ARCHS = list_models()


def _build(name: str) -> BaseAsrModel:
    if name not in TINY_CONFIGS:
        pytest.fail(f"architecture {name!r} has no tiny config in tests/models/tiny_configs.py")
    cls = get_model_info(name).model_class()
    torch.manual_seed(0)
    return cls.from_config(TINY_CONFIGS[name]()).eval()


def test_every_architecture_has_a_tiny_config():
    assert ARCHS, "no architecture registered"
    assert sorted(set(ARCHS) - set(TINY_CONFIGS)) == []


def test_capability_table_covers_every_decode_type():
    assert set(CAPABILITIES) == set(DecodeType)
    for cap in CAPABILITIES.values():
        assert cap.requires and cap.why


@pytest.mark.parametrize("name", ARCHS)
def test_advertised_capabilities_are_served(name):
    model = _build(name)
    assert model.architecture == name
    validate_capabilities(model)  # every advertised capability has its members
    for dt in DecodeType:
        if dt not in model.capabilities:
            with pytest.raises(CapabilityError, match="does not serve"):
                require_capability(model, dt)


@pytest.mark.parametrize("name", ARCHS)
def test_streaming_declarations_are_consistent(name):
    model = _build(name)
    enc = model.encoder
    assert isinstance(enc, BaseEncoder)
    assert enc.streaming_kind in ("paged", "slot", "stateful", "none")
    assert isinstance(enc.subsampling_rate, int) and enc.subsampling_rate >= 1
    assert enc.right_context >= 0
    if enc.streaming_kind == "none":
        assert model.cache_spec is None
        with pytest.raises(StreamingNotSupported, match="streaming_kind='none'"):
            enc.streaming_geometry(8)
        with pytest.raises(StreamingNotSupported):
            model.forward_chunk_paged(torch.zeros(1, 8, 80), torch.tensor([8]), None)
        with pytest.raises(StreamingNotSupported):
            enc.get_streaming_init_states(1)
        with pytest.raises(StreamingNotSupported):
            enc.streaming_forward(torch.zeros(1, 8, 80), torch.tensor([8]), [])
        for member in ("n_kv_head", "num_attention_layers"):
            with pytest.raises(StreamingNotSupported, match="paged-streaming"):
                getattr(enc, member)
    else:
        assert model.cache_spec is not None


@pytest.mark.parametrize("name", ARCHS)
def test_compute_dtype_follows_the_weights(name):
    model = _build(name)
    assert model.compute_dtype == torch.float32
    model.to(torch.bfloat16)
    assert model.compute_dtype == torch.bfloat16


_BARE = (nn.Linear, nn.LayerNorm, nn.Embedding, nn.Conv1d, nn.Conv2d, nn.LSTM, nn.GRU, nn.RMSNorm)


@pytest.mark.parametrize("name", ARCHS)
def test_built_from_the_layer_waist(name):
    """Every module that owns parameters is an oasr.layers block (or a family container
    whose own parameters are declared by it), never a bare torch layer."""
    model = _build(name)
    waist = {obj for _, obj in inspect.getmembers(oasr.layers, inspect.isclass)}
    offenders = []
    for mod_name, module in model.named_modules():
        if isinstance(module, _BARE) and type(module) not in waist:
            offenders.append(f"{mod_name}: {type(module).__name__}")
        own = list(module.named_parameters(recurse=False))
        if own and type(module) not in waist and not any(isinstance(module, w) for w in waist):
            offenders.append(f"{mod_name}: {type(module).__name__} owns {[n for n, _ in own]}")
    assert offenders == []


def test_missing_members_are_named():
    class Half(BaseAsrModel):
        architecture = "half"
        capabilities = frozenset({DecodeType.CTC, DecodeType.AED})
        default_decode_type = DecodeType.CTC

        def __init__(self):
            super().__init__(None)
            self.encoder = BaseEncoder()
            self.blank_id = 0

    model = Half()
    # forward_offline is still the base refusal, subsampling_rate raises, there is no decoder.
    assert "forward_offline" in missing_members(model, DecodeType.CTC)
    with pytest.raises(CapabilityError, match=r"lacks \['forward_offline'"):
        require_capability(model, "ctc")
    with pytest.raises(CapabilityError, match="decoder.prefill"):
        require_capability(model, DecodeType.AED)
    with pytest.raises(CapabilityError, match="unknown decode type"):
        require_capability(model, "telepathy")
