"""HFNemotronConverter: what it reads from a Hugging Face directory, and what it refuses."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import oasr
from oasr.models.base import LoadError
from oasr.models.nemotron.convert import HFNemotronConverter
from oasr.models.registry import detect_architecture
from tests.models.nemotron.conftest import NUM_PROMPTS, PROMPTS


@pytest.fixture()
def copy(nemotron_reference, tmp_path):
    path = tmp_path / "ckpt"
    shutil.copytree(nemotron_reference.path, path)
    return path


def test_detected_with_the_prompt_table_folded(nemotron_reference):
    name, converter = detect_architecture(nemotron_reference.path)
    assert name == "nemotron" and isinstance(converter, HFNemotronConverter)
    bundle = converter.load(nemotron_reference.path)
    assert bundle.config.prompt_dictionary == PROMPTS
    assert bundle.config.encoder.attention_chunk == 4 and bundle.config.encoder.left_chunks == 3
    ref = nemotron_reference.model.prompt_projector.linear_1
    d = nemotron_reference.model.config.encoder_config.hidden_size
    table = bundle.state_dict["prompt_projector.prompt_table.weight"]
    assert table.shape == (NUM_PROMPTS, ref.out_features)
    torch.testing.assert_close(table.double(), (ref.weight[:, d:].T + ref.bias).detach(), rtol=0, atol=1e-6)
    assert "predictor.lstm.weight_hh_l1" in bundle.state_dict and "joiner.head.weight" in bundle.state_dict
    assert not any(k.startswith(("decoder.", "joint.", "encoder_projector.")) for k in bundle.state_dict)
    assert "languages" not in bundle.decoding.params  # the model's prompt table names them
    assert set(oasr.load_pretrained(nemotron_reference.path).languages) == set(PROMPTS) - {"auto"}


def test_without_processor_config_only_the_default_prompt_serves(copy):
    (copy / "processor_config.json").unlink()
    loaded = oasr.load_pretrained(copy)
    assert loaded.model.resolve_prompt_id(None) == loaded.model.config.default_prompt_id
    with pytest.raises(ValueError, match="this checkpoint has no language control"):
        loaded.model.resolve_prompt_id("en")


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda c: c.update(hidden_act="gelu"), "joint hidden_act='gelu'"),
        (lambda c: c.update(num_prompts=NUM_PROMPTS + 1), r"prompt_projector.linear_1 must be"),
        (lambda c: c.update(default_prompt_id=NUM_PROMPTS), "default_prompt_id"),
        (lambda c: c["encoder_config"].update(subsampling_conv_stride=4), "subsampling_conv_stride"),
    ],
)
def test_bad_configs_are_refused_by_name(copy, edit, match):
    cfg = json.loads((copy / "config.json").read_text())
    edit(cfg)
    (copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(LoadError, match=match):
        HFNemotronConverter().load(copy)


def test_reduced_precision_mel_filters_are_refused(copy):
    proc = json.loads((copy / "processor_config.json").read_text())
    proc["feature_extractor"]["mel_filters_dtype"] = "bfloat16"
    (copy / "processor_config.json").write_text(json.dumps(proc))
    with pytest.raises(LoadError, match="mel_filters_dtype='bfloat16'"):
        HFNemotronConverter().load(copy)


def test_other_directories_are_not_claimed(tmp_path):
    assert not HFNemotronConverter().can_load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "parakeet_ctc"}))
    assert not HFNemotronConverter().can_load(tmp_path)


def test_table_languages_are_its_codes_and_locales():
    from oasr.models.nemotron.model import table_languages

    table = {"en-US": 0, "en": 0, "enGB": 1, "es-ES": 2, "esES": 2, "zh-ZH": 4, "auto": 101, "yue-HK": 9}
    assert table_languages(table) == ("en-US", "en", "es-ES", "zh-ZH", "yue-HK")
