"""Voxtral checkpoint converter: a transformers ``voxtral`` directory.

Two key layouts reach the same model names:

* saved (what transformers writes, and the published releases): ``audio_tower.*``,
  ``multi_modal_projector.*``, ``language_model.model.*`` / ``language_model.lm_head.weight``
  (4.x) or ``language_model.*`` (5.x);
* in memory (transformers 5.x ``state_dict()``): ``model.audio_tower.*``,
  ``model.multi_modal_projector.*``, ``model.language_model.*``, ``lm_head.weight``.

The tokenizer: ``tokenizer.json`` (what transformers saves with a fast tokenizer), else the
release's ``tekken.json`` converted to the same ``tokenizers`` form by transformers' own
tekken converter (``transformers.integrations.mistral``; no mistral-common needed for
tekken files that list their special tokens, as the Voxtral releases do). The converted
file is kept next to nothing of the checkpoint: it is written under ``$OASR_CACHE_DIR``
(default ``~/.cache/oasr``), keyed by the tekken file's digest.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from oasr.models.base import FeatureSpec, LoadError, TokenizerSpec
from oasr.models.formats.hf import llm_decoding_spec as _decoding_spec
from oasr.models.formats.hf import model_type as hf_model_type
from oasr.models.formats.hf import (
    read_json,
    read_json_if_present,
    renamed_llm_state,
    token_ids,
)
from oasr.models.registry import CheckpointBundle
from oasr.models.speech_llm.convert import whisper_extractor_spec
from oasr.models.voxtral.config import AUDIO_TOKEN, DEFAULT_IDS, EOS_TOKEN, VoxtralConfig

ARCH = "voxtral"

# Checkpoint prefix -> model prefix, longest first.
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("language_model.model.", "decoder."),
    ("language_model.lm_head.", "decoder.lm_head."),
    ("model.language_model.", "decoder."),
    ("language_model.", "decoder."),
    ("model.audio_tower.", "audio_tower."),
    ("model.multi_modal_projector.", "multi_modal_projector."),
    ("audio_tower.", "audio_tower."),
    ("multi_modal_projector.", "multi_modal_projector."),
    ("lm_head.", "decoder.lm_head."),
)


def _cache_dir() -> Path:
    return Path(os.environ.get("OASR_CACHE_DIR") or Path.home() / ".cache" / "oasr")


def tekken_to_tokenizer_json(tekken: Path) -> Path:
    """``tekken.json`` as a ``tokenizer.json`` (transformers' tekken converter), cached by digest.

    Raises:
        LoadError: transformers is missing, or the file cannot be converted.
    """
    digest = hashlib.sha256(tekken.read_bytes()).hexdigest()[:16]
    out = _cache_dir() / "tekken" / digest / "tokenizer.json"
    if out.is_file():
        return out
    try:
        from transformers.integrations.mistral.tokenizer import MistralConverter
    except ImportError as e:
        raise LoadError(
            f"{tekken}: reading a tekken tokenizer needs transformers (pip install transformers), "
            "or save the tokenizer as tokenizer.json"
        ) from e
    try:
        tok = MistralConverter(str(tekken)).converted()
    except Exception as e:  # the converter's own errors (an old tekken without special_tokens, ...)
        raise LoadError(f"{tekken}: cannot convert the tekken tokenizer: {e}") from e
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    tok.save(str(tmp))
    tmp.replace(out)
    return out


def _tokenizer(directory: Path) -> tuple[TokenizerSpec, dict[str, int | None]]:
    """The tokenizer spec and the ids it gives the family's special tokens."""
    from oasr.tokenizers import load_tokenizer

    if (directory / "tokenizer.json").is_file():
        path = directory / "tokenizer.json"
    elif (directory / "tekken.json").is_file():
        path = tekken_to_tokenizer_json(directory / "tekken.json")
    else:
        raise LoadError(f"{directory} has no Voxtral tokenizer: expected tokenizer.json or tekken.json")
    tok = load_tokenizer(TokenizerSpec(kind="huggingface", path=str(path)))
    ids = {t: tok.token_to_id(t) for t in DEFAULT_IDS}
    missing = [t for t, i in ids.items() if i is None]
    if missing:
        raise LoadError(f"{path}: the tokenizer lacks Voxtral's special tokens {missing}")
    return TokenizerSpec(kind="huggingface", path=str(path), special_ids=tuple(sorted(ids.values()))), ids


def _feature_spec(directory: Path, n_mels: int, window_s: int) -> FeatureSpec:
    """Whisper's extractor with the Voxtral processor's padding: every clip zero-padded to a
    whole number of 30-s windows (``pad_to_multiple_of`` 480000 samples, no truncation); the
    model reads the windows one by one."""
    spec = whisper_extractor_spec(directory, n_mels, family="Voxtral", padding={"pad_to_multiple": True})
    if spec.params["chunk_length"] != window_s:
        raise LoadError(
            f"{directory}: chunk_length={spec.params['chunk_length']} s but the tower reads {window_s}-s windows"
        )
    return spec


class HFVoxtralConverter:
    """A transformers ``VoxtralForConditionalGeneration`` directory (config.json
    ``model_type: voxtral``; safetensors, sharded or .bin; tokenizer.json or tekken.json;
    optional generation_config.json and processor / preprocessor config)."""

    architecture = ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = ()
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        return path.is_dir() and hf_model_type(path) == "voxtral"

    def load(self, path: Path) -> CheckpointBundle:
        hf = read_json(path / "config.json")
        tspec, special = _tokenizer(path)
        gen = read_json_if_present(path / "generation_config.json")
        text_eos = token_ids((hf.get("text_config") or {}).get("eos_token_id"))
        stops = token_ids(gen.get("eos_token_id")) or text_eos or [special[EOS_TOKEN]]
        try:
            config = VoxtralConfig.from_hf(
                hf, special_ids=special, stop_ids=tuple(dict.fromkeys(stops)), tokenizer_path=tspec.path
            )
        except ValueError as e:
            raise LoadError(f"{path}: {e}") from e
        if special[AUDIO_TOKEN] != config.audio_token_id:
            raise LoadError(f"{path}: the tokenizer's {AUDIO_TOKEN} is not config audio_token_id")
        # transformers' VoxtralForConditionalGeneration always has its own lm_head (never tied).
        state = renamed_llm_state(path, _PREFIXES, config.text.tie_word_embeddings)
        window_s = config.audio.n_frames * 160 // 16000
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=tspec,
            features=_feature_spec(path, config.audio.num_mel_bins, window_s),
            decoding=_decoding_spec(gen),
            source=str(path),
            format="huggingface",
        )
