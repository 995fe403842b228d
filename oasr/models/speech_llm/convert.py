"""Qwen2-Audio checkpoint converter: a transformers ``qwen2_audio`` directory.

Three key layouts reach the same model names:

* saved (what transformers 4.x and 5.x write, and the published releases):
  ``audio_tower.*``, ``multi_modal_projector.*``, ``language_model.model.*``,
  ``language_model.lm_head.weight``;
* in memory (transformers 5.x ``Qwen2AudioForConditionalGeneration.state_dict()``):
  ``model.audio_tower.*``, ``model.multi_modal_projector.*``, ``model.language_model.*``,
  ``lm_head.weight``;
* a 5.x re-save of a 4.x checkpoint: ``language_model.model.model.*`` (the LM prefix
  doubled).

The LM lands on ``decoder.*`` (``oasr.models.decoders.causal_lm`` keeps Qwen2's names
below the prefix); the audio side keeps its names.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from oasr.models.base import FeatureSpec, LoadError, TokenizerSpec
from oasr.models.formats.hf import (
    bpe_tokenizer_path,
    feature_extractor_config,
    read_json,
    read_json_if_present,
    rename_prefixed,
    renamed_llm_state,
    token_ids,
)
from oasr.models.formats.hf import llm_decoding_spec as _decoding_spec
from oasr.models.formats.hf import model_type as hf_model_type
from oasr.models.registry import CheckpointBundle
from oasr.models.speech_llm.config import (
    AUDIO_BOS_TOKEN,
    AUDIO_EOS_TOKEN,
    AUDIO_TOKEN,
    ENDOFTEXT_TOKEN,
    IM_END_TOKEN,
    IM_START_TOKEN,
    Qwen2AudioConfig,
)

ARCH = "speech_llm"

# Checkpoint prefix -> model prefix, longest first (the re-save layout must win over the saved one).
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("language_model.model.model.", "decoder."),
    ("language_model.model.lm_head.", "decoder.lm_head."),
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

_SPECIAL_TOKENS = (AUDIO_TOKEN, AUDIO_BOS_TOKEN, AUDIO_EOS_TOKEN, IM_START_TOKEN, IM_END_TOKEN, ENDOFTEXT_TOKEN)


def rename_key(name: str) -> str:
    """A checkpoint tensor name (any of the three layouts) -> the model's name.

    Names outside the layouts come back unchanged (and are reported as dropped).
    """
    return rename_prefixed(name, _PREFIXES)


def _tokenizer(directory: Path) -> tuple[TokenizerSpec, dict[str, int | None]]:
    """The tokenizer spec and the ids it gives the family's special tokens."""
    from oasr.tokenizers import load_tokenizer

    path = bpe_tokenizer_path(directory, "Qwen2-Audio")
    tok = load_tokenizer(TokenizerSpec(kind="huggingface", path=str(path)))
    ids = {t: tok.token_to_id(t) for t in _SPECIAL_TOKENS}
    if ids[AUDIO_BOS_TOKEN] is None or ids[AUDIO_EOS_TOKEN] is None:
        raise LoadError(f"{path}: the tokenizer has no {AUDIO_BOS_TOKEN} / {AUDIO_EOS_TOKEN} tokens")
    special = tuple(sorted({i for i in ids.values() if i is not None}))
    return TokenizerSpec(kind="huggingface", path=str(path), special_ids=special), ids


def _chat_templates(directory: Path) -> list[str]:
    """Every chat template the directory ships (processor, tokenizer or standalone file)."""
    out = []
    if (directory / "chat_template.jinja").is_file():
        out.append((directory / "chat_template.jinja").read_text(encoding="utf-8"))
    for name in ("chat_template.json", "processor_config.json", "tokenizer_config.json"):
        if (directory / name).is_file():
            value = read_json(directory / name).get("chat_template")
            if isinstance(value, str):
                out.append(value)
            elif isinstance(value, list):  # named templates: [{"name": ..., "template": ...}]
                out.extend(v.get("template", "") for v in value if isinstance(v, Mapping))
    return out


