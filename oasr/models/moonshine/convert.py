"""The transformers ``moonshine`` layout (``MoonshineForConditionalGeneration.save_pretrained``, the
UsefulSensors releases): ``config.json``, ``model.safetensors``, ``generation_config.json``, the
tokenizer (``tokenizer.json``) and the feature extractor (``preprocessor_config.json``: transformers'
``Wav2Vec2FeatureExtractor`` on the raw samples, without normalisation in the releases: read as
the wav2vec2 family reads it).

Tensor names: ``model.encoder.*`` -> ``encoder.*``, ``model.decoder.*`` -> ``decoder.*``,
``proj_out.weight`` -> ``decoder.proj_out.weight``; with tied embeddings (the releases) a saved
head must equal the token embedding, and an omitted one is the embedding.

Decoding defaults are the generation config's (greedy; its decoder-start and end ids) and the
model card's generation limit per second of audio (``MAX_LENGTH_PER_SECOND``), declared as the
``max_length_per_second`` decoding parameter the ``llm`` strategy reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oasr.models.base import TokenizerSpec
from oasr.models.formats.hf import (
    bpe_tokenizer_path,
    drop_tied_lm_head,
    llm_decoding_spec,
    load_hf_weights,
    model_type,
    read_json,
    read_json_if_present,
    rename_prefixed,
    token_ids,
)
from oasr.models.moonshine.config import MAX_LENGTH_PER_SECOND, MoonshineConfig
from oasr.models.registry import CheckpointBundle
from oasr.models.wav2vec2.convert import waveform_feature_spec

ARCH = "moonshine"

_PREFIXES = (
    ("model.encoder.", "encoder."),
    ("model.decoder.", "decoder."),
    ("proj_out.", "decoder.proj_out."),
)


def _tokenizer(directory: Path) -> TokenizerSpec:
    path = bpe_tokenizer_path(directory, "Moonshine")
    special: set[int] = set()
    if path.name == "tokenizer.json":
        special |= {int(t["id"]) for t in read_json(path).get("added_tokens") or [] if t.get("special")}
    for i, t in (read_json_if_present(directory / "tokenizer_config.json").get("added_tokens_decoder") or {}).items():
        if t.get("special"):
            special.add(int(i))
    return TokenizerSpec(kind="huggingface", path=str(path), special_ids=tuple(sorted(special)))


class HFMoonshineConverter:
    """A transformers ``MoonshineForConditionalGeneration`` directory."""

    architecture = ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = ()
    capability_drop_hints: dict[str, str] = {}

    def can_load(self, path: Path) -> bool:
        return Path(path).is_dir() and model_type(Path(path)) == "moonshine"

    def load(self, path: Path) -> CheckpointBundle:
        path = Path(path)
        hf = read_json(path / "config.json")
        gen = read_json_if_present(path / "generation_config.json")
        eos = token_ids(gen.get("eos_token_id"))
        start = {"decoder_start_token_id": gen["decoder_start_token_id"]} if "decoder_start_token_id" in gen else {}
        config = MoonshineConfig.from_hf({**hf, **start}, eos_token_id=eos[0] if eos else None)
        tspec = _tokenizer(path)
        config.tokenizer_path = tspec.path
        state = {rename_prefixed(k, _PREFIXES): v for k, v in load_hf_weights(path).items()}
        if config.tie_word_embeddings:
            head = state.get("decoder.proj_out.weight")
            drop_tied_lm_head(state, path, "decoder.proj_out.weight", "decoder.embed_tokens.weight")
            # The model's head is its own Linear (so int8 quantises it): the embedding's values.
            state["decoder.proj_out.weight"] = head if head is not None else state["decoder.embed_tokens.weight"]
        decoding = llm_decoding_spec(gen)
        params: dict[str, Any] = dict(decoding.params)
        params["max_length_per_second"] = MAX_LENGTH_PER_SECOND
        # Longer audio could not hold its budget in the decoder's context (and the encoder's
        # attention is quadratic in it): split it (vad_filter) instead.
        params["max_audio_s"] = round(config.max_position_embeddings / MAX_LENGTH_PER_SECOND, 1)
        decoding = type(decoding)(decode_type=decoding.decode_type, params=params)
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=tspec,
            features=waveform_feature_spec(path),
            decoding=decoding,
            source=str(path),
            format="huggingface",
        )
