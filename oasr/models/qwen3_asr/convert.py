"""Qwen3-ASR checkpoint converters: the transformers ``qwen3_asr`` layout (the ``-hf``
conversions) and the original release layout (``thinker_config``, ``thinker.*`` keys),
both renamed onto the names of ``oasr.models.qwen3_asr.model``:

* ``model.audio_tower.*`` / ``thinker.audio_tower.*`` -> ``encoder.*``;
* ``model.multi_modal_projector.linear_{1,2}.*`` (transformers) and
  ``thinker.audio_tower.proj{1,2}.*`` (original) -> ``encoder.proj{1,2}.*``;
* ``model.language_model.*`` / ``thinker.model.*`` -> ``decoder.*``;
* ``lm_head.weight`` / ``thinker.lm_head.weight``: dropped when the embeddings are tied
  (it must equal the token embedding), else ``decoder.lm_head.weight``.

A directory also holds the tokenizer (``tokenizer.json``, or ``vocab.json`` +
``merges.txt`` with ``tokenizer_config.json``), ``generation_config.json`` and the feature
extractor settings (``preprocessor_config.json``, or the ``feature_extractor`` entry of
the ``processor_config.json`` transformers 5 writes). The chat-token ids come from the
tokenizer and must agree with the config. The forced-aligner checkpoints share
``model_type: qwen3_asr`` and are refused by name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oasr.models.base import FeatureSpec, LoadError, TokenizerSpec
from oasr.models.formats.hf import (
    bpe_tokenizer_path,
    feature_extractor_config,
    read_json,
    read_json_if_present,
    renamed_llm_state,
    token_ids,
)
from oasr.models.formats.hf import llm_decoding_spec as _decoding_spec
from oasr.models.qwen3_asr.config import (
    ASR_TEXT_TOKEN,
    AUDIO_END_TOKEN,
    AUDIO_PAD_TOKEN,
    AUDIO_START_TOKEN,
    ENDOFTEXT_TOKEN,
    IM_END_TOKEN,
    IM_START_TOKEN,
    Qwen3AsrConfig,
)
from oasr.models.registry import CheckpointBundle

ARCH = "qwen3_asr"

# Checkpoint prefix -> model prefix, first match wins (the transformers layout, including
# the ``language_model.model.`` naming of older conversions).
_HF_PREFIXES = (
    ("model.audio_tower.", "encoder."),
    ("audio_tower.", "encoder."),
    ("model.multi_modal_projector.linear_1.", "encoder.proj1."),
    ("model.multi_modal_projector.linear_2.", "encoder.proj2."),
    ("multi_modal_projector.linear_1.", "encoder.proj1."),
    ("multi_modal_projector.linear_2.", "encoder.proj2."),
    ("model.language_model.", "decoder."),
    ("language_model.model.", "decoder."),
    ("language_model.lm_head.", "decoder.lm_head."),
    ("language_model.", "decoder."),
    ("lm_head.", "decoder.lm_head."),
)
_ORIGINAL_PREFIXES = (
    ("thinker.audio_tower.", "encoder."),
    ("thinker.model.", "decoder."),
    ("thinker.lm_head.", "decoder.lm_head."),
)

# Processor settings of transformers' Qwen3ASRFeatureExtractor, for keys a config omits.
_FEATURE_DEFAULTS: dict[str, Any] = {
    "feature_size": 128,
    "sampling_rate": 16000,
    "hop_length": 160,
    "chunk_length": 30,
    "n_fft": 400,
    "min_length": 8000,
    "dither": 0.0,
}
_FEATURE_EXTRACTORS = ("Qwen3ASRFeatureExtractor", "WhisperFeatureExtractor")


def _config_json(path: Path) -> dict[str, Any] | None:
    cfg = path / "config.json"
    if not (path.is_dir() and cfg.is_file()):
        return None
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _added_tokens(directory: Path) -> dict[str, tuple[int, bool]]:
    """The tokenizer's added tokens: content -> (id, special)."""
    out: dict[str, tuple[int, bool]] = {}
    if (directory / "tokenizer.json").is_file():
        for t in read_json(directory / "tokenizer.json").get("added_tokens") or []:
            out[t["content"]] = (int(t["id"]), bool(t.get("special", False)))
    if (directory / "tokenizer_config.json").is_file():
        for i, t in (read_json(directory / "tokenizer_config.json").get("added_tokens_decoder") or {}).items():
            out.setdefault(t["content"], (int(i), bool(t.get("special", False))))
    return out


def _tokenizer(directory: Path) -> tuple[TokenizerSpec, dict[str, int]]:
    """The tokenizer spec and the ids of the chat tokens.

    Raises:
        LoadError: no tokenizer, or one without the Qwen3-ASR chat tokens.
    """
    path = bpe_tokenizer_path(directory, "Qwen3-ASR")
    added = _added_tokens(directory)
    names = (IM_START_TOKEN, IM_END_TOKEN, ENDOFTEXT_TOKEN, AUDIO_START_TOKEN, AUDIO_END_TOKEN, AUDIO_PAD_TOKEN)
    missing = [n for n in (*names, ASR_TEXT_TOKEN) if n not in added]
    if missing:
        raise LoadError(f"{directory}: the tokenizer lacks the Qwen3-ASR token(s) {missing}")
    ids = {n: added[n][0] for n in (*names, ASR_TEXT_TOKEN)}
    # Special tokens are not text; <asr_text> is, so the transcript can be split on it.
    special = tuple(sorted({i for content, (i, sp) in added.items() if sp and content != ASR_TEXT_TOKEN}))
    special = tuple(sorted({*special, *(ids[n] for n in names)}))
    return TokenizerSpec(kind="huggingface", path=str(path), special_ids=special), ids


