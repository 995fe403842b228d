"""Reading Hugging Face checkpoint directories: JSON configs and weights in every
layout ``save_pretrained`` writes (safetensors or ``.bin``, single file or sharded)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from oasr.models.base import LoadError


def read_json(path: Path) -> dict[str, Any]:
    """A JSON file's object, or a ``LoadError`` naming the file."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LoadError(f"{path}: cannot read JSON ({e})") from None


def read_json_if_present(path: Path) -> dict[str, Any]:
    """``read_json`` of an optional file (``generation_config.json``, ...): {} when it is absent."""
    return read_json(path) if Path(path).is_file() else {}


def feature_extractor_config(directory: Path) -> tuple[dict[str, Any], Path | None]:
    """The feature-extractor settings of a directory and the file they came from:
    ``preprocessor_config.json`` (hub releases), else the ``feature_extractor`` entry that
    transformers 5 writes into ``processor_config.json``; ({}, None) when neither has them."""
    pre_file = Path(directory) / "preprocessor_config.json"
    if pre_file.is_file():
        return read_json(pre_file), pre_file
    proc_file = Path(directory) / "processor_config.json"
    if proc_file.is_file():
        fe = read_json(proc_file).get("feature_extractor")
        if isinstance(fe, dict):
            return fe, proc_file
    return {}, None


def bpe_tokenizer_path(directory: Path, family: str) -> Path:
    """A byte-level BPE tokenizer's path: ``tokenizer.json``, else the directory itself when it
    holds ``vocab.json`` + ``merges.txt``.

    Raises:
        LoadError: neither (naming the directory and the ``family``).
    """
    directory = Path(directory)
    if (directory / "tokenizer.json").is_file():
        return directory / "tokenizer.json"
    if (directory / "vocab.json").is_file() and (directory / "merges.txt").is_file():
        return directory
    raise LoadError(f"{directory} has no {family} tokenizer: expected tokenizer.json or vocab.json + merges.txt")


def token_ids(value: Any) -> list[int]:
    """A config's token-id field (``eos_token_id``: None, one id or a list) as a list."""
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def model_type(directory: Path) -> str | None:
    """``config.json``'s ``model_type`` (None when there is no readable config): a cheap sniff."""
    cfg = Path(directory) / "config.json"
    if not cfg.is_file():
        return None
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data.get("model_type") if isinstance(data, dict) else None


def load_hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a Hugging Face weights directory, on the host.

    Raises:
        LoadError: no ``model.safetensors``, ``pytorch_model.bin`` or sharded index.
    """
    from safetensors.torch import load_file

    directory = Path(directory)
    if (directory / "model.safetensors").is_file():
        return load_file(str(directory / "model.safetensors"), device="cpu")
    for index_name, read in (
        ("model.safetensors.index.json", lambda f: load_file(str(f), device="cpu")),
        ("pytorch_model.bin.index.json", lambda f: torch.load(f, map_location="cpu", weights_only=True)),
    ):
        index = directory / index_name
        if index.is_file():
            out: dict[str, torch.Tensor] = {}
            for shard in sorted(set(read_json(index)["weight_map"].values())):
                out.update(read(directory / shard))
            return out
    if (directory / "pytorch_model.bin").is_file():
        return torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise LoadError(f"{directory}: no model.safetensors, pytorch_model.bin or sharded index")


def llm_decoding_spec(gen: dict[str, Any]):
    """A speech-LLM's decoding defaults from its ``generation_config.json`` dict.

    transformers samples only with ``do_sample``; without it ``generate`` is greedy and
    the temperature, top-k and top-p are ignored, so greedy is what is declared.
    """
    from oasr.models.base import DecodeType, DecodingSpec

    params: dict[str, Any] = {}
    sample = bool(gen.get("do_sample", False))
    params["temperature"] = float(gen.get("temperature", 1.0)) if sample else 0.0
    if sample:
        params["top_k"] = int(gen.get("top_k", 50) or 0)
        params["top_p"] = float(gen.get("top_p", 1.0))
    if gen.get("repetition_penalty") is not None:
        params["repetition_penalty"] = float(gen["repetition_penalty"])
    if gen.get("max_new_tokens") is not None:
        params["max_new_tokens"] = int(gen["max_new_tokens"])
    return DecodingSpec(decode_type=DecodeType.LLM, params=params)


def rename_prefixed(name: str, prefixes: tuple[tuple[str, str], ...]) -> str:
    """``name`` with the first of ``prefixes`` (checkpoint prefix -> model prefix, longest
    first) it starts with replaced; a name under none comes back unchanged (and is then
    reported as dropped)."""
    for old, new in prefixes:
        if name.startswith(old):
            return new + name[len(old) :]
    return name


def renamed_llm_state(
    directory: Path, prefixes: tuple[tuple[str, str], ...], tie_word_embeddings: bool
) -> dict[str, torch.Tensor]:
    """A speech LLM's weights in the model's names (``rename_prefixed``); with tied embeddings
    a saved LM head is dropped after checking it is the embedding (``drop_tied_lm_head``)."""
    state = {rename_prefixed(k, prefixes): v for k, v in load_hf_weights(directory).items()}
    if tie_word_embeddings:
        drop_tied_lm_head(state, directory, "decoder.lm_head.weight", "decoder.embed_tokens.weight")
    return state


def drop_tied_lm_head(state: dict[str, torch.Tensor], path: Path, head: str, embedding: str) -> None:
    """With tied embeddings, drop a saved copy of the LM head (in place) after checking it is
    the token embedding.

    Raises:
        LoadError: the saved head differs from the embedding.
    """
    weight = state.pop(head, None)
    if weight is not None and not torch.equal(weight, state.get(embedding, weight)):
        raise LoadError(f"{path}: tie_word_embeddings is set but lm_head differs from the token embedding")
