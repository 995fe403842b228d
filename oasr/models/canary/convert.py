"""NeMo's own Canary checkpoints (``EncDecMultiTaskModel``): a ``.nemo`` archive or its unpacked
directory. ``model_config.yaml`` is checked section by section (``oasr.models.formats.nemo``): the
mel front end, the FastConformer encoder, ``model_defaults``, ``transf_encoder`` (none),
``transf_decoder`` (NeMo's transformer), ``head`` (one tied linear layer), the aggregate tokenizer
(``type: agg`` with NeMo's ``CanaryTokenizer``: ``spl_tokens`` and one SentencePiece model per
language), ``prompt_format`` / ``prompt_defaults`` and the ``decoding`` defaults. A key or value
oasr does not implement is refused naming both.

Of ``decoding.beam`` NeMo 3.0 reads ``beam_size``, ``length_penalty`` (0 when absent) and
``max_generation_delta``; the release configs' ``len_pen`` is not read by NeMo, nor here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oasr.models.base import DecodeType, DecodingSpec, LoadError, TokenizerSpec
from oasr.models.canary.config import PROMPT_FORMATS, CanaryConfig, CanaryDecoderConfig
from oasr.models.formats.nemo import (
    ANY_VALUE,
    NEMO_COMPUTED_PREFIXES,
    NEMO_CONFIG,
    NEMO_ENCODER_RENAMES,
    check_section,
    check_target,
    encoder_fields_from_nemo,
    mel_from_nemo,
    nemo_target,
    read_nemo,
    rename,
)
from oasr.models.parakeet.config import ParakeetEncoderConfig
from oasr.models.registry import CheckpointBundle

ARCH = "canary"
NEMO_CLASS = "EncDecMultiTaskModel"

_TOP_KEYS = {
    "sample_rate": ANY_VALUE,
    "prompt_format": PROMPT_FORMATS,
    "prompt_defaults": ANY_VALUE,
    "model_defaults": ANY_VALUE,
    "tokenizer": ANY_VALUE,
    "preprocessor": ANY_VALUE,
    "spec_augment": ANY_VALUE,  # training only
    "encoder": ANY_VALUE,
    "transf_encoder": ANY_VALUE,
    "transf_decoder": ANY_VALUE,
    "head": ANY_VALUE,
    "decoding": ANY_VALUE,
    "loss": ANY_VALUE,
    "train_ds": ANY_VALUE,
    "validation_ds": ANY_VALUE,
    "test_ds": ANY_VALUE,
    "optim": ANY_VALUE,
    "target": ANY_VALUE,
    "nemo_version": ANY_VALUE,
    "use_loss_mask_for_prompt": ANY_VALUE,
    "restore_timestamps_model": ANY_VALUE,
    "multitask_metrics_cfg": ANY_VALUE,
    "log_prediction": ANY_VALUE,
    "prompt_dropout": ANY_VALUE,
}
_TRANSF_DECODER_KEYS = {
    "_target_": ANY_VALUE,
    "model_name": (None,),
    "pretrained": (False,),
    "encoder": (None,),
    "pre_ln_final_layer_norm": (True, False),
    "config_dict": ANY_VALUE,
}
_DECODER_DICT_KEYS = {
    "max_sequence_length": ANY_VALUE,
    "num_token_types": ANY_VALUE,  # token-type embeddings are not used at inference
    "embedding_dropout": ANY_VALUE,
    "learn_positional_encodings": (False,),
    "hidden_size": ANY_VALUE,
    "inner_size": ANY_VALUE,
    "num_layers": ANY_VALUE,
    "num_attention_heads": ANY_VALUE,
    "ffn_dropout": ANY_VALUE,
    "attn_score_dropout": ANY_VALUE,
    "attn_layer_dropout": ANY_VALUE,
    "hidden_act": ("relu", "gelu"),
    "pre_ln": (True, False),
    "vocab_size": ANY_VALUE,
}
_HEAD_KEYS = {
    "_target_": ANY_VALUE,
    "num_layers": (1,),
    "activation": ANY_VALUE,  # between layers; a one-layer head has none
    "log_softmax": ANY_VALUE,  # NeMo's searches apply it (beam) or take the argmax (greedy)
    "hidden_size": ANY_VALUE,
    "num_classes": ANY_VALUE,
    "dropout": ANY_VALUE,
    "use_transformer_init": ANY_VALUE,
}
_DECODING_KEYS = {
    "strategy": ("beam", "greedy", "greedy_batch"),
    "return_best_hypothesis": (True,),
    "compute_hypothesis_token_set": ANY_VALUE,
    "preserve_alignments": ANY_VALUE,
    "confidence_cfg": ANY_VALUE,
    "compute_langs": ANY_VALUE,
    "greedy": ANY_VALUE,
    "beam": ANY_VALUE,
    "temperature": ANY_VALUE,  # not read by NeMo's searches (greedy.temperature is)
    "return_xattn_scores": ANY_VALUE,
}
_BEAM_KEYS = {
    "beam_size": ANY_VALUE,
    "search_type": ("default",),
    "len_pen": ANY_VALUE,  # not read by NeMo 3.0's MultiTaskDecoding (length_penalty is)
    "length_penalty": ANY_VALUE,
    "max_generation_delta": ANY_VALUE,
    "return_best_hypothesis": (True,),
    "preserve_alignments": ANY_VALUE,
    "ngram_lm_model": (None,),
    "ngram_lm_alpha": ANY_VALUE,
    "boosting_tree": ANY_VALUE,
    "boosting_tree_alpha": (0, 0.0),
}
_GREEDY_KEYS = {
    "temperature": (None,),
    "max_generation_delta": ANY_VALUE,
    "preserve_alignments": ANY_VALUE,
    "preserve_token_confidence": ANY_VALUE,
    "confidence_method_cfg": ANY_VALUE,
    "n_samples": (1,),
    "ngram_lm_model": (None,),
}
_LANG_KEYS = {
    "dir": ANY_VALUE,
    "type": ("bpe",),
    "model_path": ANY_VALUE,
    "vocab_path": ANY_VALUE,
    "spe_tokenizer_vocab": ANY_VALUE,
}
_TOKENIZER_KEYS = {"dir": ANY_VALUE, "type": ("agg",), "langs": ANY_VALUE, "custom_tokenizer": ANY_VALUE}

# NeMo tensor names -> oasr's.
_RENAMES = (
    (re.compile(r"^transf_decoder\._embedding\."), "decoder.embedding."),
    (re.compile(r"^transf_decoder\._decoder\.final_layer_norm\."), "decoder.final_norm."),
    (re.compile(r"^transf_decoder\._decoder\.layers\."), "decoder.layers."),
    (re.compile(r"^log_softmax\.mlp\.layer0\."), "decoder.head."),
)
# The sine table (computed) and token-type embeddings (unused at inference).
_UNUSED = (
    *NEMO_COMPUTED_PREFIXES,
    "decoder.embedding.position_embedding.",
    "decoder.embedding.token_type_embedding.",
)


def _section(cfg: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = cfg.get(key)
    if not isinstance(value, dict):
        raise LoadError(f"{where}: {NEMO_CONFIG} has no {key} section")
    return value


def _decoding(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The search defaults NeMo's ``MultiTaskDecoding`` reads from the archive's ``decoding``."""
    dec = cfg.get("decoding") or {}
    check_section(dec, _DECODING_KEYS, "decoding")
    beam, greedy = dec.get("beam") or {}, dec.get("greedy") or {}
    check_section(beam, _BEAM_KEYS, "decoding.beam")
    check_section(greedy, _GREEDY_KEYS, "decoding.greedy")
    strategy = dec.get("strategy", "beam")
    if strategy == "beam":
        size = int(beam.get("beam_size", 1))
        if size < 1:
            raise LoadError(f"decoding.beam.beam_size={size} is not implemented by oasr (an integer >= 1)")
        return {
            "strategy": "beam",
            "beam_size": size,
            "length_penalty": float(beam.get("length_penalty", 0.0)),
            "max_generation_delta": int(beam.get("max_generation_delta", -1)),
        }
    return {
        "strategy": "greedy",
        "beam_size": 1,
        "length_penalty": 0.0,
        "max_generation_delta": int(greedy.get("max_generation_delta", -1)),
    }


