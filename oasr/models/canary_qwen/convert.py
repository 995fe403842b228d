"""The Canary-Qwen checkpoint: a directory NeMo speechlm2's ``SALM.save_pretrained`` writes (the
Hugging Face hub mixin: ``config.json`` is SALM's own config, ``model.safetensors`` its state),
with the LLM's tokenizer beside it and the LLM's ``config.json`` under ``llm_backbone/``, the
layout ``SALM.from_pretrained`` resolves locally; a ``pretrained_llm`` that is a local directory
serves for either.

Tensor names -> ``oasr.models.canary_qwen.model``'s:

* ``perception.encoder.*`` / ``perception.modality_adapter.*`` / ``perception.proj.*`` ->
  ``encoder.{encoder,modality_adapter,proj}.*`` with NeMo's encoder renames (``formats/nemo.py``);
  the adapter's ``pre_encode`` linear -> ``modality_adapter.subsampling.linear``;
* ``embed_tokens.*`` (SALM keeps the embedding outside the LLM) -> ``decoder.embed_tokens.*``;
* ``llm.base_model.model.model.*`` (PEFT's wrapping) or ``llm.model.*`` -> ``decoder.*``, the LM head
  ``decoder.lm_head.*`` (absent when tied: the file keeps one copy of the shared tensor);
* LoRA (``X.base_layer.weight`` + ``X.lora_A.default.weight`` + ``X.lora_B.default.weight``) is
  merged: ``X.weight = W + (lora_alpha / r) * B @ A``, PEFT's ``merge`` for a plain LoRA.

What SALM's config sets and oasr does not implement is refused naming the key and the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from oasr.models.base import LoadError, TokenizerSpec
from oasr.models.canary_qwen.config import (
    AUDIO_LOCATOR_TAG,
    DEFAULT_PROMPT,
    CanaryQwenConfig,
    ModalityAdapterConfig,
)
from oasr.models.decoders.causal_lm import CausalLmConfig
from oasr.models.formats.hf import (
    bpe_tokenizer_path,
    drop_tied_lm_head,
    llm_decoding_spec,
    load_hf_weights,
    read_json,
    rename_prefixed,
)
from oasr.models.formats.nemo import (
    ANY_VALUE,
    NEMO_ENCODER_RENAMES,
    check_section,
    check_target,
    encoder_fields_from_nemo,
    mel_from_nemo,
    rename,
)
from oasr.models.parakeet.config import ParakeetEncoderConfig
from oasr.models.registry import CheckpointBundle

ARCH = "canary_qwen"
LLM_BACKBONE_DIR = "llm_backbone"  # where SALM's checkpoint keeps the LLM's config

# SALM's config keys: what inference reads, or what has no effect on it (training, loading).
_SALM_KEYS: dict[str, Any] = {
    "model_type": ANY_VALUE,
    "architectures": ANY_VALUE,
    "pretrained_llm": ANY_VALUE,
    "pretrained_asr": ANY_VALUE,  # the perception's initialisation: the weights are in the checkpoint
    "pretrained_weights": ANY_VALUE,
    "tokenizer_path": ANY_VALUE,
    "trust_remote_code": (False,),
    "use_nemo_automodel": (False,),
    "prompt_format": ("qwen",),
    "audio_locator_tag": ANY_VALUE,
    "lora": ANY_VALUE,  # checked below
    "perception": ANY_VALUE,  # checked below
    "encoder_chunk_size_seconds": (None,),
    "freeze_params": ANY_VALUE,
    "prevent_freeze_params": ANY_VALUE,
    "optimizer": ANY_VALUE,
    "lr_scheduler": ANY_VALUE,
    "activation_checkpointing": ANY_VALUE,
    "torch_dtype": ANY_VALUE,
    "pretrained_s2s_model": (None,),
    "pretrained_perception_from_s2s": (None,),
    "init_from_checkpoint": (None,),
}
_PERCEPTION_KEYS: dict[str, Any] = {
    "target": ("nemo.collections.speechlm2.modules.perception.AudioPerceptionModule",),
    "_target_": ("nemo.collections.speechlm2.modules.perception.AudioPerceptionModule",),
    "output_dim": ANY_VALUE,
    "preprocessor": ANY_VALUE,
    "encoder": ANY_VALUE,
    "modality_adapter": ANY_VALUE,
    "spec_augment": ANY_VALUE,  # training only
}
# PEFT LoraConfig fields: what a plain LoRA merge implements.
_LORA_KEYS: dict[str, Any] = {
    "task_type": ("CAUSAL_LM",),
    "r": ANY_VALUE,
    "lora_alpha": ANY_VALUE,
    "lora_dropout": ANY_VALUE,  # training only
    "target_modules": ANY_VALUE,  # read off the weights
    "bias": ("none",),
    "use_rslora": (False,),
    "use_dora": (False,),
    "fan_in_fan_out": (False,),
    "init_lora_weights": ANY_VALUE,
    "inference_mode": ANY_VALUE,
    "rank_pattern": ({},),
    "alpha_pattern": ({},),
    "modules_to_save": (None,),
    "layers_to_transform": (None,),
}

_LLM_PREFIXES = (
    ("embed_tokens.", "decoder.embed_tokens."),
    ("llm.base_model.model.model.", "decoder."),
    ("llm.base_model.model.lm_head.", "decoder.lm_head."),
    ("llm.model.", "decoder."),
    ("llm.lm_head.", "decoder.lm_head."),
)
_PERCEPTION_RENAMES = (
    *NEMO_ENCODER_RENAMES,
    (re.compile(r"^modality_adapter\.pre_encode\."), "modality_adapter.subsampling.linear."),
)
_PERCEPTION_PARTS = ("encoder.", "modality_adapter.", "proj.")
_LORA_A = re.compile(r"^(.*)\.lora_A\.([^.]+)\.weight$")


def _salm_config(path: Path) -> dict[str, Any] | None:
    """``config.json`` when it is SALM's (a perception, an LLM and an audio locator tag)."""
    cfg = path / "config.json"
    if not (path.is_dir() and cfg.is_file()):
        return None
    try:
        data = read_json(cfg)
    except LoadError:
        return None
    if not isinstance(data, dict) or not all(k in data for k in ("perception", "pretrained_llm", "audio_locator_tag")):
        return None
    return data


