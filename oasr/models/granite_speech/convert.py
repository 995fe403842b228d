"""Granite Speech checkpoint converter: a transformers ``granite_speech`` directory as released
(``config.json``, safetensors, ``adapter_config.json`` + ``adapter_model.safetensors`` (the
LoRA, PEFT's layout), tokenizer, chat template, processor config, generation config).

Tensor names -> ``oasr.models.granite_speech.model``'s:

* saved (what transformers writes, and the releases): ``encoder.*`` / ``projector.*`` ->
  ``encoder.{encoder,projector}.*``; ``language_model.model.*`` -> ``decoder.*``;
  ``language_model.lm_head.*`` / ``lm_head.*`` -> ``decoder.lm_head.*``;
* in memory (transformers 5.x ``state_dict()``): ``model.encoder.*``, ``model.projector.*``,
  ``model.language_model.*``, ``lm_head.*``;
* ``projector.query`` (1, Q, D) -> ``encoder.projector.query.weight`` (Q, D);
* the adapter's ``base_model.model.<either layout>.X.lora_{A,B}.weight`` are merged into
  ``X.weight``: ``W + (lora_alpha / r) B A`` (PEFT's merge of a plain LoRA).

Merging is exact for what oasr serves: transformers enables the adapter whenever audio is
given (``generate`` with ``input_features``) and runs the base LM only for text-only prompts,
which oasr never builds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from oasr.models.base import FeatureSpec, LoadError, TokenizerSpec
from oasr.models.formats.hf import (
    bpe_tokenizer_path,
    drop_tied_lm_head,
    feature_extractor_config,
    llm_decoding_spec,
    load_hf_weights,
    read_json,
    read_json_if_present,
    rename_prefixed,
    token_ids,
)
from oasr.models.formats.hf import model_type as hf_model_type
from oasr.models.granite_speech.config import (
    AUDIO_TOKEN,
    GraniteSpeechConfig,
    GraniteSpeechEncoderConfig,
    QFormerConfig,
    granite_text_config,
)
from oasr.models.registry import CheckpointBundle

ARCH = "granite_speech"
ADAPTER_PREFIX = "base_model.model."

_PREFIXES: tuple[tuple[str, str], ...] = (
    ("model.language_model.", "decoder."),
    ("model.encoder.", "encoder.encoder."),
    ("model.projector.", "encoder.projector."),
    ("language_model.model.", "decoder."),
    ("language_model.lm_head.", "decoder.lm_head."),
    ("encoder.", "encoder.encoder."),
    ("projector.", "encoder.projector."),
    ("lm_head.", "decoder.lm_head."),
)
# PEFT LoraConfig fields and the values a plain merge implements (others: any value).
_LORA_FIXED: dict[str, tuple[Any, ...]] = {
    "peft_type": ("LORA",),
    "bias": ("none",),
    "use_rslora": (False, None),
    "use_dora": (False, None),
    "fan_in_fan_out": (False, None),
    "rank_pattern": ({}, None),
    "alpha_pattern": ({}, None),
    "modules_to_save": (None, []),
    "layer_replication": (None,),
    "lora_bias": (False, None),
    "target_parameters": (None, []),
    "alora_invocation_tokens": (None,),
    "use_qalora": (False, None),
}
_LORA_A = re.compile(r"^(.*)\.lora_A(?:\.[^.]+)?\.weight$")


def merge_adapter(state: dict[str, torch.Tensor], path: Path) -> int:
    """Merge the directory's LoRA adapter (if any) into ``state`` (model names), in place.

    Returns:
        the number of merged projections.

    Raises:
        LoadError: an adapter kind or option a plain merge does not implement, or a pair whose
            base weight is missing.
    """
    cfg_file = path / "adapter_config.json"
    if not cfg_file.is_file():
        return 0
    cfg = read_json(cfg_file)
    for key, allowed in _LORA_FIXED.items():
        if key in cfg and cfg[key] not in allowed:
            raise LoadError(f"{cfg_file}: {key}={cfg[key]!r} is not implemented by oasr (a plain LoRA merge)")
    r, alpha = int(cfg.get("r", 8)), float(cfg.get("lora_alpha", 8))
    weights = path / "adapter_model.safetensors"
    if not weights.is_file():
        raise LoadError(f"{path}: adapter_config.json without adapter_model.safetensors")
    from safetensors.torch import load_file

    lora = {}
    for name, tensor in load_file(str(weights), device="cpu").items():
        name = name[len(ADAPTER_PREFIX) :] if name.startswith(ADAPTER_PREFIX) else name
        lora[rename_prefixed(name, _PREFIXES)] = tensor
    n = 0
    for key in [k for k in lora if _LORA_A.match(k)]:
        module = _LORA_A.match(key).group(1)
        a = lora.pop(key)
        b_key = next((k for k in lora if k.startswith(f"{module}.lora_B") and k.endswith(".weight")), None)
        base = state.get(f"{module}.weight")
        if b_key is None or base is None:
            raise LoadError(f"{weights}: LoRA on {module} lacks its lora_B or the base model's weight")
        b = lora.pop(b_key)
        if a.shape[0] != r or b.shape[1] != r or (b.shape[0], a.shape[1]) != tuple(base.shape):
            raise LoadError(f"{weights}: LoRA on {module} has shapes {tuple(a.shape)} / {tuple(b.shape)} (r={r})")
        wide = torch.promote_types(base.dtype, torch.float32)
        state[f"{module}.weight"] = (base.to(wide) + (alpha / r) * (b.to(wide) @ a.to(wide))).to(base.dtype)
        n += 1
    if lora:
        raise LoadError(f"{weights}: adapter tensors oasr does not merge: {sorted(lora)[:4]}")
    return n


def _chat_template(path: Path) -> str:
    """The checkpoint's chat template (``chat_template.jinja``, else a config's entry)."""
    if (path / "chat_template.jinja").is_file():
        return (path / "chat_template.jinja").read_text(encoding="utf-8")
    for name in ("chat_template.json", "processor_config.json", "tokenizer_config.json"):
        value = read_json_if_present(path / name).get("chat_template")
        if isinstance(value, str) and value:
            return value
    raise LoadError(f"{path}: no chat template (chat_template.jinja or a config's chat_template)")


def _feature_spec(path: Path, config: GraniteSpeechConfig) -> FeatureSpec:
    """GraniteSpeechFeatureExtractor's settings (``preprocessor_config.json`` or the processor's
    ``audio_processor`` entry)."""
    pre, _ = feature_extractor_config(path)
    if not pre:
        pre = read_json_if_present(path / "processor_config.json").get("audio_processor") or {}
    kind = pre.get("feature_extractor_type", "GraniteSpeechFeatureExtractor")
    if kind != "GraniteSpeechFeatureExtractor":
        raise LoadError(f"{path}: feature extractor {kind!r} is not Granite Speech's")
    mel = pre.get("melspec_kwargs") or {}
    params = {
        "n_mels": int(mel.get("n_mels", pre.get("n_mels", 80))),
        "n_fft": int(mel.get("n_fft", pre.get("n_fft", 512))),
        "win_length": int(mel.get("win_length", pre.get("win_length", 400))),
        "hop_length": int(mel.get("hop_length", pre.get("hop_length", 160))),
    }
    if 2 * params["n_mels"] != config.encoder.input_dim:
        raise LoadError(
            f"{path}: 2 x {params['n_mels']} mel bins != the encoder's input_dim={config.encoder.input_dim}"
        )
    window = int(pre.get("projector_window_size", config.window_size))
    rate = int(pre.get("projector_downsample_rate", config.downsample_rate))
    if (window, rate) != (config.window_size, config.downsample_rate):
        raise LoadError(f"{path}: the extractor's projector window {window}/{rate} differs from config.json's")
    return FeatureSpec(kind="granite_mel", sampling_rate=int(pre.get("sampling_rate", 16000)), params=params)


class HFGraniteSpeechConverter:
    """A transformers ``GraniteSpeechForConditionalGeneration`` directory."""

    architecture = ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = ()
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        return path.is_dir() and hf_model_type(path) == "granite_speech"

    def load(self, path: Path) -> CheckpointBundle:
        from oasr.tokenizers import load_tokenizer

        path = Path(path)
        hf = read_json(path / "config.json")
        text_hf = dict(hf.get("text_config") or {})
        tpath = bpe_tokenizer_path(path, "Granite Speech")
        tok = load_tokenizer(TokenizerSpec(kind="huggingface", path=str(tpath)))
        audio_id = int(hf.get("audio_token_index", hf.get("audio_token_id", 49155)))
        if tok.token_to_id(AUDIO_TOKEN) != audio_id:
            raise LoadError(
                f"{path}: config audio_token_index={audio_id} but the tokenizer's {AUDIO_TOKEN} is "
                f"{tok.token_to_id(AUDIO_TOKEN)}"
            )
        gen = read_json_if_present(path / "generation_config.json")
        eos = token_ids(gen.get("eos_token_id")) or token_ids(text_hf.get("eos_token_id"))
        text_hf.setdefault("tie_word_embeddings", hf.get("tie_word_embeddings", True))
        try:
            config = GraniteSpeechConfig(
                encoder=GraniteSpeechEncoderConfig.from_hf(hf.get("encoder_config") or {}),
                projector=QFormerConfig.from_hf(hf.get("projector_config") or {}),
                text=granite_text_config(text_hf),
                window_size=int(hf.get("window_size", 15)),
                downsample_rate=int(hf.get("downsample_rate", 5)),
                audio_token_id=audio_id,
                eos_token_ids=tuple(dict.fromkeys(eos)),
                chat_template=_chat_template(path),
                tokenizer_path=str(tpath),
            )
        except ValueError as e:
            raise LoadError(f"{path}: {e}") from e
        state = {rename_prefixed(k, _PREFIXES): v for k, v in load_hf_weights(path).items()}
        query = state.pop("encoder.projector.query", None)
        if query is not None:  # the (1, Q, D) parameter is the model's (Q, D) query table
            state["encoder.projector.query.weight"] = query.reshape(query.shape[-2:])
        if config.text.tie_word_embeddings:
            drop_tied_lm_head(state, path, "decoder.lm_head.weight", "decoder.embed_tokens.weight")
        merged = merge_adapter(state, path)
        if hf.get("has_lora_adapter") and not merged:
            raise LoadError(f"{path}: config.json has has_lora_adapter=true but no adapter is here")
        special = tuple(sorted({audio_id, *config.eos_token_ids, *tok.special_ids}))
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=TokenizerSpec(kind="huggingface", path=str(tpath), special_ids=special),
            features=_feature_spec(path, config),
            decoding=llm_decoding_spec(gen),
            source=str(path),
            format="huggingface",
            metadata={"lora_merged": merged},
        )
