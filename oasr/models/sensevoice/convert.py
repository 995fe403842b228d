"""A FunASR SenseVoiceSmall directory, as released, -> the sensevoice family.

The directory holds::

    config.yaml          model: SenseVoiceSmall, encoder: SenseVoiceEncoderSmall, encoder_conf,
                         frontend_conf (WavFrontend), tokenizer_conf, and training sections
    model.pt             the state dict (``embed``, ``encoder.*``, ``ctc.ctc_lo``)
    am.mvn               Kaldi nnet1 CMVN of the LFR features (Paraformer's reader)
    chn_jpn_yue_eng_ko_spectok.bpe.model
                         the sentencepiece model: text pieces and the tags (``<|zh|>``,
                         ``<|NEUTRAL|>``, ``<|Speech|>``, ``<|woitn|>``, ...) as user-defined pieces
    configuration.json   optional: ``file_path_metas`` naming the three files above (what funasr
                         reads them by); without it, the names above (``bpe.model`` also
                         accepted, as funasr reads a bare directory)

The shared FunASR pieces (CMVN, the front-end keys, the state-dict reader, the key checks) are
Paraformer's (``oasr.models.paraformer.convert``). ``SenseVoiceEncoderSmall`` builds its blocks
without reading ``input_layer``, ``pos_enc_class``, ``normalize_before``, ``concat_after``,
``selfattention_layer_type`` or ``positionwise_layer_type``, so neither does this reader; any
other key it does not know is a ``LoadError`` naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oasr.models.base import DecodeType, DecodingSpec, LoadError, TokenizerSpec
from oasr.models.paraformer.convert import (
    FunasrConverter,
    check_conf,
    check_frontend,
    feature_spec,
    read_cmvn,
    read_state_dict,
    refuse,
)
from oasr.models.registry import CheckpointBundle
from oasr.models.sensevoice.config import SenseVoiceConfig, SenseVoiceEncoderConfig
from oasr.models.sensevoice.tags import LANGUAGE_TAGS, TEXTNORM_TAGS, spell

ARCH = "sensevoice"
MODEL = "SenseVoiceSmall"
ENCODER = "SenseVoiceEncoderSmall"
BPE_NAMES = ("chn_jpn_yue_eng_ko_spectok.bpe.model", "bpe.model")

_ENC_FIELDS = ("output_size", "attention_heads", "linear_units", "num_blocks", "tp_blocks", "kernel_size", "sanm_shfit")
# Read by SenseVoiceEncoderSmall's signature and never used by it.
_ENC_IGNORED = frozenset(
    {
        "input_layer",
        "pos_enc_class",
        "normalize_before",
        "concat_after",
        "selfattention_layer_type",
        "positionwise_layer_type",
        "positionwise_conv_kernel_size",
        "padding_idx",
        "stochastic_depth_rate",
    }
)
_MODEL_IGNORED = frozenset({"length_normalized_loss", "sos", "eos", "ignore_id", "lsm_weight"})
_UNUSED = ("criterion_att.",)  # training-only


def _metas(directory: Path) -> dict[str, Any]:
    """``configuration.json``'s ``file_path_metas`` (empty without the file)."""
    path = directory / "configuration.json"
    if not path.is_file():
        return {}
    try:
        metas = json.loads(path.read_text(encoding="utf-8")).get("file_path_metas") or {}
    except (json.JSONDecodeError, AttributeError) as e:
        raise LoadError(f"{path}: not FunASR's configuration.json: {e}") from e
    return metas if isinstance(metas, dict) else {}


def _named(directory: Path, named: Any, defaults: tuple[str, ...], what: str) -> Path:
    """The file ``configuration.json`` names (``named``), else the first of ``defaults`` present."""
    if isinstance(named, str) and named:
        path = directory / named
        if not path.is_file():
            raise LoadError(f"{directory}: configuration.json names {what} {named!r}, which is not there")
        return path
    found = next((directory / n for n in defaults if (directory / n).is_file()), None)
    if found is None:
        raise LoadError(f"{directory}: no {what} ({' or '.join(defaults)})")
    return found


