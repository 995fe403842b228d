"""The transformers ``moonshine_streaming`` layout (``MoonshineStreamingForConditionalGeneration``
``save_pretrained``: config.json, safetensors, generation_config.json, tokenizer.json,
preprocessor_config.json) renamed onto ``oasr.models.moonshine_streaming.model``:

* ``model.encoder.*`` -> ``encoder.*`` (``embedder.comp.log_k`` -> ``embedder.log_k``); the
  encoder's unit-offset norms scale by ``gamma + 1``, stored as their LayerNorm ``weight``;
* ``model.decoder.*`` -> ``decoder.*``; ``proj_out.weight`` -> ``decoder.proj_out.weight``
  (with ``tie_word_embeddings`` a missing head is the token embedding).

The front end is the waveform itself (``Wav2Vec2FeatureExtractor`` without normalisation:
``moonshine_waveform``, which streams);
the decoding defaults are the generation config's (greedy unless it samples) with the
model's per-second token budget.
"""

from __future__ import annotations

from pathlib import Path

from oasr.models.base import FeatureSpec, LoadError, TokenizerSpec
from oasr.models.formats.hf import (
    feature_extractor_config,
    llm_decoding_spec,
    load_hf_weights,
    model_type,
    read_json,
    read_json_if_present,
    rename_prefixed,
    token_ids,
)
from oasr.models.moonshine_streaming.config import MoonshineStreamingConfig
from oasr.models.registry import CheckpointBundle

ARCH = "moonshine_streaming"
_PREFIXES = (
    ("model.encoder.embedder.comp.", "encoder.embedder."),
    ("model.encoder.", "encoder."),
    ("model.decoder.", "decoder."),
    ("proj_out.", "decoder.proj_out."),
)
MAX_AUDIO_S = 64.0  # Moonshine's documented range (0.1 - 64 s); the adapter covers 81.9 s


def _feature_spec(directory: Path, sample_rate: int) -> FeatureSpec:
    pre, where = feature_extractor_config(directory)
    kind = pre.get("feature_extractor_type", "Wav2Vec2FeatureExtractor")
    if kind != "Wav2Vec2FeatureExtractor":
        raise LoadError(f"{where}: feature extractor {kind!r} is not supported (expected Wav2Vec2FeatureExtractor)")
    if pre.get("do_normalize"):
        raise LoadError(f"{where}: do_normalize is set, but Moonshine Streaming normalises each frame itself")
    rate = int(pre.get("sampling_rate", sample_rate))
    if rate != sample_rate:
        raise LoadError(f"{where}: sampling_rate {rate} but the encoder reads {sample_rate} Hz")
    return FeatureSpec(kind="moonshine_waveform", sampling_rate=rate)


class HFMoonshineStreamingConverter:
    """A transformers ``MoonshineStreamingForConditionalGeneration`` directory."""

    architecture = ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = ()
    capability_drop_hints: dict[str, str] = {}

    def can_load(self, path: Path) -> bool:
        return path.is_dir() and model_type(path) == ARCH

    def load(self, path: Path) -> CheckpointBundle:
        hf = read_json(path / "config.json")
        gen = read_json_if_present(path / "generation_config.json")
        if gen.get("decoder_start_token_id") is not None and hf.get("decoder_start_token_id") is None:
            hf = {**hf, "decoder_start_token_id": gen["decoder_start_token_id"]}
        stops = tuple(dict.fromkeys(token_ids(gen.get("eos_token_id")) or token_ids(hf.get("eos_token_id", 2))))
        config = MoonshineStreamingConfig.from_hf(hf, eos_token_ids=stops)
        tokenizer = path / "tokenizer.json"
        if not tokenizer.is_file():
            raise LoadError(f"{path} has no tokenizer.json")
        state = {}
        for name, tensor in load_hf_weights(path).items():
            name = rename_prefixed(name, _PREFIXES)
            if name.startswith("encoder.") and name.endswith(".gamma"):
                name, tensor = name[: -len("gamma")] + "weight", tensor + 1.0
            state[name] = tensor
        if config.tie_word_embeddings and "decoder.proj_out.weight" not in state:
            state["decoder.proj_out.weight"] = state["decoder.embed_tokens.weight"]
        decoding = llm_decoding_spec(gen)
        decoding.params["max_audio_s"] = MAX_AUDIO_S
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=TokenizerSpec(
                kind="huggingface",
                path=str(tokenizer),
                special_ids=tuple(sorted({config.pad_token_id, config.decoder_start_token_id, *stops})),
            ),
            features=_feature_spec(path, config.sample_rate),
            decoding=decoding,
            source=str(path),
            format="huggingface",
        )