def whisper_extractor_spec(directory: Path, n_mels: int, *, family: str, padding: Mapping[str, bool]) -> FeatureSpec:
    """WhisperFeatureExtractor settings (``preprocessor_config.json``, or the
    ``feature_extractor`` entry transformers 5.x writes into ``processor_config.json``) as a
    ``whisper_mel`` spec with the ``family`` processor's ``padding`` (``pad_to_chunk`` /
    ``pad_to_multiple``, see ``oasr.audio.whisper_frontend``)."""
    pre, _ = feature_extractor_config(directory)
    kind = pre.get("feature_extractor_type", "WhisperFeatureExtractor")
    if kind != "WhisperFeatureExtractor":
        raise LoadError(f"{directory}: feature extractor {kind!r} is not supported ({family} uses Whisper's)")
    if float(pre.get("dither", 0.0)) != 0.0:
        raise LoadError(f"{directory}: dither={pre['dither']} is not supported (the published extractor has 0.0)")
    feature_size = int(pre.get("feature_size", n_mels))
    if feature_size != n_mels:
        raise LoadError(f"{directory}: the extractor makes {feature_size} mel bins but the tower reads {n_mels}")
    return FeatureSpec(
        kind="whisper_mel",
        sampling_rate=int(pre.get("sampling_rate", 16000)),
        params={
            "n_mels": n_mels,
            "n_fft": int(pre.get("n_fft", 400)),
            "hop_length": int(pre.get("hop_length", 160)),
            "chunk_length": int(pre.get("chunk_length", 30)),
            **padding,
        },
    )


class HFQwen2AudioConverter:
    """A transformers ``Qwen2AudioForConditionalGeneration`` directory (config.json
    ``model_type: qwen2_audio``; safetensors, sharded or .bin; tokenizer; optional
    generation_config.json and processor / preprocessor config)."""

    architecture = ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = ()
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        return path.is_dir() and hf_model_type(path) == "qwen2_audio"

    def load(self, path: Path) -> CheckpointBundle:
        hf = read_json(path / "config.json")
        tspec, special = _tokenizer(path)
        gen = read_json_if_present(path / "generation_config.json")
        text_eos = token_ids((hf.get("text_config") or {}).get("eos_token_id"))
        stops = token_ids(gen.get("eos_token_id")) or text_eos
        stops += [i for i in (special[ENDOFTEXT_TOKEN], special[IM_END_TOKEN]) if i is not None]
        chat = any(AUDIO_BOS_TOKEN in t for t in _chat_templates(path))
        try:
            config = Qwen2AudioConfig.from_hf(
                hf,
                special_ids=special,
                stop_ids=tuple(dict.fromkeys(stops)),
                prompt_style="chat" if chat else "base",
                tokenizer_path=tspec.path,
            )
        except ValueError as e:
            raise LoadError(f"{path}: {e}") from e
        if special[AUDIO_TOKEN] is not None and special[AUDIO_TOKEN] != config.audio_token_id:
            raise LoadError(
                f"{path}: config audio_token_index={config.audio_token_id} but the tokenizer gives "
                f"{AUDIO_TOKEN} the id {special[AUDIO_TOKEN]}"
            )
        state = renamed_llm_state(path, _PREFIXES, config.text.tie_word_embeddings)
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=tspec,
            # The processor pads every clip to the 30-s window (and truncates longer ones),
            # returning the valid-frame mask the tower's key-padding reads.
            features=whisper_extractor_spec(
                path, config.audio.num_mel_bins, family="Qwen2-Audio", padding={"pad_to_chunk": True}
            ),
            decoding=_decoding_spec(gen),
            source=str(path),
            format="huggingface",
            metadata={"prompt_style": config.prompt_style},
        )