def _prompt_defaults(cfg: Mapping[str, Any]) -> dict[str, str]:
    turns = cfg.get("prompt_defaults") or []
    for turn in turns:
        if isinstance(turn, dict) and turn.get("role") == "user":
            return {str(k): str(v) for k, v in (turn.get("slots") or {}).items() if v is not None}
    return {}


def is_canary_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a NeMo checkpoint of ``EncDecMultiTaskModel``."""
    return nemo_target(Path(path)) == NEMO_CLASS


class NemoCanaryConverter:
    """A ``.nemo`` archive or unpacked directory of NeMo's ``EncDecMultiTaskModel`` -> ``canary``."""

    architecture = ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = _UNUSED
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        return is_canary_checkpoint(Path(path))

    def load(self, path: Path) -> CheckpointBundle:
        ckpt = read_nemo(Path(path))
        cfg, where = ckpt.config, str(ckpt.source)
        check_section(cfg, _TOP_KEYS, "model")
        features = mel_from_nemo(_section(cfg, "preprocessor", where), "preprocessor")
        enc_fields = encoder_fields_from_nemo(
            _section(cfg, "encoder", where), int(features.params["feature_size"]), "encoder"
        )
        transf_encoder = cfg.get("transf_encoder") or {}
        if int(transf_encoder.get("num_layers", 0)) != 0:
            raise LoadError(
                f"{where}: transf_encoder.num_layers={transf_encoder['num_layers']} is not implemented by oasr "
                "(a Transformer encoder between the FastConformer and the decoder; the releases have 0)"
            )
        td = _section(cfg, "transf_decoder", where)
        check_section(td, _TRANSF_DECODER_KEYS, "transf_decoder")
        cd = _section(td, "config_dict", where)
        check_section(cd, _DECODER_DICT_KEYS, "transf_decoder.config_dict")
        head = _section(cfg, "head", where)
        check_target(head, "TokenClassifier", "head")
        check_section(head, _HEAD_KEYS, "head")
        tokenizers = self._tokenizers(ckpt, where)
        defaults = dict(_section(cfg, "model_defaults", where))
        try:
            encoder = ParakeetEncoderConfig.from_dict(enc_fields)
            decoder = CanaryDecoderConfig(
                vocab_size=int(ckpt.state_dict["transf_decoder._embedding.token_embedding.weight"].shape[0])
                if "transf_decoder._embedding.token_embedding.weight" in ckpt.state_dict
                else 0,
                hidden_size=int(cd["hidden_size"]),
                inner_size=int(cd["inner_size"]),
                num_layers=int(cd["num_layers"]),
                num_attention_heads=int(cd["num_attention_heads"]),
                max_sequence_length=int(cd.get("max_sequence_length", 512)),
                hidden_act=str(cd.get("hidden_act", "relu")),
                pre_ln=bool(cd.get("pre_ln", False)),
                pre_ln_final_layer_norm=bool(td.get("pre_ln_final_layer_norm", True)),
                encoder_hidden=int(defaults.get("asr_enc_hidden", encoder.hidden_size)),
            )
        except (TypeError, ValueError) as e:
            raise LoadError(f"{where}: {e}") from e
        if decoder.encoder_hidden != encoder.hidden_size:
            raise LoadError(
                f"{where}: model_defaults.asr_enc_hidden={decoder.encoder_hidden} but encoder.d_model="
                f"{encoder.hidden_size}"
            )
        n_pieces = sum(_pieces(p) for _, p in tokenizers)
        if decoder.vocab_size != 8 * math.ceil(n_pieces / 8):
            raise LoadError(
                f"{where}: the decoder has {decoder.vocab_size} token rows; the tokenizer's {n_pieces} pieces "
                f"give {8 * math.ceil(n_pieces / 8)}"
            )
        decoding = _decoding(cfg)
        config = CanaryConfig(
            encoder=encoder,
            decoder=decoder,
            prompt_format=str(cfg.get("prompt_format")),
            tokenizers=tokenizers,
            prompt_defaults=_prompt_defaults(cfg),
            decoding=decoding,
            window_stride=float(
                cfg["preprocessor"].get("window_stride", features.params["hop_length"] / features.sampling_rate)
            ),
        )
        state = rename(rename(ckpt.state_dict, NEMO_ENCODER_RENAMES), _RENAMES)
        languages = [name for name, _ in tokenizers if name != "spl_tokens"]
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=TokenizerSpec(kind="none"),
            features=features,
            decoding=DecodingSpec(DecodeType.MULTITASK, params={**decoding, "languages": languages}),
            source=where,
            format="nemo",
        )

    @staticmethod
    def _tokenizers(ckpt, where: str) -> tuple[tuple[str, str], ...]:
        tok = _section(ckpt.config, "tokenizer", where)
        check_section(tok, _TOKENIZER_KEYS, "tokenizer")
        custom = tok.get("custom_tokenizer") or {}
        target = str(custom.get("_target_", "")).rsplit(".", 1)[-1]
        if target != "CanaryTokenizer":
            raise LoadError(
                f"tokenizer.custom_tokenizer._target_={custom.get('_target_')!r} is not implemented by oasr "
                "(expected NeMo's CanaryTokenizer)"
            )
        langs = _section(tok, "langs", where)
        parts = []
        for name, sub in langs.items():
            check_section(sub, _LANG_KEYS, f"tokenizer.langs.{name}")
            parts.append((str(name), str(ckpt.artefact(sub.get("model_path"), f"tokenizer.langs.{name}.model_path"))))
        if not parts or parts[0][0] != "spl_tokens":
            raise LoadError(f"{where}: tokenizer.langs must start with spl_tokens, got {[p[0] for p in parts]}")
        return tuple(parts)


def _pieces(model_path: str) -> int:
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=model_path).get_piece_size()