def _feature_spec(directory: Path, n_mels: int) -> FeatureSpec:
    """The extractor settings as a ``whisper_mel`` spec.

    Qwen3-ASR's extractor is Whisper's log-mel of each clip as it is (no 30-s padding,
    no truncation; the clamp to ``max - 8`` over the clip), except that a clip shorter
    than ``min_length`` samples is first zero-padded to it (the padding counts as audio).
    """
    pre, _ = feature_extractor_config(directory)
    kind = pre.get("feature_extractor_type", _FEATURE_EXTRACTORS[0])
    if kind not in _FEATURE_EXTRACTORS:
        raise LoadError(f"{directory}: feature extractor {kind!r} is not supported (expected {_FEATURE_EXTRACTORS})")
    p = {k: _FEATURE_DEFAULTS[k] if pre.get(k) is None else pre[k] for k in _FEATURE_DEFAULTS}
    if float(p["dither"]) != 0.0:
        raise LoadError(f"{directory}: dither={p['dither']} is not supported (the published extractor has 0.0)")
    if int(p["feature_size"]) != n_mels:
        raise LoadError(f"{directory}: the extractor makes {p['feature_size']} mel bins but the tower reads {n_mels}")
    return FeatureSpec(
        kind="whisper_mel",
        sampling_rate=int(p["sampling_rate"]),
        params={
            "n_mels": n_mels,
            "n_fft": int(p["n_fft"]),
            "hop_length": int(p["hop_length"]),
            "chunk_length": int(p["chunk_length"]),
            "pad_to_chunk": False,
            "min_length": int(p["min_length"]),
        },
    )


class _Qwen3AsrConverter:
    """Shared reading of both layouts; subclasses say which one and how keys are named."""

    architecture = ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = ()
    capability_drop_hints: Mapping[str, str] = {}
    original_layout: bool
    prefixes: tuple[tuple[str, str], ...]
    format: str

    def can_load(self, path: Path) -> bool:
        data = _config_json(path)
        if data is None or data.get("model_type") != "qwen3_asr":
            return False
        return isinstance(data.get("thinker_config"), dict) == self.original_layout

    def load(self, path: Path) -> CheckpointBundle:
        hf = read_json(path / "config.json")
        thinker = hf.get("thinker_config") if self.original_layout else None
        if isinstance(thinker, dict) and "forced_aligner" in str(thinker.get("model_type", "")):
            raise LoadError(
                f"{path} is a Qwen3-ForcedAligner checkpoint (a timestamp classifier), not a Qwen3-ASR "
                f"transcription model"
            )
        tspec, ids = _tokenizer(path)
        gen = read_json_if_present(path / "generation_config.json")
        stops = token_ids(gen.get("eos_token_id")) or token_ids((thinker or hf).get("eos_token_id"))
        stops += [ids[ENDOFTEXT_TOKEN], ids[IM_END_TOKEN]]
        config = Qwen3AsrConfig.from_hf(
            hf,
            audio_start_token_id=ids[AUDIO_START_TOKEN],
            audio_end_token_id=ids[AUDIO_END_TOKEN],
            im_start_token_id=ids[IM_START_TOKEN],
            im_end_token_id=ids[IM_END_TOKEN],
            asr_text_token_id=ids[ASR_TEXT_TOKEN],
            eos_token_ids=tuple(dict.fromkeys(stops)),
            tokenizer_path=tspec.path,
        )
        if config.audio_token_id != ids[AUDIO_PAD_TOKEN]:
            raise LoadError(
                f"{path}: config audio_token_id={config.audio_token_id} but the tokenizer gives "
                f"{AUDIO_PAD_TOKEN} the id {ids[AUDIO_PAD_TOKEN]}"
            )
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=renamed_llm_state(path, self.prefixes, config.text.tie_word_embeddings),
            tokenizer=tspec,
            features=_feature_spec(path, config.audio.num_mel_bins),
            decoding=_decoding_spec(gen),
            source=str(path),
            format=self.format,
        )


class HFQwen3AsrConverter(_Qwen3AsrConverter):
    """A transformers ``Qwen3ASRForConditionalGeneration`` directory (the ``-hf`` releases:
    ``audio_config`` / ``text_config`` at the top of ``config.json``)."""

    original_layout = False
    prefixes = _HF_PREFIXES
    format = "huggingface"


class OriginalQwen3AsrConverter(_Qwen3AsrConverter):
    """The original Qwen3-ASR release (``Qwen/Qwen3-ASR-0.6B`` / ``-1.7B``: ``thinker_config``
    in ``config.json``, ``thinker.*`` tensors, the projection head inside the audio tower)."""

    original_layout = True
    prefixes = _ORIGINAL_PREFIXES
    format = "qwen3_asr"