def model_config(where: Path, cfg: Mapping[str, Any], vocab_size: int) -> SenseVoiceConfig:
    """``config.yaml`` -> ``SenseVoiceConfig``, refusing what this family does not implement.

    Raises:
        LoadError: naming the ``config.yaml`` key and value.
    """
    if cfg.get("model") != MODEL:
        raise refuse(where, "model", cfg.get("model"), f"this family reads FunASR {MODEL} directories")
    if cfg.get("encoder") != ENCODER:
        raise refuse(where, "encoder", cfg.get("encoder"), f"a FunASR {MODEL} has encoder: {ENCODER}")
    input_size, lfr_m, lfr_n = check_frontend(where, cfg)
    enc = check_conf(where, "encoder_conf", dict(cfg.get("encoder_conf") or {}), _ENC_FIELDS, {}, _ENC_IGNORED)
    model_conf = dict(cfg.get("model_conf") or {})
    check_conf(where, "model_conf", model_conf, ("blank_id",), {}, _MODEL_IGNORED)
    try:
        return SenseVoiceConfig(
            encoder=SenseVoiceEncoderConfig(input_size=input_size, **enc),
            vocab_size=vocab_size,
            blank_id=int(model_conf.get("blank_id", 0)),
            lfr_m=lfr_m,
            lfr_n=lfr_n,
        )
    except (TypeError, ValueError) as e:
        raise LoadError(f"{where}: {e}") from e


def check_tokenizer(path: Path) -> int:
    """The sentencepiece model's size, after checking it has the tags SenseVoice writes.

    Raises:
        LoadError: not a sentencepiece model, or one without the language / ITN tags.
    """
    import sentencepiece

    try:
        sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as e:
        raise LoadError(f"{path}: not a sentencepiece model: {e}") from e
    missing = [
        spell(t)
        for t in (*LANGUAGE_TAGS, *TEXTNORM_TAGS)
        if sp.piece_to_id(spell(t)) == sp.unk_id() or sp.is_control(sp.piece_to_id(spell(t)))
    ]
    if missing:
        raise LoadError(f"{path}: no readable piece for {missing}: not SenseVoice's tokenizer")
    return int(sp.get_piece_size())


class FunasrSenseVoiceConverter(FunasrConverter):
    """A FunASR SenseVoiceSmall directory (``config.yaml`` + ``model.pt`` + ``am.mvn`` + the
    sentencepiece model)."""

    architecture = ARCH
    expected_unused_prefixes: tuple[str, ...] = _UNUSED

    def claims(self, directory: Path, cfg: Mapping[str, Any]) -> bool:
        return cfg.get("model") == MODEL

    def load(self, path: Path) -> CheckpointBundle:
        path = Path(path)
        directory, yml, cfg = self.read_config(path)
        metas = _metas(directory)
        weights = path if path.is_file() else _named(directory, metas.get("init_param"), ("model.pt",), "weights")
        bpe = _named(directory, (metas.get("tokenizer_conf") or {}).get("bpemodel"), BPE_NAMES, "tokenizer")
        mvn = _named(directory, (metas.get("frontend_conf") or {}).get("cmvn_file"), ("am.mvn",), "CMVN")
        vocab_size = check_tokenizer(bpe)
        config = model_config(yml, cfg, vocab_size)

        state = read_state_dict(weights)
        head = state.pop("ctc.ctc_lo.weight", None)
        if head is None:
            raise LoadError(f"{weights}: no CTC head (ctc.ctc_lo.weight)")
        if head.shape[0] != vocab_size:
            raise LoadError(
                f"{bpe.name} has {vocab_size} pieces but the CTC head in {weights.name} has {head.shape[0]} rows"
            )
        state["ctc.weight"] = head
        if "ctc.ctc_lo.bias" in state:
            state["ctc.bias"] = state.pop("ctc.ctc_lo.bias")
        state["encoder.cmvn_shift"], state["encoder.cmvn_scale"] = read_cmvn(mvn, config.encoder.input_size)

        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=TokenizerSpec(kind="sentencepiece", path=str(bpe)),
            features=feature_spec(cfg),
            decoding=DecodingSpec(DecodeType.RICH_CTC, params={"model": MODEL}),
            source=str(weights),
            format="funasr",
            metadata={"config_yaml": str(yml)},
        )


__all__ = ["FunasrSenseVoiceConverter", "check_tokenizer", "model_config"]
