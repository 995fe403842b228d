"""The transformers ``voxtral_realtime`` release (``mistralai/Voxtral-Mini-4B-Realtime-2602``:
config.json, model*.safetensors, tekken.json, generation_config.json, processor_config.json)
read into ``oasr.models.voxtral_realtime.model``'s names:

* ``audio_tower.*`` -> ``encoder.*``; ``multi_modal_projector.*`` kept;
* ``language_model.model.*`` -> ``decoder.*`` (the in-memory ``model.``-prefixed names too);
  a saved ``lm_head`` is dropped when it is the tied embedding;
* each LM layer's ``ada_rms_norm.linear{1,2}`` is folded away: the delay conditioning
  ``1 + ada(t(n_delay))`` is a constant per layer for the checkpoint's delay, so it multiplies
  ``post_attention_layernorm.weight`` (computed in float64) and the LM is a plain Mistral LM.

The tokenizer is ``tekken.json`` (its audio section gives the delay, the left padding and the
token rate); the feature extractor's settings come from ``preprocessor_config.json`` or the
``feature_extractor`` entry of ``processor_config.json``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

import torch

from oasr.models.base import FeatureSpec, LoadError, TokenizerSpec
from oasr.models.formats.hf import (
    feature_extractor_config,
    llm_decoding_spec,
    read_json,
    read_json_if_present,
    rename_prefixed,
    renamed_llm_state,
)
from oasr.models.registry import CheckpointBundle
from oasr.models.voxtral_realtime.frontend import LOG_MEL_MAX
from oasr.models.voxtral_realtime.model import VoxtralRealtimeConfig, time_embedding

ARCH = "voxtral_realtime"

_PREFIXES = (
    ("model.audio_tower.", "encoder."),
    ("audio_tower.", "encoder."),
    ("model.multi_modal_projector.", "multi_modal_projector."),
    ("model.language_model.", "decoder."),
    ("language_model.model.", "decoder."),
    ("language_model.lm_head.", "decoder.lm_head."),
    ("lm_head.", "decoder.lm_head."),
)
# The causal convolutions hold their ``nn.Conv1d`` one level down.
_CONVS = (
    ("encoder.embedder.conv1.", "encoder.embedder.conv1.conv."),
    ("encoder.embedder.conv2.", "encoder.embedder.conv2.conv."),
)
_ADA = re.compile(r"decoder\.layers\.(\d+)\.ada_rms_norm\.linear([12])\.weight")


def fold_delay(state: dict[str, torch.Tensor], n_layers: int, hidden: int, n_delay: int) -> None:
    """Scale each LM layer's post-attention norm by ``1 + ada(t(n_delay))`` and drop the ada weights (in place).

    Raises:
        LoadError: a layer's ada weights missing.
    """
    ada: dict[tuple[int, int], torch.Tensor] = {}
    for name in [n for n in state if _ADA.fullmatch(n)]:
        m = _ADA.fullmatch(name)
        ada[int(m.group(1)), int(m.group(2))] = state.pop(name)
    t = time_embedding(n_delay, hidden)  # (D,) float64
    for li in range(n_layers):
        if (li, 1) not in ada or (li, 2) not in ada:
            raise LoadError(f"LM layer {li} has no ada_rms_norm weights (the delay conditioning)")
        w1, w2 = ada[li, 1].to(torch.float64), ada[li, 2].to(torch.float64)
        scale = 1 + w2 @ torch.nn.functional.gelu(w1 @ t)
        key = f"decoder.layers.{li}.post_attention_layernorm.weight"
        state[key] = state[key].to(torch.float64) * scale


def _feature_spec(directory: Path, config: VoxtralRealtimeConfig) -> FeatureSpec:
    pre, _ = feature_extractor_config(directory)
    s = config.stream
    if pre.get("feature_extractor_type", "VoxtralRealtimeFeatureExtractor") != "VoxtralRealtimeFeatureExtractor":
        raise LoadError(f"{directory}: feature extractor {pre.get('feature_extractor_type')!r} is not supported")
    checks = {
        "feature_size": config.audio.num_mel_bins,
        "hop_length": s.hop_length,
        "win_length": s.window_size,
        "sampling_rate": s.sampling_rate,
        "global_log_mel_max": LOG_MEL_MAX,
    }
    for key, want in checks.items():
        if pre.get(key) is not None and pre[key] != want:
            raise LoadError(f"{directory}: the feature extractor's {key}={pre[key]} (this family reads {want})")
    if int(pre.get("n_fft", s.window_size)) != s.window_size:
        raise LoadError(f"{directory}: n_fft={pre['n_fft']} differs from the window ({s.window_size})")
    return FeatureSpec(
        kind="voxtral_realtime_mel",
        sampling_rate=s.sampling_rate,
        params=s.frontend_params(config.audio.num_mel_bins),
    )


class HFVoxtralRealtimeConverter:
    """A transformers ``VoxtralRealtimeForConditionalGeneration`` directory with its ``tekken.json``."""

    architecture = ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = ()
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        cfg = path / "config.json"
        if not (path.is_dir() and cfg.is_file()):
            return False
        try:
            return json.loads(cfg.read_text(encoding="utf-8")).get("model_type") == ARCH
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            return False

    def load(self, path: Path) -> CheckpointBundle:
        tekken_path = path / "tekken.json"
        if not tekken_path.is_file():
            raise LoadError(f"{path}: no tekken.json (Voxtral Realtime's tokenizer and audio settings)")
        tekken = read_json(tekken_path)
        try:
            config = VoxtralRealtimeConfig.from_hf(read_json(path / "config.json"), tekken, str(tekken_path))
        except (KeyError, ValueError) as e:
            raise LoadError(f"{path}: {e}") from e
        state = {
            rename_prefixed(k, _CONVS): v
            for k, v in renamed_llm_state(path, _PREFIXES, config.text.tie_word_embeddings).items()
        }
        fold_delay(state, config.text.num_hidden_layers, config.text.hidden_size, config.stream.n_delay_tokens)
        special = tuple(int(t["rank"]) for t in tekken.get("special_tokens") or ())
        gen = read_json_if_present(path / "generation_config.json")
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=TokenizerSpec(kind="tekken", path=str(tekken_path), special_ids=special),
            features=_feature_spec(path, config),
            decoding=llm_decoding_spec(gen),
            source=str(path),
            format="huggingface",
        )