def _section(cfg: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = cfg.get(key)
    if not isinstance(value, dict):
        raise LoadError(f"{where}: config.json has no {key} section")
    return value


def _llm_dir(path: Path, cfg: Mapping[str, Any]) -> Path:
    """Where the LLM's ``config.json`` is: ``llm_backbone/``, else a local ``pretrained_llm``."""
    if (path / LLM_BACKBONE_DIR / "config.json").is_file():
        return path / LLM_BACKBONE_DIR
    local = Path(str(cfg["pretrained_llm"])).expanduser()
    if (local / "config.json").is_file():
        return local
    raise LoadError(
        f"{path}: the LLM's config is not here: pretrained_llm={cfg['pretrained_llm']!r} is no local directory "
        f"and there is no {LLM_BACKBONE_DIR}/config.json (save the LLM's config.json there, as SALM.from_pretrained "
        f"reads it)"
    )


def _text_config(llm_dir: Path) -> CausalLmConfig:
    hf = read_json(llm_dir / "config.json")
    kind = str(hf.get("model_type", ""))
    if not kind.startswith("qwen3") or kind.startswith("qwen3_moe"):
        raise LoadError(f"{llm_dir}/config.json: model_type={kind!r} is not implemented by oasr (a Qwen3 LM)")
    try:
        return CausalLmConfig.from_hf(hf, model_type="qwen3")
    except ValueError as e:
        raise LoadError(f"{llm_dir}/config.json: {e}") from e


def _token(value: Any) -> str | None:
    """A ``tokenizer_config.json`` token entry (a string or an ``AddedToken`` dict) as text."""
    return value.get("content") if isinstance(value, dict) else value


def _tokenizer(path: Path, llm_dir: Path, tag: str) -> tuple[TokenizerSpec, int, int]:
    """The tokenizer (beside the checkpoint, else the LLM's), the audio tag's id and the eos id.

    SALM adds the tag to the LLM's tokenizer as a special token: a tokenizer saved without it
    gives it the next id, as that addition does.
    """
    from oasr.tokenizers import load_tokenizer

    directory = path if (path / "tokenizer_config.json").is_file() else llm_dir
    tpath = bpe_tokenizer_path(directory, "Canary-Qwen")
    tok_cfg = read_json(directory / "tokenizer_config.json") if (directory / "tokenizer_config.json").is_file() else {}
    eos = _token(tok_cfg.get("eos_token"))
    if not eos:
        raise LoadError(f"{directory}: tokenizer_config.json names no eos_token (SALM stops generation at it)")
    tok = load_tokenizer(TokenizerSpec(kind="huggingface", path=str(tpath)))
    eos_id = tok.token_to_id(eos)
    if eos_id is None:
        raise LoadError(f"{directory}: the tokenizer has no eos token {eos!r}")
    tag_id = tok.token_to_id(tag)
    if tag_id is None:
        tag_id = tok.vocab_size
    special = {eos_id, tag_id, *tok.special_ids}
    return TokenizerSpec(kind="huggingface", path=str(tpath), special_ids=tuple(sorted(special))), tag_id, eos_id


def merge_lora(state: dict[str, torch.Tensor], lora: Mapping[str, Any], where: str) -> None:
    """Fold every LoRA pair into its base weight (in place): W + (alpha / r) B A, in float32 or
    wider, stored back in the base weight's dtype.

    Raises:
        LoadError: a pair without its base weight or its B, a rank other than ``r``, another
            adapter name than ``default``, or LoRA tensors the config does not declare.
    """
    pairs = [(m.group(1), m.group(2)) for m in map(_LORA_A.match, state) if m]
    if pairs and not lora:
        raise LoadError(f"{where}: the weights hold LoRA adapters but config.json has no lora section")
    if lora:
        check_section(lora, _LORA_KEYS, "lora")
    r, alpha = int(lora.get("r", 8)), float(lora.get("lora_alpha", 8))
    for module, adapter in pairs:
        if adapter != "default":
            raise LoadError(f"{where}: LoRA adapter {adapter!r} of {module} is not implemented by oasr (one 'default')")
        a = state.pop(f"{module}.lora_A.{adapter}.weight")
        b = state.pop(f"{module}.lora_B.{adapter}.weight", None)
        w = state.pop(f"{module}.base_layer.weight", None)
        if b is None or w is None:
            raise LoadError(f"{where}: LoRA on {module} lacks its lora_B or base_layer weight")
        if a.shape[0] != r or b.shape[1] != r:
            raise LoadError(f"{where}: LoRA on {module} has rank {a.shape[0]} but lora.r={r}")
        wide = torch.promote_types(w.dtype, torch.float32)
        state[f"{module}.weight"] = (w.to(wide) + (alpha / r) * (b.to(wide) @ a.to(wide))).to(w.dtype)
        bias = state.pop(f"{module}.base_layer.bias", None)
        if bias is not None:
            state[f"{module}.bias"] = bias
    left = sorted(k for k in state if ".lora_" in k or ".base_layer." in k)
    if left:
        raise LoadError(f"{where}: LoRA tensors oasr does not merge: {left[:4]}")


def _state(path: Path, lora: Mapping[str, Any], tie_word_embeddings: bool) -> dict[str, torch.Tensor]:
    """SALM's tensors in the model's names, LoRA merged."""
    raw = load_hf_weights(path)
    merge_lora(raw, lora, str(path))
    state: dict[str, torch.Tensor] = {}
    perception = {k[len("perception.") :]: v for k, v in raw.items() if k.startswith("perception.")}
    for name, tensor in rename(perception, _PERCEPTION_RENAMES).items():
        state["encoder." + name if name.startswith(_PERCEPTION_PARTS) else "perception." + name] = tensor
    for name, tensor in raw.items():
        if not name.startswith("perception."):
            state[rename_prefixed(name, _LLM_PREFIXES)] = tensor
    if tie_word_embeddings:
        drop_tied_lm_head(state, path, "decoder.lm_head.weight", "decoder.embed_tokens.weight")
    return state


def _encoder_config(cls: type[ParakeetEncoderConfig], fields: dict[str, Any], where: str) -> Any:
    try:
        return cls.from_dict(fields)
    except (TypeError, ValueError) as e:
        raise LoadError(f"{where}: {e}") from e


class SalmConverter:
    """A Canary-Qwen (``SALM``) checkpoint directory."""

    architecture = ARCH
    auto_detect = True
    # The mel filterbank and window of the preprocessor: oasr computes them.
    expected_unused_prefixes: tuple[str, ...] = ("perception.preprocessor.",)
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        return _salm_config(Path(path)) is not None

    def load(self, path: Path) -> CheckpointBundle:
        path = Path(path)
        cfg = _salm_config(path)
        if cfg is None:
            raise LoadError(f"{path}: no SALM config.json")
        where = str(path)
        check_section(cfg, _SALM_KEYS, "config")
        perception = _section(cfg, "perception", where)
        check_section(perception, _PERCEPTION_KEYS, "perception")
        features = mel_from_nemo(_section(perception, "preprocessor", where), "perception.preprocessor")
        n_mels = int(features.params["feature_size"])
        enc = encoder_fields_from_nemo(_section(perception, "encoder", where), n_mels, "perception.encoder")
        encoder = _encoder_config(ParakeetEncoderConfig, enc, "perception.encoder")
        adapter_cfg = _section(perception, "modality_adapter", where)
        check_target(adapter_cfg, "ConformerEncoder", "perception.modality_adapter")
        adapter_fields = encoder_fields_from_nemo(adapter_cfg, encoder.hidden_size, "perception.modality_adapter")
        adapter = _encoder_config(ModalityAdapterConfig, adapter_fields, "perception.modality_adapter")
        llm_dir = _llm_dir(path, cfg)
        text = _text_config(llm_dir)
        if int(perception.get("output_dim", text.hidden_size)) != text.hidden_size:
            raise LoadError(
                f"{where}: perception.output_dim={perception['output_dim']} != the LLM's hidden_size={text.hidden_size}"
            )
        tag = str(cfg["audio_locator_tag"])
        tspec, tag_id, eos_id = _tokenizer(path, llm_dir, tag)
        try:
            config = CanaryQwenConfig(
                encoder=encoder,
                adapter=adapter,
                text=text,
                audio_locator_tag=tag,
                audio_token_id=tag_id,
                prompt=DEFAULT_PROMPT.replace(AUDIO_LOCATOR_TAG, tag),
                eos_token_ids=(eos_id,),
                tokenizer_path=tspec.path,
            )
        except ValueError as e:
            raise LoadError(f"{where}: {e}") from e
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=_state(path, cfg.get("lora") or {}, text.tie_word_embeddings),
            tokenizer=tspec,
            features=features,
            # SALM.generate's own GenerationConfig (bos / eos / pad only): greedy.
            decoding=llm_decoding_spec({}),
            source=where,
            format="salm",
        )
